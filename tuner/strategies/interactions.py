"""What a search has learned about its space: which knobs matter and which pairs pay only together.

A small additive model with pairwise corrections, fitted to the search's own evaluations (log of
the value, feasible and correct ones only): main effects by backfitting with shrinkage, then for
every pair of knobs the share of the residual its joint cells explain beyond what noise would
(the expected gain of a cell under no interaction is subtracted). The strongest pairs keep their
cell means, so the model predicts joint moves that pay only together. Failures (infeasible or
incorrect evaluations) get a model of their own, a logistic regression over the knobs' values. No
knob is named anywhere: the joint moves the climb takes, the knobs its grid spans and the moves
deemed likely to fail come from here.
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
FAILURE_PRIOR = 1.0         # precision of the Gaussian prior on the failure model's weights
NEWTON_STEPS = 25           # at most, fitting the failure model
REFIT_GROWTH = 1.2          # refit once the evaluations have grown by this factor
BINS = 32                   # a knob with more values is seen by pair cells and the failure model as this many runs of them


@dataclass(frozen=True)
class Learned:
    """``importance[j]``: variance of knob j's main effect; ``pairs``: knob pairs by interaction strength
    (strongest first, only those that explain more than noise would); ``effects`` and ``cells``: the
    fitted main effects and the kept pairs' cell means (log-value, relative to the mean), a cell being a
    pair of the knobs' bins (``bins[j][v]``: the bin of value ``v`` of knob ``j``; each value its own bin
    unless the knob has more than ``BINS`` values)."""

    importance: np.ndarray
    pairs: tuple[tuple[int, int], ...]
    effects: list[np.ndarray] = field(default_factory=list)
    cells: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    failures: Failures | None = None
    bins: list[np.ndarray] = field(default_factory=list)

    def top_knobs(self, space: Space, count: int, ordinal_only: bool = True) -> tuple[int, ...]:
        """The ``count`` knobs with the largest main effects (space order when nothing is learned)."""
        candidates = [j for j in range(len(space.knobs)) if space.ordinal[j] or not ordinal_only]
        ranked = sorted(candidates, key=lambda j: (-self.importance[j], j))
        return tuple(sorted(ranked[:count]))

    def failure(self, idx: np.ndarray) -> np.ndarray:
        """Predicted chance that each configuration fails (is infeasible or incorrect); 0 when none failed."""
        return np.zeros(len(idx)) if self.failures is None else self.failures(idx)

    def untried(self, center: np.ndarray, idx: np.ndarray, scored: np.ndarray) -> np.ndarray:
        """Per configuration of ``idx``: summed over the kept pairs whose two knobs both differ from ``center``
        and whose joint cell no configuration of ``scored`` holds, the spread (standard deviation) of that
        pair's cell means. What a joint move into a cell no evaluation has shown might hold (log-value)."""
        idx, scored = np.asarray(idx, dtype=np.intp), np.asarray(scored, dtype=np.intp)
        out = np.zeros(len(idx))
        for (a, b), means in self.cells.items():
            seen = np.zeros(means.shape, dtype=bool)
            seen[self.bins[a][scored[:, a]], self.bins[b][scored[:, b]]] = True
            joint = (idx[:, a] != center[a]) & (idx[:, b] != center[b])
            out += means.std() * (joint & ~seen[self.bins[a][idx[:, a]], self.bins[b][idx[:, b]]])
        return out

    def predict(self, idx: np.ndarray) -> np.ndarray:
        """Predicted log-value (relative) of configurations ``idx``; zeros when nothing is learned."""
        idx = np.asarray(idx, dtype=np.intp)
        out = _summed(self.effects, idx)
        for (a, b), means in self.cells.items():
            out += means[self.bins[a][idx[:, a]], self.bins[b][idx[:, b]]]
        return out


def learn(space: Space, idx: np.ndarray, values: np.ndarray) -> Learned:
    """Fit the model to configurations ``idx`` with ``values`` (``inf`` rows are left out)."""
    k = len(space.knobs)
    keep = np.isfinite(values) & (values > 0)
    failures = _failures(space, np.asarray(idx)[-MAX_ROWS:], ~keep[-MAX_ROWS:])
    X, y = np.asarray(idx)[keep][-MAX_ROWS:].astype(np.intp), np.log(np.asarray(values)[keep][-MAX_ROWS:])
    if len(y) < max(1, MIN_ROWS_PER_KNOB * int((space.sizes > 1).sum())) or np.ptp(y) == 0:     # none (no knob varies), or too few
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
    bins = [_bins(int(size)) for size in space.sizes]
    widths = [int(b[-1]) + 1 for b in bins]
    scored = []
    for a, b, cells, n_cells in _pair_cells(space, np.stack([bins[j][X[:, j]] for j in range(k)], axis=1), widths):
        sums, counts = np.bincount(cells, residual, minlength=n_cells), np.bincount(cells, minlength=n_cells)
        gain = (sums ** 2 / (counts + SHRINK)).sum()
        expected = noise * (counts / (counts + SHRINK)).sum()
        if gain > expected:
            means = (sums / (counts + SHRINK)).reshape(widths[a], widths[b])
            scored.append((gain - expected, a, b, means))
    scored.sort(key=lambda item: (-item[0], item[1], item[2]))
    return Learned(importance, tuple((a, b) for _, a, b, _ in scored), effects,
                   {(a, b): means for _, a, b, means in scored[:KEPT_PAIRS]}, failures, bins)


