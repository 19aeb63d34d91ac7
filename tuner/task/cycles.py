"""The vectorized cycle model: cycles of many plans on one case at once (lower is better).

Plans arrive index-encoded (``plans x knobs``, catalogue order); a single plan is a batch of one,
so ``benchmark.py`` and the search path share every line. The model follows
``shared/design/benchmark-model.md`` section 4; each inefficiency named in ``PENALTIES`` can be
switched off, which is how :mod:`tuner.task.trace` attributes cycles to components.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import cache
from math import prod

import numpy as np

from tuner.plan import SPACE
from tuner.task import machine as hw
from tuner.task.geometry import GEOMETRY_KNOBS, MAX_CTAS, geometry
from tuner.task.suites import Case

BY_NAME, KNOBS, POSITION = SPACE.by_name, SPACE.knobs, SPACE.position

PENALTIES = ("bank_conflicts", "dma_penalty", "spill", "scratchpad_pressure", "sync_epilogue", "tail", "memory")

LAYOUT_ROW, LAYOUT_COL, LAYOUT_BLOCKED, LAYOUT_SWIZZLED = range(4)
ACC_SEQ, ACC_PAIRWISE, ACC_TREE, ACC_KAHAN = range(4)
SM_TWO_PASS, SM_ONLINE, SM_RENORM, SM_POLY = range(4)
SCHED_STATIC, SCHED_PERSISTENT, SCHED_SPLIT = range(3)
SWZ_NONE, SWZ_XOR, SWZ_TC = range(3)
EPI_SEPARATE, EPI_SCALE, EPI_SCALE_MASK = range(3)

ACCUM_FMA_PER_SCORE_CHUNK = np.array([0.0, 0.5, 0.25, 3.0])   # extra fp32 ops per score per head_dim chunk
POLY_OPS_PER_EXP = 4.0                                         # degree-3 Horner + range reduction
SOFTMAX_OPS_PER_SCORE = 3.0                                    # scale, max, subtract/sum
SYNC_CLK_PER_WARP = 6.0
CTA_START = 200.0
SWIZZLE_BYTES_PER_CLK = 32.0                                   # on-the-fly swizzle goes through registers
RESCALE_PER_ROW_DIM = np.array([0.0, 1.0, 0.25, 1.0])           # O rescale ops per row x head_dim, by softmax
O_STORE_EXPOSED = np.array([1.0, 0.75, 0.25])                  # share of the O store not hidden: row_major, blocked, streamed
EPILOGUE_CLK_PER_SCORE = np.array([                             # by epilogue; fused_scale pays on masked tiles only
    2 / hw.FMA_OPS_PER_CLK + hw.BYTES_FP32 * 2 / hw.SMEM_BYTES_PER_CLK,   # separate: extra pass through scratchpad
    0.0,
    0.25 / hw.FMA_OPS_PER_CLK,                                  # fused mask: predicates on every tile
])


def _values(name: str) -> np.ndarray:
    return np.array(BY_NAME[name].choices, dtype=np.float64)


_DRAM_EFFICIENCY = np.array([hw.DRAM_EFFICIENCY[b] for b in BY_NAME["dma_burst"].choices])
_VALUES = {name: _values(name) for name in ("block_m", "block_n", "block_k", "num_warps", "vector_width",
                                             "dma_stages", "prefetch_distance", "dma_burst", "split_k", "scratchpad_kb")}


@dataclass
class Columns:
    """Per-plan knob columns of a batch: ``*_i`` are indices, the rest numeric values (float64)."""

    idx: np.ndarray

    def flat(self, knobs: tuple[str, ...]) -> np.ndarray:
        """Row-major index of each plan in the grid of ``knobs`` (cached)."""
        key = "flat:" + ",".join(knobs)
        if key not in self.__dict__:
            self.__dict__[key] = np.ravel_multi_index(tuple(self.idx[:, POSITION[k]].astype(np.intp) for k in knobs),
                                                      tuple(BY_NAME[k].size for k in knobs))
        return self.__dict__[key]

    def __getattr__(self, name: str) -> np.ndarray:
        value = self.idx[:, POSITION[name[:-2]]].astype(np.intp) if name.endswith("_i") else _VALUES[name][self.idx[:, POSITION[name]]]
        setattr(self, name, value)
        return value


def _conflict(layout: np.ndarray, swizzle: np.ndarray, vec_bytes: np.ndarray, pitch: np.ndarray, bk: np.ndarray) -> np.ndarray:
    """Bank-conflict factor (>= 1) of reading one operand tile from scratchpad."""
    lanes = 128.0 / vec_bytes
    step = np.mod(pitch / vec_bytes, lanes)
    linear = np.gcd(lanes.astype(np.int64), step.astype(np.int64)).astype(np.float64)
    linear = np.where(step == 0, lanes, np.maximum(linear, 1.0))
    swizzled = layout == LAYOUT_SWIZZLED
    plain = np.where(swizzle == SWZ_XOR, 1.0 + (linear - 1.0) / 8.0, np.where(swizzle == SWZ_TC, 1.0, linear))
    wrong = np.where(swizzle == SWZ_XOR, 4.0, 8.0)              # swizzled data read with another swizzle
    right = np.where(bk >= 64, 1.0, 2.0)                          # tensorcore atom is 128 bytes
    return np.where(swizzled, np.where(swizzle == SWZ_TC, right, wrong), plain)


def _conflict_q(c: Columns, case: Case) -> np.ndarray:
    bk = np.minimum(c.block_k, case.d)
    pitch = np.where(c.q_layout_i == LAYOUT_COL, c.block_m * hw.BYTES_BF16, case.d * hw.BYTES_BF16)
    return _conflict(c.q_layout_i, c.swizzle_i, c.vector_width * hw.BYTES_BF16, pitch, bk)


def _kv_conflict(layout: np.ndarray, c: Columns, case: Case) -> np.ndarray:
    bk = np.minimum(c.block_k, case.d)
    pitch = np.where(layout == LAYOUT_COL, c.block_n * hw.BYTES_BF16, bk * hw.BYTES_BF16)
    return _conflict(layout, c.swizzle_i, c.vector_width * hw.BYTES_BF16, pitch, bk)


def _conflict_k(c: Columns, case: Case) -> np.ndarray:
    return _kv_conflict(c.k_layout_i, c, case)


def _conflict_v(c: Columns, case: Case) -> np.ndarray:
    return _kv_conflict(c.v_layout_i, c, case)


@cache
def _table(case: Case, knobs: tuple[str, ...], fn: Callable[..., object]) -> tuple[np.ndarray, ...]:
    """``fn`` evaluated once on every combination of ``knobs`` (the only knobs it may read)."""
    sizes = tuple(BY_NAME[k].size for k in knobs)
    grid = np.zeros((prod(sizes), len(KNOBS)), dtype=np.int16)
    for knob, column in zip(knobs, np.indices(sizes).reshape(len(knobs), -1), strict=True):
        grid[:, POSITION[knob]] = column
    out = fn(Columns(grid), case)
    return tuple(np.broadcast_to(np.asarray(o, dtype=np.float64), (len(grid),)).copy() for o in (out if isinstance(out, tuple) else (out,)))


def _lookup(c: Columns, case: Case, knobs: tuple[str, ...], fn: Callable[..., object]) -> tuple[np.ndarray, ...]:
    flat = c.flat(knobs)
    return tuple(t[flat] for t in _table(case, knobs, fn))


_Q_KNOBS = ("q_layout", "swizzle", "vector_width", "block_k", "block_m")
_K_KNOBS = ("k_layout", "swizzle", "vector_width", "block_k", "block_n")
_V_KNOBS = ("v_layout", "swizzle", "vector_width", "block_k", "block_n")
_REG_KNOBS = ("schedule", "num_warps", "block_m", "block_n", "accum", "epilogue", "vector_width")
_DMA_KNOBS = ("softmax", "k_layout", "v_layout", "block_n", "block_k", "dma_burst", "swizzle")
_FOOTPRINT_KNOBS = ("block_m", "block_n", "block_k", "dma_stages", "accum")


def conflict_factors(c: Columns, case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Conflict factors (>= 1) of the Q, K and V tiles."""
    return (_lookup(c, case, _Q_KNOBS, _conflict_q)[0], _lookup(c, case, _K_KNOBS, _conflict_k)[0],
            _lookup(c, case, _V_KNOBS, _conflict_v)[0])


