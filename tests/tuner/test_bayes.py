"""``bayes``: Gaussian-process Bayesian optimisation on measured caches (toy caches built here)."""

from __future__ import annotations

import itertools
import json
import tracemalloc

import numpy as np
import pytest
from conftest import toy_cache

from tuner.history import History
from tuner.objectives.cache import CacheObjective
from tuner.search import Search, Spec
from tuner.strategies import bayes

PARAMS = {"bx": [16, 32, 64, 128, 256, 512], "by": [1, 2, 4, 8, 16], "tile": [1, 2, 3, 4], "mode": ["a", "b", "c"]}


def _time(bx: int, by: int, tile: int, mode: str) -> float | str:
    """A smooth basin in log-space (best at bx=128, by=4, tile=3, mode b); configurations past a size limit fail."""
    if bx * by > 1024:
        return "InvalidConfig"
    return 1.0 + (np.log2(bx) - 7) ** 2 + 0.5 * (np.log2(by) - 2) ** 2 + 0.3 * (tile - 3) ** 2 + {"a": 0.8, "b": 0.0, "c": 0.4}[mode]


@pytest.fixture()
def cache(tmp_path):
    records = {combo: _time(*combo) for combo in itertools.product(*PARAMS.values())}
    return CacheObjective(toy_cache(tmp_path, records, tune_params=PARAMS))


def _search(tmp_path, objective, seed: int, budget: int, name: str = "h") -> Search:
    return Search(History(f"sqlite:///{tmp_path / name}.db"), objective, Spec(strategy="bayes", mode="time", max_evals=budget, seed=seed))


def test_bayes_finds_the_optimum_of_a_smooth_basin_and_learns_where_configurations_fail(tmp_path, cache):
    """Of 360 configurations, 72 fail (bx * by > 1024) and 1 is best: every seed finds it within 40 evaluations,
    and after the design fewer of its proposals fail than random's 20% would (6 of 30): a failure counts as the
    worst value seen and the failure process reads the limit from the failures' neighbours."""
    for seed in range(4):
        search = _search(tmp_path, cache, seed, 40, name=f"s{seed}")
        outcome = bayes.run(search)
        values = np.fromiter(search.seen.values(), float)
        assert outcome.best is not None and outcome.best.value == cache.optimum == 1.0
        assert np.isinf(values[10:]).sum() <= 4


def test_a_seed_fixes_the_search_and_a_rerun_resumes(tmp_path, cache):
    first = _search(tmp_path, cache, 7, 30, name="a")
    bayes.run(first)
    again = _search(tmp_path, cache, 7, 30, name="b")
    bayes.run(again)
    assert list(again.seen.items()) == list(first.seen.items())             # same seed: the same evaluations in order
    resumed = bayes.run(_search(tmp_path, cache, 7, 30, name="a"))
    assert resumed.new_evaluations == 0
    other = _search(tmp_path, cache, 8, 30, name="c")
    bayes.run(other)
    assert list(other.seen) != list(first.seen)


def test_the_processes_hold_at_most_the_window(tmp_path, cache, monkeypatch):
    """Past ``WINDOW`` evaluations each ask fits the best and the most recent halves only: its cost is bounded."""
    sizes = []
    original = bayes.Process.__init__

    def watch(self, x, y, scale, noise):
        sizes.append(len(x))
        original(self, x, y, scale, noise)

    monkeypatch.setattr(bayes, "WINDOW", 24)
    monkeypatch.setattr(bayes.Process, "__init__", watch)
    search = _search(tmp_path, cache, 1, 60)
    outcome = bayes.run(search)
    assert outcome.evaluations == 60 and max(sizes) == 24
    assert outcome.best is not None and outcome.best.value == 1.0           # the window keeps the best


def test_the_window_keeps_the_best_half_and_the_most_recent_half(monkeypatch):
    monkeypatch.setattr(bayes, "WINDOW", 4)
    values = np.array([5.0, 1.0, np.inf, 2.0, 9.0, 8.0, 7.0])
    assert bayes._window(values).tolist() == [1, 3, 5, 6]
    assert bayes._window(values[:4]).tolist() == [0, 1, 2, 3]


def test_candidates_are_new_feasible_not_left_out_and_each_once(tmp_path, cache):
    search = _search(tmp_path, cache, 0, 12)
    bayes.run(search)
    idx, values = search.evaluated()
    everything = bayes._candidates(search, idx, values, idx[:0], np.random.default_rng(0))
    left_out = everything[:5]                                   # as if other workers were scoring them
    pool = bayes._candidates(search, idx, values, left_out, np.random.default_rng(0))
    assert len(everything) == 360 - len(idx) and len(pool) == 360 - len(idx) - 5
    assert len({row.tobytes() for row in pool}) == len(pool)
    assert not {row.tobytes() for row in pool} & {row.tobytes() for row in np.concatenate([idx, left_out]).astype(np.int16)}


