"""Trace components and indicators of one plan on one case.

Components split a case's cycles into named, non-negative parts that sum exactly to it: the
plan is re-evaluated with one more inefficiency of ``PENALTIES`` switched off at a time, in that
order, and each drop is attributed to it; what remains is ``compute``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tuner.task import machine as hw
from tuner.task.cycles import (
    LAYOUT_SWIZZLED,
    LIMITERS,
    PENALTIES,
    SWZ_TC,
    SWZ_XOR,
    Columns,
    case_cycles,
    conflict_factors,
    dma_traffic,
    footprint_kb,
    occupancy,
    occupancy_limiter,
    registers,
)
from tuner.task.suites import Case

COMPONENTS = ("compute", "memory", "bank_conflicts", "dma_penalty", "spill", "scratchpad_pressure", "sync_epilogue", "tail")


def components(idx: np.ndarray, case: Case) -> dict[str, int]:
    """Integer cycles per component (keys in ``COMPONENTS`` order) of one feasible plan."""
    plan = np.asarray(idx).reshape(1, -1)
    removed: list[str] = []
    previous = round(float(case_cycles(plan, case)[0][0]))
    drops: dict[str, int] = {}
    for penalty in PENALTIES:
        removed.append(penalty)
        now = min(previous, round(float(case_cycles(plan, case, removed)[0][0])))
        drops[penalty] = previous - now
        previous = now
    drops["compute"] = previous
    return {name: drops[name] for name in COMPONENTS}


_OPERANDS = ("Q", "K", "V")
_LAYOUT_KNOBS = ("q_layout", "k_layout", "v_layout")


def indicators(idx: np.ndarray, case: Case) -> dict[str, Any]:
    """What the seed's trace_summary names: conflicts, register and scratchpad pressure, DMA efficiency, synergies."""
    c = Columns(np.asarray(idx).reshape(1, -1))
    factors = [float(f[0]) for f in conflict_factors(c, case)]
    need, limit, math_warps, _ = registers(c, case)
    ctas, limiter = occupancy(c, need, limit), occupancy_limiter(c, need, limit)
    useful, moved, bursts, on_the_fly = dma_traffic(c, case)
    footprint = float(footprint_kb(c, case)[0])
    notes: list[str] = []
    swizzle = int(c.swizzle_i[0])
    for name, knob, factor in zip(_OPERANDS, _LAYOUT_KNOBS, factors, strict=True):
        swizzled = int(getattr(c, f"{knob}_i")[0]) == LAYOUT_SWIZZLED
        if swizzled and swizzle != SWZ_TC:
            wrong = "xor" if swizzle == SWZ_XOR else "none"
            notes.append(f"anti-synergy: swizzled {name} read with swizzle={wrong}: {factor:g}-way conflicts")
        elif swizzled and factor == 1.0:
            notes.append(f"synergy: swizzled {name} with swizzle=tensorcore is conflict-free")
        elif factor > 1.0:
            notes.append(f"{name} tile: {factor:g}-way bank conflicts")
    if float(on_the_fly[0]) > 0:
        notes.append("anti-synergy: swizzle=tensorcore on non-swizzled K/V layouts swizzles on the fly during DMA")
    if float(need[0]) > float(limit[0]):
        notes.append(f"spill: {float(need[0]):.0f} registers per thread needed, limit {float(limit[0]):.0f}")
    if float(math_warps[0]) < hw.TC_FEED_WARPS:
        notes.append(f"only {float(math_warps[0]):g} math warps feed the tensor core (needs {hw.TC_FEED_WARPS})")
    waste = float(moved[0] / useful[0])
    if waste > 1.05:
        notes.append(f"DMA over-fetch: dma_burst={int(c.dma_burst[0])} moves {waste:.2f}x the useful bytes")
    return {
        "conflict_factors": dict(zip(_OPERANDS, factors, strict=True)),
        "register_pressure": {"needed": round(float(need[0]), 1), "limit": float(limit[0]),
                              "ratio": round(float(need[0] / limit[0]), 3)},
        "scratchpad_pressure": {"footprint_kb": round(footprint, 1), "allocation_kb": int(c.scratchpad_kb[0]),
                                "ratio": round(footprint / float(c.scratchpad_kb[0]), 3),
                                "ctas_per_core": int(ctas[0]), "ctas_limited_by": LIMITERS[int(limiter[0])]},
        "dma": {"bytes_useful_per_tile": int(useful[0]), "bytes_moved_per_tile": round(float(moved[0])),
                "efficiency": round(float(useful[0] / moved[0]), 3), "bursts_per_tile": round(float(bursts[0]))},
        "notes": notes,
    }
