"""Numeric verifier: emulate the attention a plan describes and measure ``max_abs`` vs float64.

Per case, Q, K and V come from a generator seeded by the case name and are rounded to bf16. A
fixed subset of query rows is emulated against the full key length and head_dim. Only the
numeric knobs matter (:func:`signature`), so results are cached by that signature.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from tuner.plan import Plan
from tuner.task.suites import Case, suite, token_mask

TOLERANCE = 2.5e-4
ACCUMULATOR_BITS = 18          # significand bits of the QK^T accumulator (implicit bit included)
ROWS = 64                      # emulated query rows per case

# exp2 on [0, 1) by a degree-3 minimax polynomial (highest power first), 7.5e-5 relative error.
EXP2_POLY = np.array([0.07802444673804203, 0.22606799644079345, 0.6958328241565565, 0.9999253344154103])


def bf16(x: np.ndarray) -> np.ndarray:
    """Round to bfloat16 (nearest even), returned as float64."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) & np.uint32(0xFFFF0000)
    return rounded.view(np.float32).astype(np.float64)


def narrow(x: np.ndarray, bits: int | None = None) -> np.ndarray:
    """Round float64 to a ``bits``-bit significand (default ``ACCUMULATOR_BITS``; nearest even)."""
    drop = 53 - (ACCUMULATOR_BITS if bits is None else bits)
    raw = np.asarray(x, dtype=np.float64).view(np.int64)
    half = np.int64((1 << (drop - 1)) - 1) + ((raw >> drop) & 1)
    return ((raw + half) & np.int64(-(1 << drop))).view(np.float64)


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