def test_a_declared_restriction_is_never_scored(tmp_path):
    """With the space file's condition the 72 configurations over the size limit are ruled out up front: none is
    scored, and the best is still found within 40 evaluations."""
    records = {combo: _time(*combo) for combo in itertools.product(*PARAMS.values())}
    path = toy_cache(tmp_path, records, tune_params=PARAMS)
    space = {"ConfigurationSpace": {"TuningParameters": [{"Name": k, "Values": v} for k, v in PARAMS.items()],
                                    "Conditions": [{"Expression": "bx * by <= 1024"}]}}
    (tmp_path / "toy.t1.json").write_text(json.dumps(space))
    search = _search(tmp_path, CacheObjective(path, tmp_path / "toy.t1.json"), 0, 40)
    outcome = bayes.run(search)
    values = np.fromiter(search.seen.values(), float)
    assert outcome.evaluations == len(values) == 40 and np.isfinite(values).all()
    assert outcome.best is not None and outcome.best.value == 1.0


def test_a_proposal_another_worker_is_scoring_is_left_out_until_its_value_arrives(tmp_path, cache, monkeypatch):
    """Worker A holds (claimed, not scored) the 60 best configurations. Worker B's asks reach them and learn that A is
    scoring them: B proposes each at most once and goes on with others, instead of asking for the same one again
    until A's value arrives (on a space it scores whole, B's choice is deterministic)."""
    history = History(f"sqlite:///{tmp_path / 'shared.db'}")
    spec = Spec(strategy="bayes", mode="time", max_evals=100, seed=0)
    a = Search(history, cache, spec)
    combos = list(itertools.product(*PARAMS.values()))
    best = sorted((v, c) for c, v in ((c, _time(*c)) for c in combos) if not isinstance(v, str))[:60]
    held = {cache.space.hash_idx(cache.space.encode(dict(zip(PARAMS, c, strict=True)))) for _, c in best}
    a.worker.claim([(f"plan:{h}", 0, None) for h in held], spec.max_evals)
    proposed: list[str] = []
    real = bayes.propose

    def recording(search: Search, rng: np.random.Generator, pending: np.ndarray | None = None) -> np.ndarray | None:
        pick = real(search, rng, pending)
        proposed.append(search.space.hash_idx(pick))
        return pick

    monkeypatch.setattr(bayes, "propose", recording)
    b = Search(history, cache, spec, should_stop=lambda: len(proposed) >= 30)
    assert b.seed != a.seed
    assert bayes.run(b).stopped == "cancelled"
    assert held & set(proposed)                                 # B's asks reached what A holds
    assert len(set(proposed)) == len(proposed) == 30            # and none twice
    assert not held & set(b.seen)
    a.close()


def test_a_wide_nominal_knob_is_one_input_at_the_distance_its_one_hot_columns_would_give(tmp_path):
    """Two values of a nominal knob lie one unit apart. Past ``WIDE`` values a knob is one input, its value, compared:
    one-hot columns, one per value, made an ask on three knobs of 3,000 values 15 s, spent multiplying them. The
    distances are the same either way, as a loop over the knobs computes them."""
    params = {"bx": [16, 32, 64, 128], "mode": ["a", "b", "c"], "variant": [f"k{i}" for i in range(bayes.WIDE + 24)]}
    space = CacheObjective(toy_cache(tmp_path, {(16, "a", "k0"): 1.0}, tune_params=params)).space
    rng = np.random.default_rng(3)
    a, b = space.uniform(40, rng), space.uniform(30, rng)
    x_a, spans, by_value = bayes.features(space, a)
    x_b = bayes.features(space, b)[0]
    assert [s.stop - s.start for s in spans] == [1, 3, 1] and by_value.tolist() == [False, False, False, False, True]
    scale = np.array([0.3, 1.7, 1.7, 1.7, 0.8])                          # a knob's columns share its length scale
    expected = ((a[:, 0, None] - b[None, :, 0]) / 3 / 0.3) ** 2
    expected += (a[:, 1, None] != b[None, :, 1]) / 1.7 ** 2 + (a[:, 2, None] != b[None, :, 2]) / 0.8 ** 2
    assert np.allclose(bayes.squared(x_a, x_b, scale, by_value), expected)
    apart = [bayes._apart(x_a[:, span], bool(by_value[span.start])) for span in spans]      # what the fit sums, per knob
    assert np.allclose(sum(part / s ** 2 for part, s in zip(apart, [0.3, 1.7, 0.8], strict=True)), bayes.squared(x_a, x_a, scale, by_value))


