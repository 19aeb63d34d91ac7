"""``checkpoint``: local search around a plan or fixture.

Each round first takes steps: the neighbours of the current plan in a seeded random order, the
nearest first (ordinal knobs one step), then every single mutation, the joint moves of coupled
knobs and the infeasible moves made feasible by one more change (:mod:`.neighbourhood`), a few at
a time, moving at the first improvement. When no step improves, the wider ``phases`` follow: pairs
of the most promising singles (second-order steps, cheap), all pairs (ordinal knobs one step), then
a bounded +-1 grid over the tile, warp, DMA and scratchpad knobs. The best improving move becomes
the current plan and the round starts again; it stops when no neighbour improves.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tuner.search import Outcome, Search
from tuner.strategies.neighbourhood import combined, coupled, grid, pairs, repairs, singles

PHASES = ("combined", "pair", "grid")
STEP_BATCH = 4                      # neighbours scored per step; the first improvement among them is taken


def step_neighbours(center: np.ndarray, feasible: Callable[[np.ndarray], np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """The feasible step neighbourhood of ``center``, shuffled: nearest singles first, then the rest."""
    near = singles(center, near=True)
    moves = np.concatenate([singles(center), coupled(center)])
    rest = np.concatenate([moves, repairs(center, moves, feasible)])
    near, rest = near[feasible(near)], rest[feasible(rest)]
    return np.concatenate([near[rng.permutation(len(near))], rest[rng.permutation(len(rest))]])


def _steps(search: Search, current: np.ndarray, value: float, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """First-improvement steps through the step neighbourhood until none improves (or a budget ends)."""
    while search.stop_reason() is None:
        candidates = step_neighbours(current, search.objective.feasible, rng)
        for start in range(0, len(candidates), STEP_BATCH):
            batch = candidates[start:start + STEP_BATCH]
            values = search.evaluate(batch, {"phase": "step"})
            pick = int(np.argmin(values))
            if values[pick] < value:
                current, value = batch[pick], float(values[pick])
                break
            if search.stop_reason():
                break
        else:
            break
    return current, value


def _wider(phase: str, current: np.ndarray, search: Search) -> np.ndarray:
    if phase == "combined":                         # the singles' values are in the cache after the steps
        moves = singles(current)
        moves = moves[search.objective.feasible(moves)]
        return combined(current, moves, search.evaluate(moves, {"phase": phase}))
    return pairs(current) if phase == "pair" else grid(current)


def climb(search: Search, start: np.ndarray, phases: tuple[str, ...] = PHASES) -> str:
    """Move from ``start`` to a local optimum within the budgets; returns why it stopped.

    ``phases`` are the wider neighbourhoods tried after the steps (none: a cheaper polish).
    """
    current = np.asarray(start, dtype=np.int16)
    value = float(search.evaluate(current[None], {"phase": "start"})[0])
    rng = np.random.default_rng(search.spec.seed)
    while True:
        current, value = _steps(search, current, value, rng)
        for phase in phases:
            if search.stop_reason():
                break
            candidates = _wider(phase, current, search)
            candidates = candidates[search.objective.feasible(candidates)]
            values = search.evaluate(candidates, {"phase": phase})
            best = int(np.argmin(values)) if len(values) else 0
            if len(values) and values[best] < value:
                current, value = candidates[best], float(values[best])
                break
        else:
            return search.stop_reason() or "converged"
        reason = search.stop_reason()                # a neighbourhood cut short proves nothing
        if reason:
            return reason


def run(search: Search) -> Outcome:
    if search.spec.start is None:
        raise ValueError("checkpoint needs a start plan or fixture")
    stopped = climb(search, np.array(search.spec.start, dtype=np.int16))
    return search.finish(search.top(), stopped)
