"""Strategies: budgets, the cache, no cheaply-infeasible proposals, and search quality."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from conftest import toy_cache

from tuner import service
from tuner.history import History
from tuner.objectives import Evaluations
from tuner.objectives.base import RULED_OUT
from tuner.objectives.builtin import BuiltinObjective
from tuner.objectives.cache import CacheObjective
from tuner.plan import SPACE, encode
from tuner.search import Candidate, Search, Spec, number, shown
from tuner.space import load_profile
from tuner.strategies import STRATEGIES, exhaustive
from tuner.strategies.checkpoint import climb
from tuner.strategies.exhaustive import FINALISTS


class Spy(BuiltinObjective):
    """The builtin objective, remembering every plan it was asked to score."""

    def __init__(self) -> None:
        super().__init__()
        self.scored: list[np.ndarray] = []

    def evaluate(self, idx: np.ndarray, mode: str) -> Evaluations:
        self.scored.append(np.array(idx))
        return super().evaluate(idx, mode)


def _run(tmp_path, spec, objective=None):
    objective = objective or Spy()
    search = Search(History(f"sqlite:///{tmp_path / 'h.db'}"), objective, spec)
    return STRATEGIES[spec.strategy](search), objective


@pytest.mark.parametrize("strategy", ["quick", "focused", "checkpoint"])
def test_budget_feasibility_and_cache(tmp_path, strategy, attempt1):
    spec = Spec(strategy=strategy, mode="dev", max_evals=120, seed=1, start=tuple(int(v) for v in encode(attempt1)))
    outcome, spy = _run(tmp_path, spec)
    scored = np.concatenate(spy.scored)
    assert outcome.evaluations == len(scored) <= 120
    assert spy.feasible(scored).all()                                   # nothing cheaply infeasible was scored
    assert len({row.tobytes() for row in scored}) == len(scored)        # nothing scored twice
    assert outcome.best is not None and outcome.best.value < float("inf")
    again, spy2 = _run(tmp_path, spec)                                  # same search again: resumes, nothing new
    assert again.new_evaluations == 0 and not spy2.scored


def test_a_search_that_converged_reports_again_and_searches_no_more(ctx):
    """Rerun, a converged local search used to climb again with a model fitted to everything the first run saw, and took
    another path: the main job's second run scored 1,300 more plans to find nothing (a real benchmark: minutes)."""
    first = service.local_neighborhood_search(ctx, fixture="tensor_plan_iteration2_neighborhood_best", max_evals=3000)
    assert first["stopped"] == "converged" and 0 < first["evaluations"] < 3000
    for budget in (3000, 5000):                                         # a larger budget has nothing left to find either
        again = service.local_neighborhood_search(ctx, fixture="tensor_plan_iteration2_neighborhood_best", max_evals=budget)
        assert again["stopped"] == "converged" and again["new_evaluations"] == 0
        assert again["evaluations"] == first["evaluations"] and again["top"] == first["top"]
    cut = service.local_neighborhood_search(ctx, fixture="tensor_plan_attempt1_best", max_evals=100)
    assert cut["stopped"] == "evaluation budget"
    assert service.local_neighborhood_search(ctx, fixture="tensor_plan_attempt1_best", max_evals=200)["new_evaluations"] == 100


def test_other_searches_reuse_the_cache(tmp_path, attempt1):
    start = tuple(int(v) for v in encode(attempt1))
    _run(tmp_path, Spec(strategy="checkpoint", mode="dev", max_evals=200, start=start, seed=0))
    outcome, _ = _run(tmp_path, Spec(strategy="checkpoint", mode="dev", max_evals=200, start=start, seed=9))
    assert outcome.cached > 0


def test_time_budget_stops_a_search(tmp_path):
    outcome, _ = _run(tmp_path, Spec(strategy="quick", mode="dev", max_evals=100_000, time_s=1.0, seed=2))
    assert outcome.stopped == "time budget" and outcome.evaluations < 100_000


def test_checkpoint_from_attempt1_reaches_iteration2_within_300_evaluations(ctx, iteration2):
    result = service.local_neighborhood_search(ctx, fixture="tensor_plan_attempt1_best", max_evals=300, include_final=True)
    reference = service.run_objective(ctx, "dev", "tensor_plan_iteration2_neighborhood_best")["best_cycles"]
    assert result["evaluations"] <= 300
    assert result["best"]["dev"] <= reference
    assert result["best"]["final_correct"] is True


