"""``checkpoint``: local search around a plan or fixture.

Each round first takes the nearest single mutations (ordinal knobs one step, nominal knobs any
value) in a seeded random order, a small batch at a time, moving at the first improvement; then
all single mutations; if none improves, the pairs of the
most promising singles (second-order steps, cheap), then all pairs (ordinal knobs one step),
then a bounded +-1 grid over the tile, warp, DMA and scratchpad knobs. The best improving move
becomes the current plan and the round starts again; it stops when no neighbour improves.
"""

from __future__ import annotations

import numpy as np

from tuner.search import Outcome, Search
from tuner.strategies.neighbourhood import combined, grid, pairs, singles

PHASES = ("single", "combined", "pair", "grid")
STEP_BATCH = 8


def _steps(search: Search, current: np.ndarray, value: float, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """Greedy steps to the nearest neighbours, a shuffled batch at a time, until none improves."""
    while search.stop_reason() is None:
        candidates = singles(current, near=True)
        candidates = candidates[search.objective.feasible(candidates)]
        candidates = candidates[rng.permutation(len(candidates))]
        for start in range(0, len(candidates), STEP_BATCH):
            batch = candidates[start:start + STEP_BATCH]
            values = search.evaluate(batch, {"phase": "step"})
            pick = int(np.argmin(values))
            if values[pick] < value:
                current, value = batch[pick], float(values[pick])
                break
            if search.stop_reason():
                return current, value
        else:
            return current, value
    return current, value


def climb(search: Search, start: np.ndarray, phases: tuple[str, ...] = PHASES) -> str:
    """Move from ``start`` to a local optimum within the budgets; returns why it stopped.

    ``phases`` limits the neighbourhoods tried after the greedy steps (a cheaper polish).
    """
    current = np.asarray(start, dtype=np.int16)
    value = float(search.evaluate(current[None], {"phase": "start"})[0])
    rng = np.random.default_rng(search.spec.seed)
    while True:
        current, value = _steps(search, current, value, rng)
        last: tuple[np.ndarray, np.ndarray] = (current[:0], np.zeros(0))
        for phase in phases:
            reason = search.stop_reason()
            if reason:
                return reason
            if phase == "single":
                candidates = singles(current)
            elif phase == "combined":
                candidates = combined(current, *last)
            else:
                candidates = pairs(current) if phase == "pair" else grid(current)
            candidates = candidates[search.objective.feasible(candidates)]
            values = search.evaluate(candidates, {"phase": phase})
            if phase == "single":
                last = (candidates, values)
            best = int(np.argmin(values)) if len(values) else 0
            if len(values) and values[best] < value:
                current, value = candidates[best], float(values[best])
                break
            reason = search.stop_reason()                   # a neighbourhood cut short proves nothing
            if reason:
                return reason
        else:
            return "converged"


def run(search: Search) -> Outcome:
    if search.spec.start is None:
        raise ValueError("checkpoint needs a start plan or fixture")
    stopped = climb(search, np.array(search.spec.start, dtype=np.int16))
    return search.finish(search.top(), stopped)
