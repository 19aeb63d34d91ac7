"""The Parzen sampler (TPE): Optuna's densities computed exactly per knob, and a sampler that learns."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator, _ParzenEstimatorParameters
from optuna.samplers._tpe.sampler import default_gamma, default_weights

from tuner.space import Knob, Space
from tuner.strategies.parzen import Parzen, densities, gamma, weights


@st.composite
def observations(draw: st.DrawFn, most: int = 25) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Up to ``most`` trials x knobs of indices, the knobs' sizes and which are ordinal."""
    sizes = np.array(draw(st.lists(st.integers(1, 40), min_size=1, max_size=4)))
    n = draw(st.integers(0, most))
    obs = np.array([[draw(st.integers(0, s - 1)) for s in sizes] for _ in range(n)], dtype=np.int16).reshape(n, len(sizes))
    return obs, sizes, np.array(draw(st.lists(st.booleans(), min_size=len(sizes), max_size=len(sizes))))


@given(observations())               # up to 25 trials: equal weights, so which duplicate gets which bandwidth cannot matter
def test_each_knobs_density_is_optunas_parzen_estimator(case):
    """Optuna's own estimator (the reference), knob by knob: a probability per value, equal to ours up to the erf
    approximation."""
    obs, sizes, ordinal = case
    ours = densities(obs, sizes, ordinal)
    assert np.allclose(ours.sum(axis=1), 1) and (ours >= 0).all()
    for j, (size, is_ordinal) in enumerate(zip(sizes, ordinal, strict=True)):
        dist = IntDistribution(0, int(size) - 1) if is_ordinal else CategoricalDistribution(list(range(size)))
        reference = _ParzenEstimator({"x": obs[:, j].astype(float)}, {"x": dist},
                                     _ParzenEstimatorParameters(1.0, True, False, default_weights, False))
        expected = np.exp(reference.log_pdf({"x": np.arange(size, dtype=float)}))
        assert (ours[j, size:] == 0).all()
        np.testing.assert_allclose(ours[j, :size], expected, rtol=1e-4)


def test_the_split_and_the_weights_are_optunas():
    for n in range(200):
        assert gamma(n) == default_gamma(n)
        np.testing.assert_allclose(weights(n), default_weights(n))


def _space() -> Space:
    knobs = [Knob(f"o{i}", tuple(range(16)), "ordinal", 0) for i in range(4)]
    knobs += [Knob(f"n{i}", ("a", "b", "c", "d", "e"), "nominal", "a") for i in range(2)]
    return Space("toy", tuple(knobs))


def _loss(idx: np.ndarray) -> float:
    """Separable, lowest at o* = 11 and n* = 'd' (index 3); configurations with o0 < 3 fail."""
    return np.inf if idx[0] < 3 else float(np.abs(idx[:4] - 11).sum() + 5 * (idx[4:] != 3).sum())


def _run(seed: int, asks: int, learn: bool) -> list[np.ndarray]:
    sampler = Parzen(_space(), seed)
    proposed = []
    for _ in range(asks):
        idx = sampler.ask() if learn else Parzen(_space(), seed + len(proposed)).ask()
        proposed.append(idx)
        sampler.tell(idx, _loss(idx))
    return proposed


def test_the_sampler_is_seeded_and_learns_where_the_good_values_are():
    first, again = _run(0, 120, True), _run(0, 120, True)
    assert all((a == b).all() for a, b in zip(first, again, strict=True))
    assert any((a != b).any() for a, b in zip(first, _run(1, 120, True), strict=True))
    late = np.array([_loss(idx) for idx in first[-40:]])
    at_random = np.array([_loss(idx) for idx in _run(0, 120, False)[-40:]])
    assert np.isfinite(late).mean() > np.isfinite(at_random).mean()          # it learns where failures are
    assert np.median(late[np.isfinite(late)]) < 0.5 * np.median(at_random[np.isfinite(at_random)])


def test_values_never_seen_keep_a_chance():
    sampler = Parzen(_space(), 0)
    for _ in range(30):
        sampler.tell(np.array([11, 11, 11, 11, 3, 3], dtype=np.int16), 0.0)
    assert (densities(np.full((30, 1), 11), np.array([16]), np.array([True])) > 0).all()
    seen = {tuple(sampler.ask()) for _ in range(400)}
    assert len(seen) > 1                                       # the prior kernel keeps exploring


@given(observations(most=80), st.integers(0, 2**32 - 1), st.booleans())
def test_every_ask_is_a_configuration_of_the_space_and_the_seed_fixes_it(case, seed, at_random):
    obs, sizes, ordinal = case
    knobs = tuple(Knob(f"k{j}", tuple(range(size)), "ordinal" if is_ordinal else "nominal", 0)
                  for j, (size, is_ordinal) in enumerate(zip(sizes, ordinal, strict=True)))
    asks = []
    for _ in range(2):
        sampler = Parzen(Space("drawn", knobs), seed)
        for i, row in enumerate(obs):
            sampler.tell(row, np.inf if i % 3 == 0 else float(i % 7))       # failures among the trials
        asks.append(sampler.ask(at_random=at_random))
    assert asks[0].dtype == np.int16 and asks[0].shape == (len(sizes),)
    assert ((asks[0] >= 0) & (asks[0] < sizes)).all() and (asks[0] == asks[1]).all()
