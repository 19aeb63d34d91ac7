"""The Parzen sampler (TPE): Optuna's multivariate densities over categorical knobs, and a sampler that learns."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from optuna.distributions import CategoricalDistribution
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator, _ParzenEstimatorParameters
from optuna.samplers._tpe.sampler import default_gamma, default_weights

from tuner.space import WHOLE_SPACE, Knob, Profile, Space
from tuner.strategies.parzen import EI_CANDIDATES, STARTUP_TRIALS, Mixture, Parzen, gamma, weights


@st.composite
def observations(draw: st.DrawFn, most: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Up to ``most`` trials x knobs of indices, and the knobs' sizes."""
    sizes = np.array(draw(st.lists(st.integers(1, 12), min_size=1, max_size=4)))
    n = draw(st.integers(0, most))
    obs = np.array([[draw(st.integers(0, s - 1)) for s in sizes] for _ in range(n)], dtype=np.int16).reshape(n, len(sizes))
    return obs, sizes


def _every(sizes: np.ndarray) -> np.ndarray:
    whole = Profile(WHOLE_SPACE, "every configuration", tuple(tuple(range(s)) for s in sizes))
    return whole.plans(0, whole.size)


@given(observations())
def test_the_density_is_optunas_multivariate_parzen_estimator(case):
    """Optuna's own estimator (the reference), every knob categorical: the same probability for every configuration."""
    obs, sizes = case
    every = _every(sizes)
    ours = Mixture(obs, sizes).log_pdf(every)
    space = {f"x{j}": CategoricalDistribution(list(range(size))) for j, size in enumerate(sizes)}
    reference = _ParzenEstimator({f"x{j}": obs[:, j].astype(float) for j in range(len(sizes))}, space,
                                 _ParzenEstimatorParameters(1.0, True, False, default_weights, True))
    expected = reference.log_pdf({f"x{j}": every[:, j].astype(float) for j in range(len(sizes))})
    np.testing.assert_allclose(ours, expected, rtol=1e-9, atol=1e-12)
    assert np.isclose(np.exp(ours).sum(), 1)


def test_samples_follow_the_density():
    """Drawn configurations come as often as the density says (seeded: 200,000 draws, within 1% absolute)."""
    sizes = np.array([3, 4, 2])
    obs = np.array([[0, 1, 1], [2, 3, 0], [0, 1, 1], [1, 0, 0]], dtype=np.int16)
    mixture = Mixture(obs, sizes)
    drawn = mixture.sample(200_000, np.random.default_rng(0))
    every = _every(sizes)
    counts = np.bincount(np.ravel_multi_index(drawn.T, sizes), minlength=len(every)) / len(drawn)
    np.testing.assert_allclose(counts[np.ravel_multi_index(every.T, sizes)], np.exp(mixture.log_pdf(every)), atol=0.01)


def test_the_split_and_the_weights_are_optunas():
    for n in range(300):                                  # the split is capped from n = 241 on
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
    # 300 asks: categorical kernels give a value no credit for its neighbours' results, so on 16 ** 4 * 5 ** 2
    # configurations the sampler needs more trials than an ordinal one before its last 40 stand out
    first, again = _run(0, 300, True), _run(0, 300, True)
    assert all((a == b).all() for a, b in zip(first, again, strict=True))
    assert any((a != b).any() for a, b in zip(first, _run(1, 300, True), strict=True))
    late = np.array([_loss(idx) for idx in first[-40:]])
    at_random = np.array([_loss(idx) for idx in _run(0, 300, False)[-40:]])
    assert np.isfinite(late).mean() > np.isfinite(at_random).mean()          # it learns where failures are
    assert np.median(late[np.isfinite(late)]) < 0.5 * np.median(at_random[np.isfinite(at_random)])


def test_values_never_seen_keep_a_chance():
    sampler = Parzen(_space(), 0)
    for _ in range(30):
        sampler.tell(np.array([11, 11, 11, 11, 3, 3], dtype=np.int16), 0.0)
    assert (np.exp(Mixture(np.full((30, 1), 11), np.array([16])).log_pdf(np.arange(16)[:, None])) > 0).all()
    seen = {tuple(sampler.ask()) for _ in range(400)}
    assert len(seen) > 1                                       # the prior kernel keeps exploring


@given(observations(most=80), st.integers(0, 2**32 - 1), st.booleans())
def test_every_ask_is_a_configuration_of_the_space_and_the_seed_fixes_it(case, seed, at_random):
    obs, sizes = case
    knobs = tuple(Knob(f"k{j}", tuple(range(size)), "ordinal", 0) for j, size in enumerate(sizes))
    asks = []
    for _ in range(2):
        sampler = Parzen(Space("drawn", knobs), seed)
        for i, row in enumerate(obs):
            sampler.tell(row, np.inf if i % 3 == 0 else float(i % 7))       # failures among the trials
        asks.append(sampler.ask(at_random=at_random))
    assert asks[0].dtype == np.int16 and asks[0].shape == (len(sizes),)
    assert ((asks[0] >= 0) & (asks[0] < sizes)).all() and (asks[0] == asks[1]).all()


@given(observations(), st.integers(0, 2**32 - 1))
def test_the_candidates_are_ranked_by_the_gain_and_an_ask_is_the_first(case, seed):
    obs, sizes = case
    space = Space("drawn", tuple(Knob(f"k{j}", tuple(range(size)), "ordinal", 0) for j, size in enumerate(sizes)))
    samplers = [Parzen(space, seed), Parzen(space, seed)]
    values = np.random.default_rng(seed).random(len(obs))
    for sampler in samplers:
        for row, value in zip(obs, values, strict=True):
            sampler.tell(row, value)
    ranked = samplers[0].candidates()
    assert (ranked[0] == samplers[1].ask()).all()
    if len(obs) >= STARTUP_TRIALS:
        good = np.zeros(len(obs), dtype=bool)
        good[np.argsort(values, kind="stable")[:gamma(len(obs))]] = True
        gain = Mixture(obs[good], sizes).log_pdf(ranked) - Mixture(obs[~good], sizes).log_pdf(ranked)
        assert len(ranked) == EI_CANDIDATES and (np.diff(gain) <= 1e-12).all()
    else:
        assert len(ranked) == 1


@given(observations(most=80), st.integers(0, 80), st.integers(0, 2**32 - 1))
def test_a_sampler_that_forgot_asks_as_one_told_only_what_came_after(case, cut, seed):
    """``forget`` drops every trial told before it (the window of ``quick``'s TPE): told the rest, the sampler ranks
    the candidates as a fresh one with the same random state told only the rest."""
    obs, sizes = case
    space = Space("drawn", tuple(Knob(f"k{j}", tuple(range(size)), "ordinal", 0) for j, size in enumerate(sizes)))
    values = np.random.default_rng(seed).random(len(obs))
    forgetful, fresh = Parzen(space, seed), Parzen(space, seed)
    for row, value in zip(obs[:cut], values[:cut], strict=True):
        forgetful.tell(row, value)
    forgetful.forget()
    for row, value in zip(obs[cut:], values[cut:], strict=True):
        forgetful.tell(row, value)
        fresh.tell(row, value)
    assert len(forgetful) == len(fresh) == len(obs[cut:])
    assert np.array_equal(forgetful.candidates(), fresh.candidates())