@cache
def case_inputs(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Seeded (q rows, K, V, mask rows, row indices) of a case; q, K, V bf16-valued float64."""
    rng = np.random.default_rng(case.seed)
    rows = np.unique(np.linspace(0, case.s - 1, ROWS).astype(np.int64))
    q = bf16(rng.standard_normal((case.s, case.d)))[rows]
    k = bf16(rng.standard_normal((case.s, case.d)))
    v = bf16(rng.uniform(-1.0, 1.0, (case.s, case.d)))
    return q, k, v, token_mask(case)[rows], rows


def _dot(q: np.ndarray, k: np.ndarray, accum: str, block_k: int) -> np.ndarray:
    """QK^T (rows x keys) reduced over head_dim in the plan's order and precision."""
    products = q[:, None, :] * k[None, :, :]            # exact: bf16 x bf16
    d = products.shape[-1]
    if accum == "pairwise":
        level = products
        while level.shape[-1] > 1:
            if level.shape[-1] % 2:
                level = np.concatenate([level, np.zeros((*level.shape[:-1], 1))], axis=-1)
            level = narrow(level[..., 0::2] + level[..., 1::2])
        return level[..., 0]
    if accum == "tree":
        total = np.zeros(products.shape[:-1], dtype=np.float32)
        for start in range(0, d, block_k):
            part = np.zeros(products.shape[:-1])
            for i in range(start, min(start + block_k, d)):
                part = narrow(part + products[..., i])
            total = total + _f32(part)
        return total.astype(np.float64)
    acc = np.zeros(products.shape[:-1])
    comp = np.zeros_like(acc)
    for i in range(d):
        if accum == "kahan":
            y = narrow(products[..., i] - comp)
            t = narrow(acc + y)
            comp = narrow(narrow(t - acc) - y)
            acc = t
        else:
            acc = narrow(acc + products[..., i])
    return acc


def _exp(x: np.ndarray, poly: bool) -> np.ndarray:
    """exp in fp32, or 2^x by range reduction and the degree-3 polynomial."""
    if not poly:
        return np.exp(_f32(x))
    y = _f32(np.maximum(x, -126.0)) * _f32(np.log2(np.e))
    n = np.floor(y)
    return _f32(np.ldexp(np.polyval(EXP2_POLY, (y - n).astype(np.float64)), n.astype(np.int64)))


def _pv(p: np.ndarray, v: np.ndarray) -> np.ndarray:
    """P V for fp32 P and bf16-valued V, accumulated wide and rounded once to fp32."""
    return _f32(p.astype(np.float64) @ v)


def _attend(logits: np.ndarray, mask: np.ndarray, v: np.ndarray, softmax: str, block_n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Emulated attention over a key range: fp32 (unnormalised O, running max, running sum)."""
    rows, keys = logits.shape
    neg = np.float32(-np.inf)
    logits = np.where(mask, _f32(logits), neg)
    if softmax == "two_pass":
        m = logits.max(axis=1)
        safe = np.where(np.isfinite(m), m, 0)
        p = np.where(mask, np.exp(logits - safe[:, None]), 0).astype(np.float32)
        return _pv(p, v), safe, p.sum(axis=1, dtype=np.float32)
    poly = softmax == "approx_poly"
    normalised = softmax == "online"     # FA1-style: O kept normalised every block
    m = np.full(rows, neg, dtype=np.float32)
    s_sum = np.zeros(rows, dtype=np.float32)
    o = np.zeros((rows, v.shape[1]), dtype=np.float32)
    for start in range(0, keys, block_n):
        blk = logits[:, start:start + block_n]
        live = mask[:, start:start + block_n]
        m_new = np.maximum(m, blk.max(axis=1))
        safe = np.where(np.isfinite(m_new), m_new, 0).astype(np.float32)
        alpha = np.where(np.isfinite(m), _exp(m - safe, poly), 0).astype(np.float32)
        p = np.where(live, _exp(blk - safe[:, None], poly), 0).astype(np.float32)
        pv = _pv(p, v[start:start + block_n])
        s_new = (s_sum * alpha + p.sum(axis=1, dtype=np.float32)).astype(np.float32)
        if normalised:
            ratio = np.where(s_new > 0, s_sum * alpha / np.where(s_new > 0, s_new, 1), 0).astype(np.float32)
            o = (o * ratio[:, None] + pv / np.where(s_new > 0, s_new, 1)[:, None]).astype(np.float32)
        else:
            o = (o * alpha[:, None] + pv).astype(np.float32)
        m, s_sum = np.where(np.isfinite(m_new), m_new, m), s_new
    if normalised:
        o = (o * s_sum[:, None]).astype(np.float32)          # back to unnormalised form for merging
    return o, np.where(np.isfinite(m), m, 0).astype(np.float32), s_sum


@cache
def _logits(case: Case, accum: str, block_k: int, separate: bool) -> np.ndarray:
    """Scaled scores (fp32) as the plan computes them; the costly part, shared by many signatures."""
    q, k, _, _, _ = case_inputs(case)
    logits = _f32(_dot(q, k, accum, block_k)) * np.float32(case.spread / np.sqrt(case.d))
    return _f32(narrow(logits.astype(np.float64))) if separate else logits


def emulate(case: Case, accum: str, softmax: str, block_n: int, block_k: int, split_k: int, epilogue: str) -> np.ndarray:
    """Emulated output rows (float64) of ``case`` under the given numeric knobs."""
    q, _, v, mask, _ = case_inputs(case)
    chunk = min(block_k, case.d) if accum == "tree" else case.d        # only tree reads block_k
    logits = _logits(case, accum, chunk, epilogue == "separate")
    kv_blocks = -(-case.s // block_n)
    part = -(-kv_blocks // split_k) * block_n
    partials = [_attend(logits[:, a:a + part], mask[:, a:a + part], v[a:a + part], softmax, block_n)
                for a in range(0, case.s, part)]
    m_all = np.max([p[1] for p in partials], axis=0)
    o = np.zeros((q.shape[0], case.d), dtype=np.float32)
    s_sum = np.zeros(q.shape[0], dtype=np.float32)
    for o_p, m_p, s_p in partials:                        # log-sum-exp merge of fp32 partials
        w = np.where(s_p > 0, np.exp(_f32(m_p - m_all)), 0).astype(np.float32)
        o = (o + o_p * w[:, None]).astype(np.float32)
        s_sum = (s_sum + s_p * w).astype(np.float32)
    return (o / s_sum[:, None]).astype(np.float64)


@cache
def reference(case: Case) -> np.ndarray:
    """float64 attention of the emulated rows."""
    q, k, v, mask, _ = case_inputs(case)
    logits = np.where(mask, (q @ k.T) * (case.spread / np.sqrt(case.d)), -np.inf)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (p @ v) / p.sum(axis=1, keepdims=True)


@cache
def case_error(case: Case, signature: tuple[str, str, int, int, int, str]) -> float:
    """``max_abs`` of one case for one numeric signature (cached)."""
    out = emulate(case, *signature)
    return float(np.abs(out - reference(case)).max())


def signature(plan: Plan, case: Case) -> tuple[str, str, int, int, int, str]:
    """The knobs the numerics of ``case`` depend on (accum, softmax, block_n, block_k, split_k, epilogue);
    block_k only as the chunk of tree accumulation, so plans that differ in nothing else share a cache entry."""
    chunk = min(plan["block_k"], case.d) if plan["accum"] == "tree" else case.d
    return (plan["accum"], plan["softmax"], plan["block_n"], chunk, plan["split_k"], plan["epilogue"])


def verify(plan: Plan, mode: str) -> list[float]:
    """``max_abs`` per case of ``mode``'s suite (same order as the suite)."""
    return [case_error(case, signature(plan, case)) for case in suite(mode)]
