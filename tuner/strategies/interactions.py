"""What a search has learned about its space: which knobs matter and which pairs pay only together.

A small additive model with pairwise corrections, fitted to the search's own evaluations (log of
the value, feasible and correct ones only): main effects by backfitting with shrinkage, then for
every pair of knobs the share of the residual its joint cells explain beyond what noise would
(the expected gain of a cell under no interaction is subtracted). The strongest pairs keep their
cell means, so the model predicts joint moves that pay only together. No knob is named anywhere:
the joint moves the climb takes and the knobs its grid spans come from here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from tuner.search import Search
from tuner.space import Space

SHRINK = 2.0                # pseudo-observations pulling a level's (or cell's) mean to zero
MIN_ROWS_PER_KNOB = 2       # fewer feasible evaluations than this per varying knob: nothing is learned
MAX_ROWS = 4000             # the most recent evaluations the model is fitted to
ROUNDS = 3                  # backfitting rounds
KEPT_PAIRS = 8              # strongest pairs whose cell means the model keeps for predictions
REFIT_GROWTH = 1.2          # refit once the evaluations have grown by this factor


@dataclass(frozen=True)
class Learned:
    """``importance[j]``: variance of knob j's main effect; ``pairs``: knob pairs by interaction strength
    (strongest first, only those that explain more than noise would); ``effects`` and ``cells``: the
    fitted main effects and the kept pairs' cell means (log-value, relative to the mean)."""

    importance: np.ndarray
    pairs: tuple[tuple[int, int], ...]
    effects: list[np.ndarray] = field(default_factory=list)
    cells: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    failures: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)

    def top_knobs(self, space: Space, count: int, ordinal_only: bool = True) -> tuple[int, ...]:
        """The ``count`` knobs with the largest main effects (space order when nothing is learned)."""
        candidates = [j for j in range(len(space.knobs)) if space.ordinal[j] or not ordinal_only]
        ranked = sorted(candidates, key=lambda j: (-self.importance[j], j))
        return tuple(sorted(ranked[:count]))

    def failure(self, idx: np.ndarray) -> np.ndarray:
        """Predicted chance that each configuration fails (is infeasible or incorrect): the highest
        failure rate among the pair cells it falls in (shrunk to the overall rate); 0 when none failed."""
        idx = np.asarray(idx, dtype=np.intp)
        out = np.zeros(len(idx))
        for (a, b), rates in self.failures.items():
            out = np.maximum(out, rates[idx[:, a], idx[:, b]])
        return out

    def predict(self, idx: np.ndarray) -> np.ndarray:
        """Predicted log-value (relative) of configurations ``idx``; zeros when nothing is learned."""
        idx = np.asarray(idx, dtype=np.intp)
        out = np.zeros(len(idx))
        for j, effect in enumerate(self.effects):
            out += effect[idx[:, j]]
        for (a, b), means in self.cells.items():
            out += means[idx[:, a], idx[:, b]]
        return out


def learn(space: Space, idx: np.ndarray, values: np.ndarray) -> Learned:
    """Fit the model to configurations ``idx`` with ``values`` (``inf`` rows are left out)."""
    k = len(space.knobs)
    keep = np.isfinite(values) & (values > 0)
    failures = _failures(space, np.asarray(idx)[-MAX_ROWS:], ~keep[-MAX_ROWS:])
    X, y = np.asarray(idx)[keep][-MAX_ROWS:].astype(np.intp), np.log(np.asarray(values)[keep][-MAX_ROWS:])
    if len(y) < MIN_ROWS_PER_KNOB * int((space.sizes > 1).sum()) or np.ptp(y) == 0:
        return Learned(np.zeros(k), (), failures=failures)
    residual = y - y.mean()
    effects = [np.zeros(int(s)) for s in space.sizes]
    for _ in range(ROUNDS):
        for j, size in enumerate(space.sizes):
            residual += effects[j][X[:, j]]
            effects[j] = np.bincount(X[:, j], residual, minlength=size) / (np.bincount(X[:, j], minlength=size) + SHRINK)
            residual -= effects[j][X[:, j]]
    importance = np.array([effects[j][X[:, j]].var() for j in range(k)])
    noise = residual.var()
    scored = []
    for a, b, cells, n_cells in _pair_cells(space, X):
        sums, counts = np.bincount(cells, residual, minlength=n_cells), np.bincount(cells, minlength=n_cells)
        gain = (sums ** 2 / (counts + SHRINK)).sum()
        expected = noise * (counts / (counts + SHRINK)).sum()
        if gain > expected:
            means = (sums / (counts + SHRINK)).reshape(space.sizes[a], space.sizes[b])
            scored.append((gain - expected, a, b, means))
    scored.sort(key=lambda item: (-item[0], item[1], item[2]))
    return Learned(importance, tuple((a, b) for _, a, b, _ in scored), effects,
                   {(a, b): means for _, a, b, means in scored[:KEPT_PAIRS]}, failures)


def _pair_cells(space: Space, idx: np.ndarray) -> Iterator[tuple[int, int, np.ndarray, int]]:
    """For every pair of varying knobs ``(a, b)``: each configuration's joint cell index, and the number of cells."""
    for a, b in combinations(range(len(space.knobs)), 2):
        if space.sizes[a] > 1 and space.sizes[b] > 1:
            yield a, b, idx[:, a] * space.sizes[b] + idx[:, b], int(space.sizes[a] * space.sizes[b])


def _failures(space: Space, idx: np.ndarray, failed: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """Per pair of knobs, the failure rate of each joint cell, shrunk to the overall rate (empty when nothing failed)."""
    if not failed.any() or failed.all():
        return {}
    prior = failed.mean()
    out = {}
    for a, b, cells, n_cells in _pair_cells(space, idx.astype(np.intp)):
        fails, counts = np.bincount(cells, failed, minlength=n_cells), np.bincount(cells, minlength=n_cells)
        out[(a, b)] = ((fails + SHRINK * prior) / (counts + SHRINK)).reshape(space.sizes[a], space.sizes[b])
    return out


def learned(search: Search) -> Learned:
    """The model of ``search``'s evaluations so far (refitted as they grow)."""
    count, model = search.memo.get("learned", (0, None))
    if model is None or len(search.seen) >= max(count * REFIT_GROWTH, count + 1):
        idx, values = search.evaluated()
        model = learn(search.space, idx, values)
        search.memo["learned"] = (len(search.seen), model)
    return model
