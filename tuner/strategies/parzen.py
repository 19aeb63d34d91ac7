"""A tree-structured Parzen estimator (TPE) over index vectors, one ask a few numpy passes.

The algorithm of Optuna's default ``TPESampler`` (multivariate) with its defaults, every knob
categorical as a user's ``suggest_categorical`` makes it: the best ``gamma(n)`` trials (failed ones
after every finite one) make the good density ``l``, the rest the bad density ``g``; older trials
weigh less in ``g``. Each density is a mixture of one kernel per trial and a prior kernel, and a
kernel is a product over the knobs: on each knob, the trial's own value plus a share of the prior
spread over every value. ``EI_CANDIDATES`` configurations drawn from ``l`` (a kernel, then each
knob from it) compete and the one with the highest ``l / g`` is proposed, so values that did well
together are proposed together. Its cost grows with the trials held (trials x candidates x knobs),
so the caller bounds them.
"""

from __future__ import annotations

import math

import numpy as np

from tuner.space import Space

STARTUP_TRIALS = 10                # asks before this many trials are uniform at random (Optuna's default)
EI_CANDIDATES = 24                 # configurations drawn from the good density per ask (Optuna's default)
PRIOR_WEIGHT = 1.0                 # weight of the prior kernel in each density (Optuna's default)


def gamma(n: int) -> int:
    """Trials in the good density out of ``n`` (Optuna's ``default_gamma``)."""
    return min(math.ceil(0.1 * n), 25)


def weights(n: int) -> np.ndarray:
    """Kernel weights of ``n`` trials, oldest first: the oldest ``n - 25`` ramp up (Optuna's ``default_weights``)."""
    if n < 25:
        return np.ones(n)
    return np.concatenate([np.linspace(1.0 / n, 1.0, num=n - 25), np.ones(25)])


class Mixture:
    """The Parzen mixture of trials ``obs`` (trials x knobs, oldest first, as indices) and the prior, over
    knobs of ``sizes`` values: one product kernel per trial, each knob's factor its own value with weight
    ``keep`` and uniform over the knob's values otherwise; the prior kernel is uniform."""

    def __init__(self, obs: np.ndarray, sizes: np.ndarray) -> None:
        self.obs, self.sizes = np.asarray(obs, dtype=np.int64), np.asarray(sizes, dtype=np.int64)
        share = PRIOR_WEIGHT / (len(self.obs) + 1)                  # of the prior, per value (Optuna's kernels)
        self.keep = 1.0 / (1.0 + self.sizes * share)                # per knob
        mixture = np.append(weights(len(self.obs)), PRIOR_WEIGHT)
        self.mixture = mixture / mixture.sum()                      # the prior's weight last

    def log_pdf(self, rows: np.ndarray) -> np.ndarray:
        """Log probability of each configuration of ``rows`` (index vectors)."""
        rows = np.asarray(rows, dtype=np.int64)
        uniform = (1.0 - self.keep) / self.sizes                            # per knob
        same, other = np.log(self.keep + uniform), np.log(uniform)          # a factor's log: the trial's value or not
        log = np.where(self.obs[:, None, :] == rows[None], same, other).sum(axis=2) + np.log(self.mixture[:-1])[:, None]
        log = np.vstack([log, np.full(len(rows), np.log(self.mixture[-1]) - np.log(self.sizes).sum())])
        top = log.max(axis=0)
        return top + np.log(np.exp(log - top).sum(axis=0))

    def sample(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` configurations drawn from the mixture (a kernel, then each knob from its factor)."""
        kernel = rng.choice(len(self.mixture), size=count, p=self.mixture)
        uniform = (rng.random((count, len(self.sizes))) * self.sizes).astype(np.int64)
        if not len(self.obs):
            return uniform
        own = self.obs[np.minimum(kernel, len(self.obs) - 1)]
        kept = (kernel < len(self.obs))[:, None] & (rng.random((count, len(self.sizes))) < self.keep)
        return np.where(kept, own, uniform)


class Parzen:
    """Trials told (index vector, value; ``inf`` for failed), asked for the next index vector to try.

    Lower values are better. Seeded: the same tells give the same asks.
    """

    def __init__(self, space: Space, seed: int) -> None:
        self.sizes = np.asarray(space.sizes, dtype=np.int64)
        self.rng = np.random.default_rng(seed)
        self._rows = np.empty((0, len(self.sizes)), dtype=np.int16)    # the trials in the first ``_count`` rows, the
        self._values = np.empty(0)                                      # arrays grown by doubling: a tell writes a row
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def tell(self, idx: np.ndarray, value: float) -> None:
        if self._count == len(self._values):
            self._rows = np.resize(self._rows, (max(16, 2 * self._count), len(self.sizes)))
            self._values = np.resize(self._values, len(self._rows))
        self._rows[self._count], self._values[self._count] = idx, value
        self._count += 1

    def forget(self) -> None:
        """Drop every trial (the sampler's random stream goes on)."""
        self._count = 0

    def ask(self, at_random: bool = False) -> np.ndarray:
        """The next index vector: TPE's (of ``EI_CANDIDATES`` drawn from ``l``, the one with the highest
        ``l / g``); uniform at random for the first ``STARTUP_TRIALS`` trials or when asked ``at_random``."""
        return self.candidates(at_random)[0]

    def candidates(self, at_random: bool = False) -> np.ndarray:
        """What :meth:`ask` chooses from, best first (``l / g`` falling, ties in draw order): the ``EI_CANDIDATES``
        drawn from ``l``, or one row uniform at random."""
        if at_random or len(self) < STARTUP_TRIALS:
            return np.array([[self.rng.integers(0, s) for s in self.sizes]], dtype=np.int16)
        rows, values = self._rows[:self._count], self._values[:self._count]
        ranked = np.argsort(values, kind="stable")           # failed (inf) after every finite value, each in order
        good = np.zeros(len(values), dtype=bool)
        good[ranked[:gamma(len(values))]] = True
        good_density, bad_density = Mixture(rows[good], self.sizes), Mixture(rows[~good], self.sizes)
        candidates = good_density.sample(EI_CANDIDATES, self.rng)
        gain = good_density.log_pdf(candidates) - bad_density.log_pdf(candidates)
        return candidates[np.argsort(-gain, kind="stable")].astype(np.int16)
