"""A univariate tree-structured Parzen estimator (TPE) over index vectors, one ask a few numpy passes.

The algorithm of Optuna's independent ``TPESampler`` with its defaults: the best ``gamma(n)`` trials
(failed ones after every finite one) make the good density ``l``, the rest the bad density ``g``;
older trials weigh less in ``g``; each density is a mixture of one kernel per trial and a prior
kernel; per knob, ``EI_CANDIDATES`` values drawn from ``l`` compete and the one with the highest
``l / g`` is proposed. Every knob has finitely many values, so each density is computed exactly as a
probability per value: an ordinal knob's kernels are Gaussians over its index cells (Optuna's
discretised truncated normals, with its bandwidths and magic clip), a nominal knob's are categorical.
That makes an ask a few array operations over all knobs at once where Optuna loops in Python;
its cost grows with the trials held (trials x values), so the caller bounds them.
"""

from __future__ import annotations

import math

import numpy as np

from tuner.space import Space

STARTUP_TRIALS = 10                # asks before this many trials are uniform at random (Optuna's default)
EI_CANDIDATES = 24                 # values drawn from the good density per knob (Optuna's default)
PRIOR_WEIGHT = 1.0                 # weight of the prior kernel in each density (Optuna's default)


def gamma(n: int) -> int:
    """Trials in the good density out of ``n`` (Optuna's ``default_gamma``)."""
    return min(math.ceil(0.1 * n), 25)


def weights(n: int) -> np.ndarray:
    """Kernel weights of ``n`` trials, oldest first: the oldest ``n - 25`` ramp up (Optuna's ``default_weights``)."""
    if n < 25:
        return np.ones(n)
    return np.concatenate([np.linspace(1.0 / n, 1.0, num=n - 25), np.ones(25)])


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    """Standard normal CDF (Abramowitz and Stegun 7.1.26 for erf: absolute error below 1.5e-7)."""
    z = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-z * z)
    return 0.5 * (1.0 + np.sign(x) * erf)


def _ordinal(obs: np.ndarray, sizes: np.ndarray, mixture: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Ordinal knobs: Gaussians centred on the observed indices (Optuna's bandwidths and magic clip) and a
    prior one, truncated to [-0.5, size - 0.5] and integrated over each index's cell."""
    n = len(obs)
    order = np.argsort(obs, axis=0, kind="stable")          # stable: which duplicate gets which bandwidth is fixed
    padded = np.vstack([np.full(len(sizes), -0.5), np.take_along_axis(obs, order, 0), sizes - 0.5])
    sorted_sigmas = np.maximum(padded[1:-1] - padded[:-2], padded[2:] - padded[1:-1])
    if n >= 2:                                              # endpoints are not neighbours
        sorted_sigmas[0], sorted_sigmas[-1] = padded[2] - padded[1], padded[-2] - padded[-3]
    sigmas = np.empty_like(sorted_sigmas)
    np.put_along_axis(sigmas, order, sorted_sigmas, 0)
    sigmas = np.vstack([np.clip(sigmas, sizes / min(100.0, n + 2.0), sizes), sizes])
    mus = np.vstack([obs, (sizes - 1) / 2])
    edges = np.append(values, len(values)) - 0.5
    cdf = _normal_cdf((edges - mus[..., None]) / sigmas[..., None])          # kernels x knobs x edges
    inside = np.take_along_axis(cdf, sizes[None, :, None], 2) - cdf[..., :1]                  # up to size - 0.5
    return np.einsum("i,ijk->jk", mixture, np.diff(cdf, axis=2) / np.maximum(inside, 1e-300))


def _nominal(obs: np.ndarray, sizes: np.ndarray, mixture: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Nominal knobs: per trial, its own choice plus a share of the prior spread over every choice; a uniform prior."""
    share = PRIOR_WEIGHT / (len(obs) + 1)
    kernels = ((obs[..., None] == values) + share) / (sizes[:, None] * share + 1)
    return np.einsum("i,ijk->jk", mixture[:-1], kernels) + mixture[-1] / sizes[:, None]


def densities(obs: np.ndarray, sizes: np.ndarray, ordinal: np.ndarray) -> np.ndarray:
    """Per knob (rows), the probability of each value (columns; zero past the knob's size) under the Parzen
    mixture of ``obs`` (trials x knobs, oldest first, as indices) and the prior."""
    mixture = np.append(weights(len(obs)), PRIOR_WEIGHT)
    mixture /= mixture.sum()
    values = np.arange(sizes.max())
    out = np.empty((len(sizes), len(values)))
    out[ordinal] = _ordinal(obs[:, ordinal].astype(float), sizes[ordinal], mixture, values)
    out[~ordinal] = _nominal(obs[:, ~ordinal], sizes[~ordinal], mixture, values)
    return np.where(values < sizes[:, None], out, 0.0)


class Parzen:
    """Trials told (index vector, value; ``inf`` for failed), asked for the next index vector to try.

    Lower values are better. Seeded: the same tells give the same asks.
    """

    def __init__(self, space: Space, seed: int) -> None:
        self.sizes = np.asarray(space.sizes, dtype=int)
        self.ordinal = np.array([k.kind == "ordinal" for k in space.knobs])
        self.rng = np.random.default_rng(seed)
        self.rows: list[np.ndarray] = []
        self.values: list[float] = []

    def __len__(self) -> int:
        return len(self.values)

    def tell(self, idx: np.ndarray, value: float) -> None:
        self.rows.append(np.asarray(idx, dtype=np.int16))
        self.values.append(float(value))

    def forget(self) -> None:
        """Drop every trial (the sampler's random stream goes on)."""
        self.rows, self.values = [], []

    def ask(self, at_random: bool = False) -> np.ndarray:
        """The next index vector: TPE's (per knob, the drawn candidate with the highest ``l / g``); uniform at random
        for the first ``STARTUP_TRIALS`` trials or when asked ``at_random``."""
        if at_random or len(self) < STARTUP_TRIALS:
            return np.array([self.rng.integers(0, s) for s in self.sizes], dtype=np.int16)
        rows, values = np.stack(self.rows), np.asarray(self.values)
        ranked = np.argsort(values, kind="stable")           # failed (inf) after every finite value, each in order
        good = np.zeros(len(values), dtype=bool)
        good[ranked[:gamma(len(values))]] = True
        good_density = densities(rows[good], self.sizes, self.ordinal)
        bad_density = densities(rows[~good], self.sizes, self.ordinal)
        cumulative = np.cumsum(good_density, axis=1)         # EI_CANDIDATES draws per knob from the good density
        quantiles = self.rng.random((len(self.sizes), EI_CANDIDATES)) * cumulative[:, -1:]
        drawn = np.minimum((cumulative[:, None, :] <= quantiles[..., None]).sum(axis=2), self.sizes[:, None] - 1)
        gain = np.log(np.take_along_axis(good_density, drawn, 1)) - np.log(np.take_along_axis(bad_density, drawn, 1))
        return np.take_along_axis(drawn, gain.argmax(axis=1)[:, None], 1)[:, 0].astype(np.int16)
