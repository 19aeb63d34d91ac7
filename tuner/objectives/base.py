"""The objective interface: score index-encoded plans in a mode (``best_cycles``, lower is better)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


@dataclass
class Evaluations:
    """Results for a batch of plans (aligned arrays).

    ``cycles`` is ``best_cycles`` (``inf`` where infeasible); ``correct`` is ``max_abs <= 2.5e-4``
    in this mode (``False`` where infeasible); ``max_abs`` is ``nan`` where infeasible.
    """

    cycles: np.ndarray
    correct: np.ndarray
    max_abs: np.ndarray

    @property
    def feasible(self) -> np.ndarray:
        return np.isfinite(self.cycles)


class Objective(Protocol):
    """Scores plans. ``name`` identifies it in the history cache (it changes when the scorer does)."""

    name: str

    def feasible(self, idx: np.ndarray) -> np.ndarray:
        """Cheap feasibility (bool per plan) known without scoring; ``True`` where unknown."""
        ...

    def cycles(self, idx: np.ndarray, mode: str) -> np.ndarray:
        """``best_cycles`` only (float64, ``inf`` where infeasible): the fast path of big sweeps."""
        ...

    def evaluate(self, idx: np.ndarray, mode: str) -> Evaluations:
        """Cycles and correctness of each plan."""
        ...

    def report(self, plan: dict[str, Any], mode: str) -> dict[str, Any]:
        """The full ``benchmark.py --json`` object of one plan."""
        ...