def registers(c: Columns, case: Case) -> tuple[np.ndarray, ...]:
    """Registers per thread needed, the per-thread limit, math warps per group and column split."""
    return _lookup(c, case, _REG_KNOBS, _registers)


def _registers(c: Columns, case: Case) -> tuple[np.ndarray, ...]:
    split = c.schedule_i == SCHED_SPLIT
    group = np.where(split, np.maximum(c.num_warps / 2, 1), c.num_warps)
    row_groups = np.ceil(c.block_m / 16)
    col_split = np.where(group >= row_groups, np.floor(group / row_groups), 1.0)
    per_warp = np.where(group >= row_groups, 1.0, np.ceil(row_groups / group))
    math_warps = np.where(group >= row_groups, row_groups * col_split, group)
    acc = case.d / 2 * np.where(c.accum_i == ACC_KAHAN, 2.0, 1.0)
    score = c.block_n / (2 * col_split)
    need = per_warp * (acc + score) + 32 + c.vector_width / 2 + np.where(c.epilogue_i == EPI_SCALE_MASK, 8.0, 0.0)
    limit = np.minimum(hw.MAX_REGS_PER_THREAD, np.floor(hw.REGISTERS_PER_CORE / (c.num_warps * 32)))
    return need, limit, math_warps, col_split


