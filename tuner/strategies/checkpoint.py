"""``checkpoint``: local search around a plan or fixture.

Each round first takes steps through the neighbours of the current configuration: every single
mutation, the joint moves of the knob groups the space declares coupled (a hint) and of the knob
pairs the search's own evaluations show to interact most, and the infeasible moves made feasible
by one more change (:mod:`.neighbourhood`). The learned model
(:mod:`.interactions`) orders them: in turns across the knobs they change, the best predicted first
(a joint move into a cell of a learned pair that no evaluation holds counts as promising), the ones
likely to fail last (ties: nearest singles first, then a seeded shuffle). They are scored
a few at a time, moving at the first improvement. When no step improves, the wider ``phases``
follow: pairs of the most promising singles (second-order steps, cheap), all pairs (ordinal knobs
one step), then a bounded +-1 grid over the ordinal knobs with the largest learned effects. The
best improving move becomes the current configuration and the round starts again; it stops when no
neighbour improves.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice

import numpy as np

from tuner.search import Outcome, Search
from tuner.strategies.interactions import learned
from tuner.strategies.neighbourhood import combined, coupled, grid, nearest_feasible, pairs, repairs, row_keys, singles

PHASES = ("combined", "pair", "grid")
STEP_BATCH = 4                      # neighbours scored per step; the first improvement among them is taken
COUPLED_PAIRS = 5                   # learned interacting pairs whose joint moves are steps
LIKELY_TO_FAIL = 0.5                # a predicted failure chance above this moves a neighbour to the end
OPTIMISM = 3.0                      # spreads of a learned pair's cell means credited to a joint move into a cell never scored
GRID_KNOBS = 7                      # ordinal knobs the grid spans (3**7 = 2187 configurations at most)


def step_neighbours(search: Search, center: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The feasible step neighbourhood of ``center`` (singles, joint moves of the space's declared
    ``coupled`` groups and of the learned pairs, repaired moves), taken in turns across the knobs they
    change, best predicted first (ties: nearest singles first, then a seeded shuffle); the moves the
    evaluations say will likely fail come last. A joint move into a cell of a learned pair that no
    evaluation holds is predicted ``OPTIMISM`` spreads of that pair's cell means better: the model cannot
    know such a cell, and pairs that pay only together pay there."""
    space, feasible, model = search.space, search.objective.feasible, learned(search)
    near = singles(space, center, near=True)
    groups = space.coupled + tuple(p for p in model.pairs if p not in space.coupled)[:COUPLED_PAIRS]
    moves = np.concatenate([singles(space, center), coupled(space, center, groups)])
    rest = np.concatenate([moves, repairs(space, center, moves, feasible, search.objective.linked)])
    near, rest = near[feasible(near)], rest[feasible(rest)]
    ordered = np.concatenate([near[rng.permutation(len(near))], rest[rng.permutation(len(rest))]])
    ordered = ordered[np.sort(np.unique(row_keys(ordered), return_index=True)[1])]   # each move once, where it first comes
    idx, values = search.evaluated()
    promise = model.predict(ordered) - OPTIMISM * model.untried(center, ordered, idx[np.isfinite(values)])
    ordered = _round_robin(center, ordered, promise)
    return ordered[np.argsort(model.failure(ordered) > LIKELY_TO_FAIL, kind="stable")]


def _round_robin(center: np.ndarray, moves: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """``moves`` taken in turns across the knobs (or knob pairs) they change, each group's moves best
    predicted first: every knob gets its best move tried before any knob gets its second."""
    if not len(moves):
        return moves
    changed = moves != center
    group = np.unique(row_keys(changed), return_inverse=True)[1]        # bytes of 0 and 1: the order of the rows' values
    order = np.lexsort((predicted, group))
    rank = np.empty(len(moves), dtype=np.int64)
    starts = np.r_[0, np.flatnonzero(np.diff(group[order])) + 1]
    sizes = np.diff(np.r_[starts, len(order)])
    rank[order] = np.arange(len(order)) - np.repeat(starts, sizes)
    return moves[np.lexsort((predicted, rank))]


def _steps(search: Search, current: np.ndarray, value: float, rng: np.random.Generator,
           patience: int | None) -> tuple[np.ndarray, float]:
    """First-improvement steps through the step neighbourhood until none improves, ``patience`` new neighbours
    in a row fail to (``None``: the whole neighbourhood), or a budget ends."""
    while search.stop_reason() is None:
        candidates = step_neighbours(search, current, rng)
        if patience is not None:                    # it counts new neighbours: one scored before is worth a try only if better
            useful = (i for i, row in enumerate(candidates) if search.seen.get(search.space.hash_idx(row), -np.inf) < value)
            candidates = candidates[list(islice(useful, patience))]    # hashes only as far as the patience reaches
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
    space = search.space
    if phase == "combined":                         # the singles' values are in the cache after the steps
        moves = singles(space, current)
        moves = moves[search.objective.feasible(moves)]
        return combined(current, moves, search.evaluate(moves, {"phase": phase}))
    if phase == "pair":
        return pairs(space, current)
    return grid(space, current, learned(search).top_knobs(space, GRID_KNOBS))


def climb(search: Search, start: np.ndarray, phases: tuple[str, ...] = PHASES, patience: int | None = None) -> str:
    """Move from ``start`` to a local optimum within the budgets; returns why it stopped.

    ``phases`` are the wider neighbourhoods tried after the steps (none: a cheaper polish);
    ``patience`` ends the steps after that many best-ordered new neighbours (not scored before) fail to improve.
    """
    current = np.asarray(start, dtype=np.int16)
    value = float(search.evaluate(current[None], {"phase": "start"})[0])
    rng = np.random.default_rng(search.seed)
    while True:
        current, value = _steps(search, current, value, rng, patience)
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


def from_allowed(search: Search, start: np.ndarray, local: Callable[[Search, np.ndarray], str]) -> str:
    """``local(search, start)``, a local search; where it found nothing because the restrictions rule out ``start``
    and everything around it (a space's default may break them), again from the nearest allowed configuration.
    Why it stopped."""
    stopped = local(search, start)
    if not search.top() and not search.objective.feasible(start[None])[0]:
        nearest = nearest_feasible(search.space, start, search.objective.feasible, np.random.default_rng(search.seed))
        if nearest is not None:
            stopped = local(search, nearest)
    return stopped


def run(search: Search) -> Outcome:
    if search.spec.start is None:
        raise ValueError("checkpoint needs a start plan or fixture")
    stopped = from_allowed(search, np.array(search.spec.start, dtype=np.int16), climb)
    return search.finish(search.top(), stopped)