def _bins(size: int) -> np.ndarray:
    """The bin of each of a knob's ``size`` values: its own up to ``BINS`` values, else ``BINS`` runs of neighbouring
    positions, so that a pair of knobs with thousands of values has at most ``BINS**2`` cells, not millions."""
    return np.arange(size) if size <= BINS else np.arange(size) * BINS // size


def _pair_cells(space: Space, binned: np.ndarray, widths: list[int]) -> Iterator[tuple[int, int, np.ndarray, int]]:
    """For every pair of varying knobs ``(a, b)``: each configuration's joint cell index (over the knobs' bins
    ``binned``, ``widths`` of them each), and the number of cells."""
    for a, b in combinations(range(len(space.knobs)), 2):
        if space.sizes[a] > 1 and space.sizes[b] > 1:
            yield a, b, binned[:, a] * widths[b] + binned[:, b], widths[a] * widths[b]


@dataclass(frozen=True)
class Failures:
    """Logistic regression of failure on each knob's value (one indicator per value) and, for ordinal
    knobs, its position (0 to 1): the log-odds of failing are additive over the knobs, so a limit
    such as "this tile needs at least that many warps" shows as a slope along both knobs.
    ``logits[j][v]``: what value ``v`` of knob ``j`` adds to the log-odds."""

    intercept: float
    logits: list[np.ndarray]

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        return _chance(_summed(self.logits, idx, self.intercept))


def _summed(tables: list[np.ndarray], idx: np.ndarray, start: float = 0.0) -> np.ndarray:
    """Per configuration, ``start`` plus each knob's table entry for its value (knob order)."""
    idx = np.asarray(idx, dtype=np.intp)
    out = np.full(len(idx), start)
    for j, table in enumerate(tables):
        out += table[idx[:, j]]
    return out


def _chance(log_odds: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-np.clip(log_odds, -30, 30)))


def _encodings(space: Space) -> list[np.ndarray]:
    """Per knob, the feature rows of its values: one indicator per value (per bin of values, for a knob with more
    than ``BINS``: the model's size stays bounded), then the position of an ordinal value (no columns for a knob
    with one value)."""
    out = []
    for size, ordinal in zip(space.sizes, space.ordinal, strict=True):
        size = int(size)
        bins = _bins(size)
        rows = np.eye(int(bins[-1]) + 1)[bins] if size > 1 else np.empty((1, 0))
        out.append(np.c_[rows, np.arange(size) / (size - 1)] if size > 1 and ordinal else rows)
    return out


def _failures(space: Space, idx: np.ndarray, failed: np.ndarray) -> Failures | None:
    """The failure model fitted by Newton's method with a Gaussian prior (precision ``FAILURE_PRIOR``)
    on every weight but the intercept (``None`` when nothing or everything failed)."""
    if not failed.any() or failed.all():
        return None
    encodings, idx = _encodings(space), np.asarray(idx, dtype=np.intp)
    X = np.concatenate([np.ones((len(idx), 1))] + [e[idx[:, j]] for j, e in enumerate(encodings)], axis=1)
    y = failed.astype(float)
    prior = np.r_[0.0, np.full(X.shape[1] - 1, FAILURE_PRIOR)]
    w = np.zeros(X.shape[1])
    for _ in range(NEWTON_STEPS):
        p = _chance(X @ w)
        gradient = X.T @ (p - y) + prior * w
        hessian = X.T @ (X * (p * (1 - p))[:, None]) + np.diag(prior + 1e-9)
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-6:
            break
    ends = np.cumsum([1] + [e.shape[1] for e in encodings])
    return Failures(float(w[0]), [e @ w[a:b] for e, a, b in zip(encodings, ends[:-1], ends[1:], strict=True)])


def learned(search: Search) -> Learned:
    """The model of ``search``'s evaluations so far (refitted as they grow)."""
    count, model = search.memo.get("learned", (0, None))
    if model is None or len(search.seen) >= max(count * REFIT_GROWTH, count + 1):
        idx, values = search.evaluated()
        model = learn(search.space, idx, values)
        search.memo["learned"] = (len(search.seen), model)
    return model
