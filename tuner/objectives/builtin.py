"""The built-in objective: this repository's task, evaluated in batches."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from tuner.objectives.base import Evaluations
from tuner.plan import SPACE, Plan, decode
from tuner.task.benchmark import benchmark_report, infeasibility, score_batch
from tuner.task.cycles import feasible
from tuner.task.suites import MODES, suite
from tuner.task.verifier import TOLERANCE, verify


@cache
def _task_version() -> str:
    """Hash of the task's source: cached results die with any change to the model or verifier."""
    digest = hashlib.sha256()
    for path in sorted((Path(__file__).resolve().parent.parent / "task").glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:12]


class BuiltinObjective:
    """Scores plans with :mod:`tuner.task` (dev: fast objective, final: held-out authority)."""

    space = SPACE
    modes = MODES
    unit = "cycles"
    optimum = None                                     # not known: the space is too large to score whole
    measures = None                                    # its space is the model's own
    linked = None                                      # the model's check may read any knob

    def __init__(self) -> None:
        self.name = f"builtin:{_task_version()}"
        self.label = "the tensor plan (built-in model)"

    def feasible(self, idx: np.ndarray) -> np.ndarray:
        return feasible(np.asarray(idx), suite("dev") + suite("final"))

    def cycles(self, idx: np.ndarray, mode: str) -> np.ndarray:
        return score_batch(np.asarray(idx), mode)

    def evaluate(self, idx: np.ndarray, mode: str) -> Evaluations:
        cycles = self.cycles(idx, mode)
        max_abs = np.full(len(cycles), np.nan)
        for i in np.flatnonzero(np.isfinite(cycles)):
            max_abs[i] = float(f"{max(verify(decode(idx[i]), mode)):.6g}")
        unrunnable = np.flatnonzero(~np.isfinite(cycles))              # rare: searches score feasible plans only
        reasons = [None] * len(cycles) if len(unrunnable) else []
        for i in unrunnable:
            reasons[i] = infeasibility(decode(idx[i]), mode)
        return Evaluations(cycles=cycles, correct=np.nan_to_num(max_abs, nan=np.inf) <= TOLERANCE, max_abs=max_abs, reasons=reasons)

    def report(self, plan: Plan, mode: str) -> dict[str, Any]:
        return benchmark_report(plan, mode)