def footprint_kb(c: Columns, case: Case) -> np.ndarray:
    """Scratchpad footprint (KB): Q tile + stages x (K and V chunk) + pairwise partial buffer."""
    return _lookup(c, case, _FOOTPRINT_KNOBS, _footprint_kb)[0]


def _footprint_kb(c: Columns, case: Case) -> np.ndarray:
    bk = np.minimum(c.block_k, case.d)
    q = c.block_m * case.d * hw.BYTES_BF16
    kv = c.dma_stages * 2 * c.block_n * bk * hw.BYTES_BF16
    partial = np.where(c.accum_i == ACC_PAIRWISE, c.block_m * c.block_n * hw.BYTES_FP32, 0.0)
    return (q + kv + partial) / 1024


def _run_bytes(layout: np.ndarray, c: Columns, case: Case, bk: np.ndarray) -> np.ndarray:
    """Contiguous bytes per DMA run of a K or V chunk (token gathers cut runs short)."""
    row = case.d * hw.BYTES_BF16
    chunk_rows = np.where(bk >= case.d, c.block_n * row, bk * hw.BYTES_BF16)
    tile = c.block_n * bk * hw.BYTES_BF16
    run = np.select([layout == LAYOUT_ROW, layout == LAYOUT_COL], [chunk_rows, c.block_n * hw.BYTES_BF16], tile)
    if case.kv_run:
        gather = np.select([layout == LAYOUT_ROW, layout == LAYOUT_COL],
                           [case.kv_run * np.minimum(row, chunk_rows), case.kv_run * hw.BYTES_BF16],
                           case.kv_run * bk * hw.BYTES_BF16)
        run = np.minimum(run, gather)
    return run


LIMITERS = ("registers", "warps", "hardware cap", "scratchpad allocation")


def _occupancy_limits(c: Columns, need: np.ndarray, limit: np.ndarray, ignore_scratchpad: bool) -> list[np.ndarray]:
    """CTAs per core each resource allows, in ``LIMITERS`` order."""
    return [np.floor(hw.REGISTERS_PER_CORE / (c.num_warps * 32 * np.minimum(need, limit))),
            np.floor(hw.MAX_WARPS_PER_CORE / c.num_warps),
            np.full_like(need, MAX_CTAS),
            np.full_like(need, np.inf) if ignore_scratchpad else np.floor(hw.SCRATCHPAD_KB / c.scratchpad_kb)]