def test_exhaustive_finds_the_true_optimum_of_a_small_profile(workspace, ctx, iteration2):
    knobs = {k: [v] for k, v in iteration2.items()} | {"block_m": [32, 48, 64, 80], "block_n": [64, 96, 128],
                                                        "num_warps": [4, 6, 8], "scratchpad_kb": [96, 128, 160]}
    (workspace / "studies" / "tiny.json").write_text(json.dumps({"description": "108 plans", "knobs": knobs}))
    ctx.progress = lambda done, total, message: said.append(message)
    said: list[str] = []
    result = service.bounded_exhaustive_search(ctx, "tiny", include_final=True)
    profile = load_profile("tiny", SPACE, workspace / "studies")
    idx = profile.plans(0, profile.size)
    objective = BuiltinObjective()
    evaluated = objective.evaluate(idx, "dev")
    values = np.where(evaluated.correct, evaluated.cycles, np.inf)
    assert (result["profile_description"], result["profile_size"], result["evaluations"]) == ("108 plans", 108, 108)
    assert result["best"]["dev"] == values.min()
    assert said[-1] == f"best {int(values.min()):,}"                # the progress says it as the summaries do: best 178,866
    assert result["best"]["final_correct"] is True and result["best"]["final"] > 0
    again = service.bounded_exhaustive_search(ctx, "tiny")
    assert again["new_evaluations"] == 0 and again["best"]["plan_hash"] == result["best"]["plan_hash"]


@pytest.mark.parametrize("dear_below", [0.0, np.inf])
def test_exhaustive_ranks_no_incorrect_plan_among_its_finalists(workspace, ctx, monkeypatch, dear_below):
    """The fast path scores values only: a plan that runs but fails the verifier is a finalist until it is checked. On
    either path it is counted as incorrect, and is never among the best."""
    monkeypatch.setattr(exhaustive, "DEAR_BELOW", dear_below)   # the fast path after the first range, or the dear one
    plan = {"q_layout": "swizzled_mn", "k_layout": "blocked", "v_layout": "blocked", "o_layout": "streamed", "block_m": 64,
            "block_n": 32, "block_k": 96, "num_warps": 8, "vector_width": 16, "accum": "pairwise", "softmax": "approx_poly",
            "schedule": "static", "dma_stages": 2, "prefetch_distance": 3, "dma_burst": 256, "split_k": 1, "swizzle": "xor",
            "epilogue": "separate", "scratchpad_kb": 64}
    softmax = list(SPACE.by_name["softmax"].choices)
    (workspace / "studies" / "softmax.json").write_text(json.dumps({"knobs": {k: [v] for k, v in plan.items()} | {"softmax": softmax}}))
    scored = BuiltinObjective().evaluate(np.stack([encode(plan | {"softmax": v}) for v in softmax]), "dev")
    assert not scored.correct[softmax.index("approx_poly")] and scored.correct.sum() == 3    # runs, but fails the verifier
    result = service.bounded_exhaustive_search(ctx, "softmax")
    assert sorted(row["plan"]["softmax"] for row in result["top"]) == sorted(set(softmax) - {"approx_poly"})
    assert all(row["correct"] for row in result["top"]) and result["failure_reasons"] == {"incorrect": 1}


def test_exhaustive_breaks_ties_by_position_in_the_profile_and_says_each_range(tmp_path, monkeypatch):
    """All 400 configurations tie: the finalists are the profile's first, however its ranges fell."""
    monkeypatch.setattr(exhaustive, "RANGE_S", 1e9)             # ranges as large as growth allows, however slow this machine
    grid = {"x": list(range(20)), "y": list(range(20))}
    cache = toy_cache(tmp_path, dict.fromkeys(itertools.product(*grid.values()), 1.0), tune_params=grid)
    replay = service.Context.create(tmp_path, objective=f"cache:{cache}")
    said: list[str] = []
    replay.progress = lambda done, total, message: said.append(message)
    result = service.bounded_exhaustive_search(replay, "all")
    assert said[:2] == ["1 plan from 0", "64 plans from 1"]              # the first range is one plan, then each grows
    first = [{"x": 0, "y": y} for y in range(FINALISTS)]
    assert result["top"] and all(row["plan"] in first for row in result["top"])


def test_exhaustive_budget_cuts_the_sweep_and_a_rerun_continues(ctx):
    first = service.bounded_exhaustive_search(ctx, "iteration3_dev_core", max_evals=300_000, include_final=False)
    assert first["evaluations"] == 300_000 and first["stopped"] == "evaluation budget"
    second = service.bounded_exhaustive_search(ctx, "iteration3_dev_core", max_evals=600_000, include_final=False)
    assert second["evaluations"] == 600_000 and second["new_evaluations"] == 300_000