def test_the_process_is_the_textbook_gaussian_process():
    """Matérn 5/2; the fit is the negative log marginal likelihood (up to its constant); the posterior mean and standard
    deviation (noise included) are those of the closed forms, solved here directly."""
    rng = np.random.default_rng(0)
    x, at, y = rng.random((12, 2)), rng.random((5, 2)), rng.standard_normal(12)
    r = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
    gram = (1 + np.sqrt(5) * r + 5 * r * r / 3) * np.exp(-np.sqrt(5) * r)
    assert np.allclose(bayes.matern(r * r), gram)
    process = bayes.Process(gram, y, np.ones(2), 0.01)
    k = gram + 0.01 * np.eye(12)
    assert np.isclose(process.fit, 0.5 * y @ np.linalg.solve(k, y) + 0.5 * np.linalg.slogdet(k)[1])
    cross = bayes.matern(((at[:, None] - x[None]) ** 2).sum(-1))
    mean, sd = process.predict(cross)
    assert np.allclose(mean, cross @ np.linalg.solve(k, y))
    assert np.allclose(sd, np.sqrt(1 + 0.01 - np.einsum("ij,ji->i", cross, np.linalg.solve(k, cross.T))))


def test_an_ask_scores_the_whole_of_a_small_space_and_around_the_best_of_a_large_one(tmp_path):
    """Up to ``CANDIDATES`` configurations the candidates are every one not scored (15,625 here: random draws would
    miss a quarter); past it, draws and every single move of the best three and pair move of the best (32,768)."""
    from tuner.strategies.neighbourhood import pairs, row_keys, singles

    for values, knobs in ((5, 6), (8, 5)):
        params = {f"k{i}": list(range(values)) for i in range(knobs)}
        records = {combo: 1.0 + sum(combo) for combo in itertools.product(*params.values()) if sum(combo) % 7}
        search = _search(tmp_path, CacheObjective(toy_cache(tmp_path, records, f"{values}.json", params)), 0, 100, name=f"{values}")
        search.evaluate(search.space.uniform(30, np.random.default_rng(1)))
        idx, scores = search.evaluated()
        pool = {row.tobytes() for row in bayes._candidates(search, idx, scores, idx[:0], np.random.default_rng(0))}
        scored = set(row_keys(idx.astype(np.int16)).tolist())
        if search.space.size <= bayes.CANDIDATES:
            assert len(pool) == search.space.size - len(scored)
            continue
        best = idx[np.argsort(scores, kind="stable")[:3]]
        around = np.concatenate([*(singles(search.space, b) for b in best), pairs(search.space, best[0])]).astype(np.int16)
        assert {row.tobytes() for row in around} - scored <= pool


def test_an_ask_on_nominal_knobs_of_thousands_of_values_holds_its_candidates_a_bounded_batch_at_a_time(tmp_path):
    """A nominal knob was a block of one-hot columns, one per value: three knobs of 3,000 values made each of the
    ask's 47,000 candidates 9,000 inputs wide, and one ask took 9.9 GB (a search of 14 evaluations on such a space,
    10 GB and 46 s). The candidates are predicted a bounded batch at a time, and each knob's single moves from the
    best are its values nearest the best's."""
    params = {f"n{i}": [f"v{j}" for j in range(3000)] for i in range(3)} | {"x": list(range(10))}
    rng = np.random.default_rng(0)
    configs = (rng.integers(0, 3000, (200, 4)) % [3000, 3000, 3000, 10]).tolist()
    records = {(f"v{a}", f"v{b}", f"v{c}", x): float(1 + a % 7 + b % 5 + x) for a, b, c, x in configs}
    objective = CacheObjective(toy_cache(tmp_path, records, tune_params=params))
    search = _search(tmp_path, objective, 0, 100)
    measured = objective.space.encode_many([dict(zip(params, config, strict=True)) for config in list(records)[:40]])
    search.evaluate(np.concatenate([measured, objective.space.uniform(20, rng)]))      # 40 times, 20 not measured
    tracemalloc.start()
    try:
        pick = bayes.propose(search, np.random.default_rng(1))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 512 * 2**20 and pick is not None and search.space.hash_idx(pick) not in search.seen