def occupancy(c: Columns, need: np.ndarray, limit: np.ndarray, ignore_scratchpad: bool = False) -> np.ndarray:
    """Resident CTAs per core (float64, >= 1)."""
    regs, warps, cap, scratch = _occupancy_limits(c, need, limit, ignore_scratchpad)
    return np.maximum(np.minimum(np.minimum(regs, warps), np.minimum(cap, scratch)), 1.0)


def occupancy_limiter(c: Columns, need: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Index in ``LIMITERS`` of the resource that limits resident CTAs."""
    return np.stack(_occupancy_limits(c, need, limit, False)).argmin(axis=0)


def dma_traffic(c: Columns, case: Case) -> tuple[np.ndarray, ...]:
    """Per KV tile: useful bytes, bytes moved after burst rounding, bursts, bytes swizzled on the fly."""
    return _lookup(c, case, _DMA_KNOBS, _dma_traffic)


def _dma_traffic(c: Columns, case: Case) -> tuple[np.ndarray, ...]:
    bk = np.minimum(c.block_k, case.d)
    two_pass = c.softmax_i == SM_TWO_PASS
    useful_k = c.block_n * case.d * hw.BYTES_BF16 * np.where(two_pass, 2.0, 1.0)
    useful_v = c.block_n * case.d * hw.BYTES_BF16
    moved = np.zeros_like(useful_v)
    bursts = np.zeros_like(useful_v)
    for layout, useful in ((c.k_layout_i, useful_k), (c.v_layout_i, useful_v)):
        run = _run_bytes(layout, c, case, bk)
        per_run = np.ceil(run / c.dma_burst)
        moved = moved + useful / run * per_run * c.dma_burst
        bursts = bursts + useful / run * per_run
    on_the_fly = (c.swizzle_i == SWZ_TC) * ((c.k_layout_i != LAYOUT_SWIZZLED) * useful_k + (c.v_layout_i != LAYOUT_SWIZZLED) * useful_v)
    return useful_k + useful_v, moved, bursts, on_the_fly


def case_cycles(plans: np.ndarray | Columns, case: Case, removed: Collection[str] = ()) -> tuple[np.ndarray, np.ndarray]:
    """Cycles (float64) and feasibility (bool) of each plan on ``case``.

    ``plans`` is an index matrix or its :class:`Columns`. ``removed`` names entries of
    ``PENALTIES`` to switch off (for trace attribution). Infeasible plans get ``inf``.
    """
    g = geometry(case)
    c = plans if isinstance(plans, Columns) else Columns(np.asarray(plans))
    d = float(case.d)
    bm, bn, nw = c.block_m, c.block_n, c.num_warps
    bk = np.minimum(c.block_k, d)
    chunks = np.ceil(d / bk)
    gi = c.flat(GEOMETRY_KNOBS)
    feasible = fits(c, case)

    # Registers, spills and occupancy (4.2).
    need, limit, math_warps, col_split = registers(c, case)
    spilled = np.maximum(need - limit, 0.0) * ("spill" not in removed)
    ctas = occupancy(c, need, limit, ignore_scratchpad="scratchpad_pressure" in removed)

    # Compute per KV tile (4.4).
    split = c.schedule_i == SCHED_SPLIT
    two_pass = c.softmax_i == SM_TWO_PASS
    scores = bm * bn
    macs = scores * d * np.where(two_pass, 3.0, 2.0)
    feed = np.minimum(1.0, math_warps / hw.TC_FEED_WARPS)
    tc = macs / (hw.TC_MACS_PER_CLK * feed)
    poly = c.softmax_i == SM_POLY
    exps = np.where(poly, 0.0, scores)
    rescale = RESCALE_PER_ROW_DIM[c.softmax_i] * bm * d
    fma = (scores * (SOFTMAX_OPS_PER_SCORE + two_pass + poly * POLY_OPS_PER_EXP)
           + scores * chunks * ACCUM_FMA_PER_SCORE_CHUNK[c.accum_i]
           + rescale + scores * 0.5 * (c.swizzle_i == SWZ_XOR))
    softmax = np.maximum(exps / hw.SFU_EXP_PER_CLK, fma / hw.FMA_OPS_PER_CLK)

    fq, fk, fv = conflict_factors(c, case)
    if "bank_conflicts" in removed:
        fq = fk = fv = 1.0
    wg = np.ceil(bm / 64)
    vec = c.vector_width * hw.BYTES_BF16
    kv_bytes = bn * d * hw.BYTES_BF16 * wg
    smem = (bm * d * hw.BYTES_BF16 * fq + kv_bytes * (fk * np.where(two_pass, 2.0, 1.0) + fv)
            + (c.accum_i == ACC_PAIRWISE) * scores * hw.BYTES_FP32 * chunks)
    smem_time = smem / hw.SMEM_BYTES_PER_CLK * (1 + 4 / vec)
    matmul = np.maximum(tc, smem_time)
    overlap = split & (nw >= 8)
    compute = np.where(overlap, np.maximum(matmul, softmax) + 0.1 * np.minimum(matmul, softmax), matmul + softmax)

    # Per-tile synchronisation and epilogue work (sync_epilogue).
    tiles, items = g.tiles.take(gi), g.items.take(gi)
    masked_share = g.masked_tiles.take(gi) / np.maximum(tiles, 1.0)
    sync = (nw * SYNC_CLK_PER_WARP * (1 + split) + scores * EPILOGUE_CLK_PER_SCORE[c.epilogue_i]
            + (c.epilogue_i == EPI_SCALE) * masked_share * scores / hw.FMA_OPS_PER_CLK)
    if "sync_epilogue" in removed:
        sync = 0.0

    # DMA per KV tile (4.6).
    useful_bytes, moved, bursts, transform = dma_traffic(c, case)
    dma_useful = useful_bytes / hw.DMA_BYTES_PER_CLK
    dma_extra = (moved - useful_bytes) / hw.DMA_BYTES_PER_CLK + bursts * hw.DMA_ISSUE_CLK_PER_BURST + transform / SWIZZLE_BYTES_PER_CLK
    if "dma_penalty" in removed:
        dma_extra = 0.0
    if "memory" in removed:
        dma_useful = 0.0
    dma = dma_useful + dma_extra

    # Pipeline (4.7).
    stages, prefetch = c.dma_stages, c.prefetch_distance
    lookahead = np.minimum(prefetch, stages - 1) + 0.25 * ((prefetch == stages) & (stages > 1))
    latency = hw.LATENCY * ("dma_penalty" not in removed)
    stall = np.maximum(prefetch - stages, 0.0) * 0.1 * hw.LATENCY * ("dma_penalty" not in removed)
    busy = np.maximum(compute, dma)
    piped = np.maximum(busy, (latency + dma) / np.maximum(lookahead, 1.0))
    step = np.where(lookahead > 0, piped, compute + dma + latency * chunks) + stall
    spill_cost = spilled * nw * 32 * 8 * (bn / 16) / hw.SMEM_BYTES_PER_CLK * (1 + spilled / 32)
    tile_time = np.maximum(step, ctas * busy) + sync + spill_cost

    # Items, schedule and waves (4.8).
    gci = gi * MAX_CTAS + ctas.astype(np.intp) - 1
    slots = hw.CORES * ctas
    bh = float(case.bh)
    total_tiles = tiles * bh
    waves = g.waves.take(gci)
    if "tail" in removed:
        total_tiles = g.useful_tiles.take(gi) * bh
        makespan_tiles = total_tiles / slots
    else:
        balanced = np.maximum((tiles * bh - items * bh * g.min_item.take(gi)) / slots + waves * g.min_item.take(gi), g.max_item.take(gi))
        makespan_tiles = np.where(c.schedule_i == SCHED_STATIC, g.static_tiles.take(gci), balanced)
    q_bytes = bm * d * hw.BYTES_BF16
    o_store = q_bytes / hw.DMA_BYTES_PER_CLK * O_STORE_EXPOSED[c.o_layout_i]
    col_merge = (col_split - 1) * bm * d * hw.BYTES_FP32 / hw.SMEM_BYTES_PER_CLK
    item_sync = o_store + col_merge
    if "sync_epilogue" in removed:
        item_sync = 0.0
    q_transform = (c.swizzle_i == SWZ_TC) * (c.q_layout_i != LAYOUT_SWIZZLED) * q_bytes / SWIZZLE_BYTES_PER_CLK
    setup = (hw.LATENCY + q_transform) * ("dma_penalty" not in removed) + q_bytes / hw.DMA_BYTES_PER_CLK + CTA_START + item_sync
    per_wave_setup = np.where(c.schedule_i == SCHED_STATIC, setup, 0.25 * setup)
    makespan = makespan_tiles * tile_time + waves * per_wave_setup + setup

    # Roofline, launches and the split-k merge.
    kv_tile_bytes = 2 * bn * d * hw.BYTES_BF16
    unique = bh * (2 * case.s * d * hw.BYTES_BF16) * 2
    head_waves = np.ceil(items / slots)          # items of one head resident together share K/V fetches
    reread = (head_waves - 1) * unique / 2
    partials = bh * case.s * d * (hw.BYTES_FP32 * c.split_k - hw.BYTES_BF16) * (c.split_k > 1)
    dram_bytes = (unique + (1 - hw.L2_HIT_ON_REREAD) * reread) * moved / useful_bytes + partials
    dram_time = dram_bytes / (hw.DRAM_BYTES_PER_CLK * _DRAM_EFFICIENCY[c.dma_burst_i])
    roof = np.maximum(dram_time, total_tiles * kv_tile_bytes / hw.L2_BYTES_PER_CLK)
    if "memory" in removed:
        roof = 0.0
    merge_bytes = bh * case.s * d * (hw.BYTES_FP32 * c.split_k + hw.BYTES_BF16)      # partials stay in L2
    merge = (c.split_k > 1) * (hw.LAUNCH + merge_bytes / hw.L2_BYTES_PER_CLK)
    if "sync_epilogue" in removed:
        merge = (c.split_k > 1) * hw.LAUNCH
    total = np.maximum(makespan, roof) + hw.LAUNCH + merge
    return np.where(feasible, total, np.inf), feasible


def fits(c: Columns, case: Case) -> np.ndarray:
    """Whether each plan can run on ``case``: its footprint fits the scratchpad, split_k is within the KV blocks."""
    return (footprint_kb(c, case) <= c.scratchpad_kb) & (c.split_k <= geometry(case).kv_blocks.take(c.flat(GEOMETRY_KNOBS)))


def feasible(plans: np.ndarray | Columns, cases: tuple[Case, ...]) -> np.ndarray:
    """Whether each plan can run on every case of ``cases``."""
    c = plans if isinstance(plans, Columns) else Columns(np.asarray(plans))
    ok = np.ones(len(c.idx), dtype=bool)
    for case in cases:
        ok &= fits(c, case)
    return ok


def suite_cycles(idx: np.ndarray, cases: tuple[Case, ...], chunk: int = 32768) -> np.ndarray:
    """Cycles (``plans x cases``, float64; ``inf`` where infeasible) of a batch on a suite.

    Works in chunks of ``chunk`` plans so temporaries stay cache-sized.
    """
    idx = np.asarray(idx)
    out = np.empty((idx.shape[0], len(cases)))
    for start in range(0, idx.shape[0], chunk):
        part = Columns(idx[start:start + chunk])
        for j, case in enumerate(cases):
            out[start:start + chunk, j] = case_cycles(part, case)[0]
    return out