@pytest.mark.parametrize("dear_below", [0.0, np.inf])
def test_a_sweep_counts_its_failures_by_their_reasons_on_either_path(tmp_path, workspace, monkeypatch, dear_below):
    """A range scored on the fast path said "infeasible or incorrect" for every failure: a cache's "not measured"
    and its error markers alike."""
    monkeypatch.setattr(exhaustive, "DEAR_BELOW", dear_below)
    tune_params = {"x": list(range(40)), "y": list(range(40))}
    records = {(x, y): (1.0 + x + y if (x + y) % 3 else "InvalidConfig") for x in range(40) for y in range(40) if x % 4}
    cache = f"cache:{toy_cache(tmp_path, records, tune_params=tune_params)}"
    replay = service.Context.create(workspace, objective=cache)
    swept = service.bounded_exhaustive_search(replay, "all")
    invalid = sum(v == "InvalidConfig" for v in records.values())
    assert swept["failure_reasons"] == {"not measured": 1600 - len(records), "InvalidConfig": invalid}
    space = tmp_path / "below30.t1.json"                # restrictions: what they rule out is counted once, by that reason
    space.write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [{"Name": k, "Values": v} for k, v in tune_params.items()],
                                                        "Conditions": [{"Expression": "x < 30"}]}}))
    (tmp_path / "restricted").mkdir()
    restricted = service.Context.create(tmp_path / "restricted", objective=cache, space=str(space))
    swept = service.bounded_exhaustive_search(restricted, "all")
    allowed = {key: value for key, value in records.items() if key[0] < 30}
    assert swept["failed"] == sum(swept["failure_reasons"].values()) and swept["failure_reasons"] == {
        RULED_OUT: 400, "not measured": 1200 - len(allowed), "InvalidConfig": sum(v == "InvalidConfig" for v in allowed.values())}


@pytest.mark.parametrize("dear_below", [0.0, np.inf])
def test_a_sweep_counts_the_plans_the_cheap_check_rules_out_on_either_path(workspace, ctx, iteration2, monkeypatch, dear_below):
    """A range went the dear way (through the history's cache) when the last one ran below 100 plans a second, as on a
    loaded machine, and then counted no plan that the objective's cheap check ruled out."""
    monkeypatch.setattr(exhaustive, "DEAR_BELOW", dear_below)
    knobs = {k: [v] for k, v in iteration2.items()} | {"split_k": [1, 2, 4], "block_n": [32, 64, 96, 128, 192]}
    (workspace / "studies" / "splits.json").write_text(json.dumps({"description": "15 plans", "knobs": knobs}))
    result = service.bounded_exhaustive_search(ctx, "splits")
    idx = load_profile("splits", SPACE, workspace / "studies").plans(0, 15)
    cannot = int((~BuiltinObjective().feasible(idx)).sum())
    assert cannot > 0 and result["failure_reasons"] == {"ruled out by the problem's cheap check": cannot} and result["failed"] == cannot


@pytest.mark.parametrize("strategy", ["quick", "checkpoint"])
def test_a_seed_fixes_the_whole_search(tmp_path, strategy, attempt1):
    start = tuple(int(v) for v in encode(attempt1))

    def sequence(name: str, seed: int) -> list[tuple]:
        spec = Spec(strategy=strategy, mode="dev", max_evals=150, seed=seed, start=start)
        history = History(f"sqlite:///{tmp_path / name}.db")
        outcome = STRATEGIES[strategy](Search(history, BuiltinObjective(), spec))
        trials = history.trials(outcome.study_name)
        return [(tuple(sorted(t.params.items())), t.value) for t in trials]

    first = sequence("a", seed=3)
    assert len(first) >= 150
    assert sequence("b", seed=3) == first                     # same seed, fresh history: the same trials in order
    assert sequence("c", seed=4) != first


def test_a_seed_fixes_the_search_across_processes(tmp_path):
    """Another process (another string-hash seed) makes the same evaluations in the same order, past TPE's window
    of 300 trials, on a space of many tied times (where ties at the window's cut once came out in set order)."""
    knobs = {f"k{i}": [0, 1, 2, 3] for i in range(6)}
    path = toy_cache(tmp_path, {combo: 1.0 + sum(v > 0 for v in combo) for combo in itertools.product(*knobs.values())},
                     "tied.json", knobs)
    script = ("import sys; from tuner.history import History; from tuner.objectives.cache import CacheObjective\n"
              "from tuner.search import Search, Spec; from tuner.strategies import STRATEGIES\n"
              "h = History(sys.argv[1])\n"
              "o = STRATEGIES['quick'](Search(h, CacheObjective(sys.argv[2], None), Spec('quick', 'time', max_evals=420, seed=0)))\n"
              "print([hash_ for hash_, _ in h.outcomes(o.study_name)])")

    def sequence(name: str, hash_seed: str) -> str:
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run([sys.executable, "-c", script, f"sqlite:///{tmp_path / name}.db", str(path)], capture_output=True,
                              text=True, env=env, timeout=300, check=True)
        return done.stdout

    first = sequence("a", "1")
    assert len(first) > 420 * 18 and sequence("b", "2") == first


