"""``bayes``: Bayesian optimisation with Gaussian processes, for spaces of measured kernels.

Two Gaussian processes with a Matérn 5/2 kernel (one length scale per knob) read the evaluations:
an ordinal knob is its position (0 to 1), a nominal one its one-hot vector scaled so that two values
lie one unit apart (past ``WIDE`` values, its value, compared: the same distance without a column
per value). The value process regresses the log-values (standardised), a failure (infeasible or
incorrect) counting as the worst value seen. The failure process regresses the failure indicator
(1: failed): the chance that a configuration fails, read from its neighbours, so that limits such
as divisibility show where an additive model cannot see them. Each process's length scales and
noise are chosen at every ask by the marginal likelihood, coordinate-wise over a grid. Each ask scores
the candidate with the highest expected improvement times its chance of not failing. The candidates
are the whole space where it holds at most ``CANDIDATES`` configurations, else that many drawn at
random among those the restrictions allow, plus every single move from the three best and every
one-step pair from the best; the cheaply infeasible and those scored before are left out. The
first evaluations are ``quick``'s space-filling design. The processes hold at most ``WINDOW`` evaluations (the best and the most
recent halves), so an ask's cost does not grow with the history. A proposal another worker of the
study is scoring is left out of later asks until its value arrives, so cooperating workers propose
apart. Lower values are better.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from tuner.search import Outcome, Search
from tuner.space import WHOLE_SPACE, Space, load_profile
from tuner.strategies.neighbourhood import pairs, row_keys, singles
from tuner.strategies.quick import feasible_design

CANDIDATES = 20_000                 # a space this size or smaller is scored whole at each ask
NOMINAL = 1 / math.sqrt(2)          # a nominal knob's one-hot column value: two values differ by distance 1
WIDE = 16                           # a nominal knob of more values is one input, its value (columns cost every product)
PREDICTED = 1 << 22                 # floats of the candidates' inputs or kernels held at once (32 MB each)
WINDOW = 200                        # evaluations the processes hold at most (an ask costs O(WINDOW**3))
SCALES = np.geomspace(0.05, 5.0, 9)     # length scales tried per knob (positions span 0 to 1)
NOISES = (1e-4, 1e-3, 1e-2, 1e-1)       # noise variances tried (standardised log-values)
FIT_ROUNDS = 2                      # coordinate-wise rounds over the knobs' length scales
LOCAL_STARTS = 3                    # best configurations whose single moves are always candidates
_erf = np.vectorize(math.erf, otypes=[float])


def _columns(values: np.ndarray, size: int, ordinal: bool) -> np.ndarray:
    """A knob's inputs, from its values' positions: an ordinal knob's position scaled to 0-1; a nominal knob's
    one-hot columns (``NOMINAL`` where set), or past ``WIDE`` values its position, compared by :func:`squared`."""
    if ordinal:
        return values[:, None] / (size - 1)
    if size > WIDE:
        return values[:, None].astype(float)
    hot = np.zeros((len(values), size))
    hot[np.arange(len(values)), values] = NOMINAL
    return hot


def features(space: Space, idx: np.ndarray) -> tuple[np.ndarray, list[slice], np.ndarray]:
    """The kernel's inputs of configurations ``idx``, each varying knob's columns among them, and which columns hold a
    wide nominal knob's value (:func:`_columns`)."""
    idx = np.asarray(idx, dtype=np.intp)
    columns, spans, by_value, start = [], [], [], 0
    for j, (size, ordinal) in enumerate(zip(space.sizes, space.ordinal, strict=True)):
        if size > 1:
            columns.append(_columns(idx[:, j], size, ordinal))
            width = columns[-1].shape[1]
            spans.append(slice(start, start + width))
            by_value += [not ordinal and width == 1] * width      # a nominal knob in one column: its value
            start += width
    return (np.concatenate(columns, axis=1) if columns else np.zeros((len(idx), 0))), spans, np.array(by_value, dtype=bool)


def squared(a: np.ndarray, b: np.ndarray, scale: np.ndarray, by_value: np.ndarray) -> np.ndarray:
    """Squared distances between the rows of ``a`` and ``b`` (:func:`features`), inputs divided by ``scale``: a column
    that holds a nominal knob's value adds ``2 * NOMINAL**2`` (one, scaled) where the values differ, as its one-hot
    columns would."""
    dense = ~by_value
    a_, b_ = a[:, dense] / scale[dense], b[:, dense] / scale[dense]
    sq = (a_ * a_).sum(1)[:, None] + (b_ * b_).sum(1)[None] - 2 * a_ @ b_.T
    for k in np.flatnonzero(by_value):
        sq += np.not_equal.outer(a[:, k], b[:, k]) * (2 * NOMINAL**2 / scale[k] ** 2)
    return sq


