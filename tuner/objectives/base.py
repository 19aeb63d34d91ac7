"""The objective interface: score index-encoded configurations in a mode (lower is better)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tuner.space import Space

TIME = "time"                                               # the one mode of a measured problem (ms, lower is better)
MODE_CHARS = 16                                             # the longest name of a mode (the history keeps it so)
RULED_OUT = "ruled out by the space's restrictions"
REASON_CHARS = 100                                          # of a reason that failures are grouped by


def as_float(value: Any) -> float:
    """A value read from outside (a benchmark's output, a cache's record) as a float when it is a number a float
    holds; NaN otherwise (a string, a boolean, ``None``, an integer past 1.8e308)."""
    try:
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:
        return math.nan


def brief(reason: str | None) -> str:
    """A failure's reason on one line: its first and last lines, where a program's stderr makes it several."""
    lines = [line.strip() for line in (reason or "no reason given").splitlines() if line.strip()] or ["no reason given"]
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"


def reason_group(reason: str | None) -> str:
    """What failures are counted by: the start of their reason on one line (a program's stderr tail varies run by run)."""
    return brief(reason)[:REASON_CHARS]


def ruled_out(space: Space, row: np.ndarray) -> str:
    """Why ``space``'s restrictions rule the configuration ``row`` out: :data:`RULED_OUT` and the restrictions it fails."""
    return f"{RULED_OUT}: {', '.join(map(repr, space.failed(row)))}"


def value_key(mode: str, unit: str) -> str:
    """The key of a measured problem's value in its report: its mode and unit (``time_ms``: a time in ms)."""
    return f"{mode}_{unit}"


@dataclass
class Evaluations:
    """Results for a batch of configurations (aligned arrays).

    ``cycles`` is the value (``best_cycles`` of a plan, a measured time in ms...; ``inf`` where
    infeasible); ``correct`` is whether the result passed the problem's check (``False`` where
    infeasible); ``max_abs`` is the numeric error, ``nan`` where unknown; ``reasons`` says why a
    configuration is infeasible, where the objective knows (``None`` elsewhere); ``samples``, where
    the objective measures repeatedly, every measured value of each configuration (``cycles`` is then
    their median); ``timed_out``, where a run was killed at the objective's time limit, that limit in
    seconds (``None`` elsewhere): a failure that a longer limit may not repeat.
    """

    cycles: np.ndarray
    correct: np.ndarray
    max_abs: np.ndarray
    reasons: list[str | None] = field(default_factory=list)
    samples: list[list[float]] = field(default_factory=list)
    timed_out: list[float | None] = field(default_factory=list)

    @property
    def feasible(self) -> np.ndarray:
        return np.isfinite(self.cycles)


class ObjectiveError(RuntimeError):
    """The objective could not score a configuration (its message says why)."""


class TimedOut(ObjectiveError):
    """A run outlived the objective's time limit ``limit_s`` (seconds) and was killed."""

    def __init__(self, message: str, limit_s: float) -> None:
        super().__init__(message)
        self.limit_s = limit_s


class Objective(Protocol):
    """Scores configurations of ``space``. ``name`` identifies it in the history cache (it changes when
    the scorer does); ``label`` is what a person calls it (the report's title); ``modes`` are its modes,
    the first the search objective and a second, where there is one, the held-out authority the gate checks;
    ``unit`` is what a value counts (``cycles``, ``ms``).
    ``optimum`` is the best value any allowed configuration has in the first mode where that is known (a replayed
    cache's best recorded time), ``None`` elsewhere. ``measures`` names what it measures whatever its space's values
    and restrictions (a program with its knobs), where a history may carry its measurements over from one space to
    another (:meth:`tuner.history.History.adopt`); ``None`` where it may not. ``linked`` groups the knobs (positions) whose
    values :meth:`feasible` reads together: a configuration it rules out is mended only by a change to a group that
    the configuration's own changes touch (``None``: by any knob, as in the tensor plan's model). An objective that runs
    a program also has ``timeout_s``, the seconds one run may take: a search treats a run killed at a shorter limit as
    not measured yet."""

    name: str
    label: str
    space: Space
    modes: tuple[str, ...]
    unit: str
    optimum: float | None
    measures: str | None
    linked: tuple[tuple[int, ...], ...] | None

    def feasible(self, idx: np.ndarray) -> np.ndarray:
        """Cheap feasibility (bool per configuration) known without scoring; ``True`` where unknown."""
        ...

    def cycles(self, idx: np.ndarray, mode: str) -> np.ndarray:
        """Values only (float64, ``inf`` where infeasible): the fast path of big sweeps."""
        ...

    def evaluate(self, idx: np.ndarray, mode: str) -> Evaluations:
        """Values and correctness of each configuration."""
        ...

    def report(self, plan: dict[str, Any], mode: str) -> dict[str, Any]:
        """The full report of one configuration (for the tensor plan: ``benchmark.py --json``)."""
        ...


def runs_program(objective: Objective) -> bool:
    """Whether ``objective`` runs a program per measurement (it has a ``timeout_s``): its runs are dear, one by one, and
    may fail for the machine's sake, where the model's and a cache's values never change."""
    return getattr(objective, "timeout_s", None) is not None