def test_tpe_holds_a_bounded_window_of_trials(tmp_path, monkeypatch):
    from tuner.strategies import quick

    monkeypatch.setattr(quick, "WINDOW", 60)
    held: list[int] = []
    rebuilt_at: list[int] = []                     # trials held when the window was cut
    original = quick._Tpe._bound

    def watch(self):
        size = len(self.parzen)
        original(self)
        held.append(len(self.parzen))
        if held[-1] < size:
            rebuilt_at.append(size)
            assert len(np.unique(self.parzen._rows[:held[-1]], axis=0)) == held[-1]     # the best and the recent, each once

    monkeypatch.setattr(quick._Tpe, "_bound", watch)
    outcome, _ = _run(tmp_path, Spec(strategy="quick", mode="dev", max_evals=600, seed=5))
    assert outcome.evaluations == 600
    assert max(held) < 60 and min(held[len(held) // 2:]) <= 30           # rebuilt from a window, never the whole history
    assert len(rebuilt_at) > 1 and min(rebuilt_at) >= 60
    assert len(rebuilt_at) <= 600 // 30            # each rebuild frees half the window (rebuilt on nearly every ask before: 113)


def test_quick_spends_its_budget_where_tpe_would_propose_one_configuration_for_ever(tmp_path, monkeypatch):
    """On knobs with few values TPE's choice is nearly deterministic: once its good density is copies of the best
    configuration it proposes only that one, which costs an ask and no evaluation. The search must still spend its
    budget, and without asking TPE many times per evaluation (710 asks for these 250 evaluations before, 8,385 for 700)."""
    from tuner.strategies import quick

    knobs = {f"k{i}": [0, 1, 2] for i in range(6)}
    records = {combo: 1.0 + sum(abs(v - 1) for v in combo) for combo in itertools.product(*knobs.values())}
    path = toy_cache(tmp_path, records, "small.json", knobs)
    asks = []
    propose = quick._Tpe.propose
    monkeypatch.setattr(quick._Tpe, "propose", lambda tpe: asks.append(1) or propose(tpe))
    search = Search(History(f"sqlite:///{tmp_path / 'h.db'}"), CacheObjective(path, None),
                    Spec(strategy="quick", mode="time", max_evals=250, seed=0))
    outcome = STRATEGIES["quick"](search)
    assert outcome.evaluations == 250 and outcome.best.value == 1.0
    assert len(asks) <= 2 * 250


def test_quick_stops_proposing_once_it_has_scored_every_configuration_the_space_allows(tmp_path, monkeypatch):
    """A budget larger than a small space: once nearly every configuration is scored, random proposals land on scored
    ones, each an ask and no evaluation, and once all are, the search asked on until 20 asks per evaluation of its
    budget (pnpoly, 4,092 configurations, at 5,000 evaluations: 200,000 asks, 4.1 ms per evaluation against 1.3 at 500)."""
    from tuner.strategies import quick

    knobs = {f"k{i}": [0, 1, 2] for i in range(5)}
    records = {combo: 1.0 + sum(abs(v - 1) for v in combo) for combo in itertools.product(*knobs.values()) if combo[4] != 2}
    path = toy_cache(tmp_path, records, "small.json", knobs)                     # k4 = 2 not measured: failed evaluations
    (tmp_path / "small.t1.json").write_text(json.dumps({"ConfigurationSpace": {
        "TuningParameters": [{"Name": k, "Values": v} for k, v in knobs.items()], "Conditions": [{"Expression": "k0 + k1 <= 3"}]}}))
    allowed = sum(a + b <= 3 for a, b, *_ in itertools.product(*knobs.values()))
    asks = []
    propose = quick._Tpe.propose
    monkeypatch.setattr(quick._Tpe, "propose", lambda tpe: asks.append(1) or propose(tpe))
    search = Search(History(f"sqlite:///{tmp_path / 'h.db'}"), CacheObjective(path, tmp_path / "small.t1.json"),
                    Spec(strategy="quick", mode="time", max_evals=2000, seed=0))
    outcome = STRATEGIES["quick"](search)
    assert (outcome.evaluations, outcome.stopped, outcome.best.value) == (allowed, "converged", 1.0)
    assert len(asks) <= 2000                                                    # 80,000 before


def test_quick_leaves_the_last_configuration_to_the_worker_scoring_it(tmp_path):
    """Where all that is left of a small space is being scored by another worker, drawing among what is left drew
    that one again and again, a claim in the history each time, until the other's result came (for a program, its
    run: 606 claims of one of two workers sharing 64 configurations, against 58 now)."""
    from tuner.claims import Worker
    from tuner.strategies import quick

    knobs = {"bx": [32, 64], "tile": [1, 2, 3]}
    path = toy_cache(tmp_path, {combo: 1.0 + combo[1] for combo in itertools.product(*knobs.values())}, "six.json", knobs)
    search = Search(History(f"sqlite:///{tmp_path / 'h.db'}"), CacheObjective(path, None),
                    Spec(strategy="quick", mode="time", max_evals=100, seed=0))
    every = np.array(list(itertools.product(range(2), range(3))), dtype=np.int16)
    other = Worker(search.history, search.name, {"strategy": "quick", "objective": search.objective.name, "mode": "time",
                                                 "target": "space"})
    last = every[-1]
    assert other.claim([(f"plan:{search.space.hash_idx(last)}", 1, last.tolist())], budget=100).granted
    search.evaluate(every[:-1])
    tpe = quick._Tpe(search)
    tpe.tell_seen()
    proposed = [tpe.propose() for _ in range(200)]
    assert False in proposed and proposed.index(False) <= quick.gamma(quick.WINDOW) + quick.CROWDED + 2
    other.leave()


def test_quick_spends_its_last_share_exploring_when_nothing_it_scored_has_a_time(tmp_path):
    knobs = {f"k{i}": [0, 1, 2, 3] for i in range(4)}
    path = toy_cache(tmp_path, {(3, 3, 3, 3): 1.0}, "sparse.json", knobs)          # one of 256 measured: the runs below miss it
    search = Search(History(f"sqlite:///{tmp_path / 'h.db'}"), CacheObjective(path, None),
                    Spec(strategy="quick", mode="time", max_evals=40, seed=0))
    outcome = STRATEGIES["quick"](search)
    assert outcome.best is None and outcome.evaluations == 40


@pytest.mark.parametrize("patience", [1, 2])
def test_a_polish_patience_counts_only_neighbours_not_scored_before(tmp_path, patience):
    """Neighbours the search already scored cost nothing and tell nothing, so they do not use up the patience:
    from an optimum whose neighbours are scored but for two, a polish scores exactly ``patience`` new ones."""
    knobs = {"k": list(range(10))}
    path = toy_cache(tmp_path, {(v,): 1.0 + v for v in range(10)}, "line.json", knobs)
    search = Search(History(f"sqlite:///{tmp_path / 'h.db'}"), CacheObjective(path, None),
                    Spec(strategy="quick", mode="time", max_evals=100, seed=0))
    search.evaluate(np.arange(8, dtype=np.int16)[:, None])                 # the optimum and its nearest neighbours
    assert climb(search, np.zeros(1, dtype=np.int16), phases=(), patience=patience) == "converged"
    assert search.evaluations == 8 + patience


def _toy_search(tmp_path, knobs: dict[str, list], time, conditions: tuple[str, ...] = (), **spec: Any) -> Search:
    """A search replaying a toy cache over ``knobs`` (each configuration's ``time(values)``: ms, or an error marker),
    with a T1 space file's ``conditions`` where given; ``spec``: what differs from a ``quick`` of 100 evaluations, seed 0."""
    path = toy_cache(tmp_path, {combo: time(combo) for combo in itertools.product(*knobs.values())}, "toy.json", knobs)
    space = tmp_path / "toy.t1.json" if conditions else None
    if space:
        space.write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [{"Name": k, "Values": v} for k, v in knobs.items()],
                                                            "Conditions": [{"Expression": c} for c in conditions]}}))
    return Search(History(f"sqlite:///{tmp_path / 'h.db'}"), CacheObjective(path, space),
                  Spec(**{"strategy": "quick", "mode": "time", "max_evals": 100, "seed": 0, **spec}))