def matern(sq: np.ndarray) -> np.ndarray:
    """The Matérn 5/2 kernel (unit variance) at squared (scaled) distances ``sq``."""
    d = np.sqrt(5 * np.maximum(sq, 0))
    return (1 + d + d * d / 3) * np.exp(-d)


class Process:
    """A zero-mean Gaussian process with targets ``y``, its inputs' kernel matrix ``gram`` (length scales ``scale``) and ``noise``.

    ``fit`` (its negative log marginal likelihood) costs one Cholesky factorisation: that of the kernel matrix
    bordered by ``y``, whose last row is ``chol^-1 y``. The weights of predictions are solved only when asked for,
    once per process kept."""

    def __init__(self, gram: np.ndarray, y: np.ndarray, scale: np.ndarray, noise: float) -> None:
        self.scale, self.noise, n = scale, noise, len(y)
        bordered = np.empty((n + 1, n + 1))
        bordered[:n, :n] = gram + noise * np.eye(n)
        bordered[n, :n] = bordered[:n, n] = y
        bordered[n, n] = y @ y / noise + 1.0       # exceeds y' K^-1 y (K's eigenvalues exceed noise): the factor exists
        factor = np.linalg.cholesky(bordered)
        self.chol, self.white = factor[:n, :n], factor[n, :n]
        self.fit = 0.5 * self.white @ self.white + np.log(np.diag(self.chol)).sum()

    @functools.cached_property
    def alpha(self) -> np.ndarray:
        """``K^-1 y``: the weights of the posterior mean."""
        return np.linalg.solve(self.chol.T, self.white)

    def predict(self, cross: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation at the inputs whose kernel with this process's is ``cross``."""
        v = np.linalg.solve(self.chol, cross.T)
        return cross @ self.alpha, np.sqrt(np.maximum(1 + self.noise - (v * v).sum(0), 1e-12))


def _apart(columns: np.ndarray, by_value: bool) -> np.ndarray:
    """A knob's squared distances (unit scale) between the rows of its inputs ``columns`` (:func:`features`): a
    nominal knob's from its values, so that one of many values costs no cube of them."""
    if columns.shape[1] == 1 and not by_value:
        return ((columns[:, None] - columns[None]) ** 2).sum(-1)
    value = columns[:, 0] if by_value else columns.argmax(1)
    return np.not_equal.outer(value, value) * (2 * NOMINAL**2)


def fitted(x: np.ndarray, y: np.ndarray, spans: list[slice], by_value: np.ndarray) -> Process:
    """The process on ``x`` and ``y`` (:func:`features`) with the length scales (per knob) and noise of the best
    marginal likelihood found coordinate-wise over ``SCALES`` and ``NOISES``, from unit scales and noise 1e-2. Each
    knob's squared distances are computed once: a trial scale changes one term of their sum."""
    parts = [_apart(x[:, span], by_value[span.start]) for span in spans]

    def attempt(scale: np.ndarray, sq: np.ndarray, noise: float) -> Process | None:
        try:
            return Process(matern(sq), y, scale, noise)
        except np.linalg.LinAlgError:
            return None

    scale, sq = np.ones(x.shape[1]), np.sum(parts, axis=0) if parts else np.zeros((len(y), len(y)))
    best = attempt(scale, sq, 1e-2) or Process(matern(sq), y, scale, NOISES[-1])
    for _ in range(FIT_ROUNDS):
        for part, span in zip(parts, spans, strict=True):
            for value in SCALES:
                trial = best.scale.copy()
                trial[span] = value
                moved = sq + part * (value ** -2.0 - best.scale[span.start] ** -2.0)
                if (p := attempt(trial, moved, best.noise)) is not None and p.fit < best.fit:
                    best, sq = p, moved
        for noise in NOISES:
            if (p := attempt(best.scale, sq, noise)) is not None and p.fit < best.fit:
                best = p
    return best


def _window(values: np.ndarray) -> np.ndarray:
    """Positions of the evaluations the processes hold: all of them up to ``WINDOW``, else the best and the most
    recent halves (ties by position, so the same evaluations give the same window)."""
    if len(values) <= WINDOW:
        return np.arange(len(values))
    best = np.argsort(values, kind="stable")[:WINDOW // 2]
    return np.union1d(best, np.arange(len(values) - WINDOW // 2, len(values)))


def _candidates(search: Search, idx: np.ndarray, values: np.ndarray, left_out: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """What an ask scores: the whole space up to ``CANDIDATES`` configurations; else ``CANDIDATES`` drawn among those
    the restrictions allow, the single moves of the ``LOCAL_STARTS`` best (each knob to its ``CANDIDATES / knobs``
    values nearest the best's) and the pair moves of the best. Each once, none scored or left out, all feasible."""
    space = search.space
    if space.size <= CANDIDATES:
        pool = load_profile(WHOLE_SPACE, space).plans(0, space.size)
    else:
        best = [idx[i] for i in np.argsort(values, kind="stable")[:LOCAL_STARTS] if np.isfinite(values[i])]
        pool = np.concatenate([space.draw(CANDIDATES, rng)]               # uniform among what the restrictions allow
                              + [singles(space, b, per_knob=CANDIDATES // len(space.knobs)) for b in best]
                              + [pairs(space, b) for b in best[:1]])
    pool = pool.astype(np.int16)
    keys, first = np.unique(row_keys(pool), return_index=True)
    pool = pool[first[~np.isin(keys, row_keys(np.concatenate([idx, left_out]).astype(np.int16)))]]   # each once, none scored or left out
    return pool[search.objective.feasible(pool)]


def propose(search: Search, rng: np.random.Generator, pending: np.ndarray | None = None) -> np.ndarray | None:
    """The next configuration to score, never one scored before or one of ``pending`` (configurations other
    workers are scoring); ``None`` when no candidate is left."""
    space = search.space
    every, scores = search.evaluated()
    left_out = np.empty((0, len(space.knobs)), dtype=np.int16) if pending is None else pending
    pool = _candidates(search, every, scores, left_out, rng)          # in the window or not
    kept = _window(scores)
    idx, values = every[kept], scores[kept]
    ok = np.isfinite(values)
    if not len(pool) or ok.sum() < 2:
        return pool[rng.integers(len(pool))] if len(pool) else None
    x, spans, by_value = features(space, idx)
    logs = np.log(values[ok])
    y = np.zeros(len(values))
    y[ok] = (logs - logs.mean()) / (logs.std() or 1.0)
    y[~ok] = y[ok].max()                            # a failure counts as the worst value seen: steps away from it
    value = fitted(x, y, spans, by_value)
    failed = (~ok).astype(float)
    failure = None if ok.all() else fitted(x, failed - failed.mean(), spans, by_value)
    gain = np.empty(len(pool))
    rows = max(1, PREDICTED // max(x.shape[1], len(x)))         # candidates predicted at once
    for start in range(0, len(pool), rows):
        at = features(space, pool[start:start + rows])[0]
        mean, sd = value.predict(matern(squared(at, x, value.scale, by_value)))
        z = (y[ok].min() - mean) / sd
        part = sd * (z * 0.5 * (1 + _erf(z / math.sqrt(2))) + np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi))
        if failure is not None:
            part *= 1 - np.clip(matern(squared(at, x, failure.scale, by_value)) @ failure.alpha + failed.mean(), 0, 1)
        gain[start:start + rows] = part
    return pool[int(np.argmax(gain))]


def run(search: Search) -> Outcome:
    rng = np.random.default_rng(search.seed)                # each cooperating worker a stream of its own
    search.evaluate(feasible_design(search, rng), {"phase": "design"})
    pending: dict[str, np.ndarray] = {}         # proposals other workers are scoring: left out until their values arrive,
    for _ in range(20 * search.spec.max_evals):             # or each worker would propose the same one until then
        rows = np.array(list(pending.values()), dtype=np.int16).reshape(-1, len(search.space.knobs))
        if search.stop_reason() is not None or (pick := propose(search, rng, rows)) is None:
            break
        search.evaluate(pick[None], {"phase": "bayes"})
        pending = {h: row for h, row in (pending | dict.fromkeys(search.elsewhere, pick)).items() if h not in search.seen}
    return search.finish(search.top(), search.stop_reason() or "converged")
