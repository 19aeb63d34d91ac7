"""Scoring a plan: the JSON reports of ``benchmark.py`` and ``verifier.py``, and the batch path.

``best_cycles`` is the sum of the suite's case cycles (integers; lower is better). A plan is
correct when ``max_abs <= TOLERANCE`` on every case of the mode.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tuner.plan import Plan, encode, plan_hash
from tuner.task.cycles import Columns, footprint_kb, suite_cycles
from tuner.task.geometry import GEOMETRY_KNOBS, geometry
from tuner.task.suites import Case, suite
from tuner.task.trace import components, indicators
from tuner.task.verifier import TOLERANCE, verify


def score_batch(idx: np.ndarray, mode: str) -> np.ndarray:
    """``best_cycles`` per plan (float64: the sum of whole case cycles; ``inf`` where infeasible)."""
    return np.round(suite_cycles(idx, suite(mode))).sum(axis=1)


def infeasibility(plan: Plan, mode: str) -> str | None:
    """Why ``plan`` cannot run on ``mode``'s suite, in words a person can act on; ``None`` if it can."""
    c = Columns(encode(plan)[None])
    for case in suite(mode):
        need = float(footprint_kb(c, case)[0])
        if need > plan["scratchpad_kb"]:
            chunk = min(plan["block_k"], case.d)
            return (f"scratchpad footprint {need:.1f} KB exceeds scratchpad_kb={plan['scratchpad_kb']} on {case.name} "
                    f"(Q tile {plan['block_m']}x{case.d}, {plan['dma_stages']} DMA stages of K and V chunks "
                    f"{plan['block_n']}x{chunk}{', pairwise partial buffer' if plan['accum'] == 'pairwise' else ''}): "
                    "raise scratchpad_kb or lower dma_stages, block_n or block_k")
        kv_blocks = int(geometry(case).kv_blocks.take(c.flat(GEOMETRY_KNOBS))[0])
        if plan["split_k"] > kv_blocks:
            return (f"split_k={plan['split_k']} exceeds the {kv_blocks} KV blocks of {case.name} at block_n={plan['block_n']}: "
                    "lower split_k or block_n")
    return None


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def _case_report(idx: np.ndarray, case: Case, cycles: float, error: float, trace: bool) -> dict[str, Any]:
    report: dict[str, Any] = {"name": case.name, "cycles": round(cycles), "max_abs": _round(error)}
    if trace:
        report["components"] = components(idx, case)
    return report


def benchmark_report(plan: Plan, mode: str, trace: bool = True) -> dict[str, Any]:
    """The ``benchmark.py --json`` object of a valid plan (section 1 of the design)."""
    cases = suite(mode)
    reason = infeasibility(plan, mode)
    report: dict[str, Any] = {"mode": mode, "plan_hash": plan_hash(plan), "tolerance": TOLERANCE}
    if reason is not None:
        return report | {"feasible": False, "reason": reason, "best_cycles": None, "correct": False, "max_abs": None,
                         "cases": [{"name": case.name, "cycles": None, "max_abs": None} for case in cases]}
    idx = encode(plan)[None]
    cycles = suite_cycles(idx, cases)[0]
    errors = verify(plan, mode)
    per_case = [_case_report(idx, case, cyc, err, trace) for case, cyc, err in zip(cases, cycles, errors, strict=True)]
    max_abs = _round(max(errors))
    return report | {"feasible": True, "best_cycles": sum(c["cycles"] for c in per_case), "correct": max_abs <= TOLERANCE,
                     "max_abs": max_abs, "cases": per_case}


def verifier_report(plan: Plan, mode: str) -> dict[str, Any]:
    """The ``verifier.py --json`` object: numeric correctness of a valid plan per case."""
    errors = verify(plan, mode)
    max_abs = _round(max(errors))
    return {"mode": mode, "plan_hash": plan_hash(plan), "tolerance": TOLERANCE, "correct": max_abs <= TOLERANCE,
            "max_abs": max_abs,
            "cases": [{"name": case.name, "max_abs": _round(e), "passed": _round(e) <= TOLERANCE}
                      for case, e in zip(suite(mode), errors, strict=True)]}


def case_indicators(plan: Plan, mode: str) -> dict[str, dict[str, Any]]:
    """Trace indicators per case name (see :func:`tuner.task.trace.indicators`)."""
    idx = encode(plan)
    return {case.name: indicators(idx, case) for case in suite(mode)}