def _proposals(search: Search) -> list[np.ndarray]:
    """The first configuration of each of ``search``'s calls to score, from now on."""
    proposed: list[np.ndarray] = []
    evaluate = search.evaluate
    search.evaluate = lambda idx, *args: proposed.append(idx[0].copy()) or evaluate(idx, *args)
    return proposed


def test_quick_starts_from_a_design_that_spreads_each_knob_evenly_over_what_the_restrictions_allow(tmp_path):
    """The first trials are a space-filling design: each knob's values as evenly spread as the rows allow. Rows the
    restrictions rule out are redrawn, then drawn among what they allow, however few that is (here 4 of 1,600)."""
    from tuner.strategies import quick

    knobs = {"a": list(range(40)), "b": list(range(40)), "c": [0, 1, 2], "d": [7]}
    search = _toy_search(tmp_path, knobs, lambda values: 1.0 + sum(values), conditions=("a < 2 and b < 2",))
    for count, seed in itertools.product([3, 10, 25], range(3)):
        rows = quick.design(search.space, count, np.random.default_rng(seed))
        assert rows.shape == (count, 4)
        for column, size in zip(rows.T, search.space.sizes, strict=True):
            counts = np.bincount(column, minlength=size)
            assert counts.max() - counts.min() <= 1 if size <= count else counts.max() == 1
    rows = quick.feasible_design(search, np.random.default_rng(0))
    assert len(rows) == quick.STARTUP_TRIALS and search.objective.feasible(rows).all()


def test_tpe_is_told_each_evaluation_once_in_the_order_the_search_scored_them(tmp_path):
    """What the search scored reaches TPE in its order (the model breaks ties by it); a proposal is told once when it
    is proposed, new or not, and never again when the search's other evaluations are told."""
    from tuner.strategies import quick

    search = _toy_search(tmp_path, {f"k{i}": [0, 1, 2] for i in range(4)}, lambda values: 1.0 + sum(values))
    search.evaluate(quick.design(search.space, 12, np.random.default_rng(0)))
    tpe = quick._Tpe(search)
    tpe.tell_seen()
    held = tpe.parzen._rows[:len(tpe.parzen)]
    assert np.array_equal(held, [search.cache[h].idx for h in search.seen])
    for _ in range(30):
        assert tpe.propose()
        tpe.tell_seen()
    assert len(tpe.parzen) == 12 + 30 and search.evaluations < 12 + 30          # some proposals were scored before


def test_after_a_new_evaluation_tpe_proposes_its_own_choice_and_after_a_repeat_its_best_candidate_not_scored(tmp_path):
    """A proposal follows TPE (a configuration scored before is proposed again: it weighs once more) until one is not
    new; the next is then the best of TPE's candidates that the search has not scored."""
    import copy

    from tuner.strategies import quick

    search = _toy_search(tmp_path, {f"k{i}": [0, 1, 2] for i in range(4)}, lambda values: 1.0 + sum(abs(v - 1) for v in values))
    search.evaluate(quick.design(search.space, 12, np.random.default_rng(0)))
    tpe = quick._Tpe(search)
    tpe.tell_seen()
    proposed = _proposals(search)
    followed = {"tpe, new": 0, "tpe, scored before": 0, "best not scored": 0}
    for _ in range(40):
        twin, stalled, scored = copy.deepcopy(tpe.parzen), tpe.stalled, set(search.seen)
        tpe.propose()
        tpe.tell_seen()
        repeat = search.space.hash_idx(proposed[-1]) in scored
        if stalled == 0:
            assert np.array_equal(proposed[-1], twin.ask())
            followed["tpe, scored before" if repeat else "tpe, new"] += 1
        elif stalled < quick.gamma(quick.WINDOW) and (fresh := [r for r in twin.candidates() if search.space.hash_idx(r) not in scored]):
            assert np.array_equal(proposed[-1], fresh[0]) and not repeat
            followed["best not scored"] += 1
    assert min(followed.values()) > 0, followed


def test_a_proposal_at_random_is_drawn_among_what_the_restrictions_allow(tmp_path):
    """Once TPE's choices are all scored, proposals are at random: among the configurations the restrictions allow
    (12 of 4,800 here), not over the whole space, where nearly every draw would be ruled out and cost an ask."""
    from tuner.strategies import quick

    knobs = {"a": list(range(40)), "b": list(range(40)), "c": [0, 1, 2]}
    search = _toy_search(tmp_path, knobs, lambda values: 1.0 + sum(values), conditions=("a < 2 and b < 2",))
    proposed = _proposals(search)
    tpe = quick._Tpe(search)
    for _ in range(10):
        tpe.stalled = quick.gamma(quick.WINDOW)
        assert tpe.propose()
    assert search.space.allowed(np.array(proposed)).all()


def test_polishes_start_from_the_best_configurations_not_polished_that_lie_apart(tmp_path):
    """Up to three starts, best first, each differing from those chosen before it in two knobs at least (a quarter of
    six knobs, rounded down, is one): a neighbour of the best is the same basin. One polished before is not chosen."""
    from tuner.strategies import quick

    search = _toy_search(tmp_path, {f"k{i}": [0, 1, 2, 3] for i in range(6)}, lambda values: 1.0 + sum(values))
    rows = np.array([[0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [0, 0, 3, 3, 0, 0], [3, 3, 3, 3, 3, 3],
                     [3, 3, 3, 3, 3, 2]], dtype=np.int16)
    search.evaluate(rows)
    starts = [row.tolist() for row in quick._starts(search, set())]
    assert starts == [rows[0].tolist(), rows[2].tolist(), rows[3].tolist()]
    starts = [row.tolist() for row in quick._starts(search, {search.space.hash_idx(rows[0])})]
    assert starts == [rows[1].tolist(), rows[3].tolist(), rows[5].tolist()]


def test_steps_take_each_knobs_best_predicted_move_before_any_knobs_second():
    """The step neighbourhood goes in turns across the knobs (or pairs) its moves change, each group best predicted
    first: the second move of a knob whose moves all look better waits for every other knob's first."""
    from tuner.strategies.checkpoint import _round_robin

    center = np.zeros(3, dtype=np.int16)
    moves = np.array([[1, 0, 0], [2, 0, 0], [0, 1, 0], [0, 2, 0], [0, 0, 1], [1, 1, 0]], dtype=np.int16)
    predicted = np.array([0.1, 0.2, 0.9, 0.3, 0.5, 0.0])
    assert _round_robin(center, moves, predicted).tolist() == [[1, 1, 0], [1, 0, 0], [0, 2, 0], [0, 0, 1], [2, 0, 0], [0, 1, 0]]
    assert len(_round_robin(center, moves[:0], predicted[:0])) == 0


def test_the_step_neighbourhood_tries_every_knob_before_any_knobs_second_move(tmp_path):
    """Where the evaluations show one knob to matter most, its moves do not take the first steps one after another."""
    from tuner.strategies.checkpoint import step_neighbours

    search = _toy_search(tmp_path, {f"k{i}": list(range(6)) for i in range(3)}, lambda v: 1.0 + 10 * v[0] + v[1] + v[2],
                         strategy="checkpoint")
    search.evaluate(search.space.uniform(60, np.random.default_rng(1)))
    center = np.array([3, 3, 3], dtype=np.int16)
    moves = step_neighbours(search, center, np.random.default_rng(0))
    changed = [tuple(np.flatnonzero(row != center)) for row in moves]
    groups = list(dict.fromkeys(changed))
    assert len(groups) > 3 and len(set(changed[:len(groups)])) == len(groups)


def test_the_moves_the_evaluations_say_will_likely_fail_come_last(tmp_path):
    """k0 = 4 and 5 would be the best moves from k0 = 3, but every run there failed: they are tried after the others."""
    from tuner.strategies.checkpoint import step_neighbours

    search = _toy_search(tmp_path, {f"k{i}": list(range(6)) for i in range(3)},
                         lambda v: "RuntimeFailedConfig" if v[0] >= 4 else 1.0 + 10 * (5 - v[0]) + v[1] + v[2], strategy="checkpoint")
    search.evaluate(search.space.uniform(60, np.random.default_rng(1)))
    center = np.array([3, 3, 3], dtype=np.int16)
    fails = step_neighbours(search, center, np.random.default_rng(0))[:, 0] >= 4
    assert fails.any() and not fails[:np.argmax(fails)].any() and fails[np.argmax(fails):].all()


def test_each_basin_is_polished_once(tmp_path, monkeypatch):
    from tuner.strategies import quick

    polished = []
    climb = quick.climb

    def watched(search, start, phases, patience=None):
        if patience is not None:                    # a polish (the last climb, from the best, has no patience)
            polished.append(search.space.hash_idx(start))
        return climb(search, start, phases, patience)

    monkeypatch.setattr(quick, "climb", watched)
    search = _toy_search(tmp_path, {f"k{i}": list(range(6)) for i in range(4)}, lambda values: 1.0 + sum(abs(v - 2) for v in values),
                         max_evals=300)
    outcome = STRATEGIES["quick"](search)
    assert outcome.evaluations == 300 and len(polished) > 3 and len(set(polished)) == len(polished)


@pytest.mark.parametrize(("time", "best"), [(lambda v: 1.0 + abs(v[0] - 9) + v[1], 1.0), (lambda v: 2.0, 2.0)])
def test_focused_recentres_on_each_improvement_until_a_sweep_improves_nothing_and_a_tie_is_none(tmp_path, time, best):
    """From k0 = 0 the optimum (k0 = 9) is nine sweeps of +-1 away; on a plateau the first sweep ends it (re-centring on
    equal values would go round scored configurations for ever: bounded here by a time budget the search should not need)."""
    search = _toy_search(tmp_path, {"k0": list(range(10)), "k1": [0, 1]}, time, strategy="focused", start=(0, 0), time_s=20.0)
    outcome = STRATEGIES["focused"](search)
    assert (outcome.stopped, outcome.best.value) == ("converged", best)


def test_focused_sweeps_around_the_best_the_history_holds_rather_than_its_start(tmp_path):
    search = _toy_search(tmp_path, {"k0": list(range(10)), "k1": [0, 1]}, lambda v: 1.0 + abs(v[0] - 9) + v[1], strategy="focused",
                         start=(0, 0))
    search.evaluate(np.array([[8, 1]], dtype=np.int16))
    outcome = STRATEGIES["focused"](search)
    assert outcome.best.value == 1.0 and search.space.hash_idx(np.zeros(2, dtype=np.int16)) not in search.seen


def test_a_search_holding_back_stops_early_and_claims_no_more(tmp_path):
    """Within ``holding_back(k)`` the budget ends k evaluations early, even mid-batch; after it, the rest is there."""
    knobs = {"a": list(range(8)), "b": list(range(8))}
    path = toy_cache(tmp_path, {combo: 1.0 + sum(combo) for combo in itertools.product(*knobs.values())}, "grid.json", knobs)
    search = Search(History(f"sqlite:///{tmp_path / 'h.db'}"), CacheObjective(path, None),
                    Spec(strategy="quick", mode="time", max_evals=50, seed=0))
    rows = np.array(list(itertools.product(range(8), range(8))), dtype=np.int16)
    with search.holding_back(20):
        values = search.evaluate(rows[:40])
        assert search.evaluations == 30 and search.stop_reason() == "evaluation budget"
        assert np.isfinite(values[:30]).all() and np.isinf(values[30:]).all()       # claimed in the batch's order
    assert search.remaining == 20 and search.stop_reason() is None
    search.evaluate(rows[30:])
    assert search.evaluations == 50


def test_quick_keeps_its_last_share_for_a_climb_from_the_best(tmp_path, monkeypatch):
    """The last ``ENDGAME`` share of the budget is a climb without patience from the best configuration so far,
    so a run does not end with its best half-polished; the budget is spent exactly."""
    from tuner.strategies import quick

    calls = []
    original = quick.climb

    def watch(search, start, phases=(), patience=None):
        calls.append((search.evaluations, search.best.value, search.seen.get(search.space.hash_idx(start)), patience))
        return original(search, start, phases=phases, patience=patience)

    monkeypatch.setattr(quick, "climb", watch)
    outcome, _ = _run(tmp_path, Spec(strategy="quick", mode="dev", max_evals=300, seed=2))
    endgame = [i for i, call in enumerate(calls) if call[3] is None]
    assert len(endgame) == 1 and len(calls) > 1
    at, best, start, _ = calls[endgame[0]]
    assert at == 300 - int(300 * quick.ENDGAME) and start == best                 # from the best, once the rest is spent
    assert all(call[0] < at for call in calls[:endgame[0]])
    assert outcome.evaluations == 300 and outcome.best.value <= best


def test_a_finalist_shows_its_held_out_value_only_where_it_was_checked_and_a_failure_there_as_none(tmp_path, iteration2):
    """Unchecked: no ``final`` keys (the workers rank it after the checked ones); checked and infeasible in final
    (iteration-2 with block_m=128 runs on dev only): ``final`` null and ``final_correct`` false. Cycles are integers."""
    modes, unchecked = ("dev", "final"), Candidate(encode(iteration2), 262009.0, True)
    assert unchecked.as_dict(SPACE, modes) == {"plan_hash": SPACE.hash(iteration2), "plan": iteration2, "dev": 262009, "correct": True}
    spec = Spec(strategy="quick", mode="dev", max_evals=2, include_final=True)
    search = Search(History(f"sqlite:///{tmp_path / 'h.db'}"), BuiltinObjective(), spec)
    checked = [Candidate(encode(iteration2), 262009.0, True), Candidate(encode(dict(iteration2, block_m=128)), 288101.0, True)]
    search.check_held_out(checked)
    search.close()
    shown_final = [{k: c.as_dict(SPACE, modes)[k] for k in ("final", "final_correct")} for c in checked]
    assert shown_final == [{"final": 1496766, "final_correct": True}, {"final": None, "final_correct": False}]
    assert type(number(262009.0)) is int and [shown(v) for v in (178866.0, 68.11664, None)] == ["178,866", "68.1166", "-"]
