"""Tuner figures, measured side by side in one run (2-core machine; numbers vary by machine).

    python perf/tuner_speed.py [--seeds 10] [--budget 500]

1. exhaustive ``iteration3_dev_core`` with include_final from a cold history (seconds, plans/s)
   versus Optuna's GridSampler on the same grid (per-trial cost measured, extrapolated).
2. ms per trial of ``quick`` including durable history (averaged over the quality runs), versus
   Optuna's default RDB storage on SQLite (study.optimize with TPE on the same objective).
3. search quality: best-so-far of ``quick`` (with the space file's ``Coupled`` hint, and without it)
   over seeds beside Optuna's default TPE (every knob categorical) and RandomSampler at the same
   budget; the target is the best plan of both profiles.
4. evaluations ``checkpoint`` needs from attempt-1 to match iteration-2 on dev, with and without the hint.
5. growth of quick's cost: ms/trial at 500 and at 5,000 evaluations (durable history), and the ratio, on the tensor
   plan, on the RTX 2080 Ti cache of ``perf/caches`` and on the shared pnpoly (4,092 configurations) and GEMM caches.
6. ms per TPE ask with a full window of trials: Optuna's default TPESampler (multivariate) over categorical
   knobs, the algorithm ``tuner.strategies.parzen.Parzen`` implements, beside it, told the same trials.
7. ms per ``bayes`` ask with 100, 200 and 1,000 random feasible plans scored, and the ratio of the last two: its
   processes hold at most ``WINDOW`` (200) evaluations, so the cost stops growing there; then with 200 held on a
   space of three nominal knobs of 3,000 values (and one of 10): a nominal knob is one input, not 3,000 columns.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import optuna
from arguments import at_least_one
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from tuner.history import History
from tuner.objectives import Objective
from tuner.objectives.builtin import BuiltinObjective
from tuner.objectives.cache import CacheObjective
from tuner.plan import KNOBS, PROFILE_DIR, SPACE, encode
from tuner.search import Search, Spec
from tuner.space import load_profile
from tuner.strategies import STRATEGIES, bayes
from tuner.strategies.parzen import Parzen
from tuner.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = (50, 100, 200, 300, 400, 500)
SHARED = ROOT.parent / "shared" / "data" / "gpu-caches"        # the shared caches beside this checkout
PNPOLY, GEMM = SHARED / "pnpoly-RTX_3090.json.gz", SHARED / "gemm-RTX_3090.json.gz"
optuna.logging.set_verbosity(optuna.logging.WARNING)


def _history() -> History:
    return History(f"sqlite:///{tempfile.mkdtemp(prefix='tuner-perf-')}/history.db")


def _fixture(name: str) -> np.ndarray:
    return encode(Workspace.at(ROOT).resolve_plan(name)[0])


def exhaustive() -> float:
    objective = BuiltinObjective()
    spec = Spec(strategy="exhaustive", mode="dev", max_evals=1_814_400, target="profile:iteration3_dev_core",
                profile=load_profile("iteration3_dev_core", SPACE, PROFILE_DIR), include_final=True)
    start = time.perf_counter()
    outcome = STRATEGIES["exhaustive"](Search(_history(), objective, spec))
    ours = time.perf_counter() - start
    grid = {k.name: list(range(len(c))) for k, c in zip(KNOBS, spec.profile.choices, strict=True)}
    study = optuna.create_study(sampler=optuna.samplers.GridSampler(grid, seed=0))
    start = time.perf_counter()
    choices = spec.profile.choices

    def grid_objective(trial: optuna.Trial) -> float:
        idx = [choices[j][trial.suggest_int(k.name, 0, len(choices[j]) - 1)] for j, k in enumerate(KNOBS)]
        return float(objective.cycles(np.array([idx], dtype=np.int16), "dev")[0])

    study.optimize(grid_objective, n_trials=3)
    per_trial = (time.perf_counter() - start) / 3
    best = outcome.best
    print(f"1. exhaustive iteration3_dev_core + include_final, cold history: {ours:.2f} s "
          f"({1_814_400 / ours:,.0f} plans/s); optimum dev {int(best.value)} final {int(best.held_out)}")
    days = per_trial * 1_814_400 / 86400
    print(f"   GridSampler: {per_trial:.2f} s/trial -> {days:.1f} days for the grid; ratio {per_trial * 1_814_400 / ours:,.0f}x")
    return best.value


def optuna_rdb_cost() -> float:
    """ms per trial of Optuna's TPE with its default RDB storage on SQLite, on the same objective."""
    objective = BuiltinObjective()
    storage = optuna.storages.RDBStorage(f"sqlite:///{tempfile.mkdtemp()}/optuna.db")
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.TPESampler(seed=0))
    n = 40

    def objective_fn(trial: optuna.Trial) -> float:
        idx = np.array([[trial.suggest_int(k.name, 0, k.size - 1) for k in KNOBS]], dtype=np.int16)
        return float(np.nan_to_num(objective.cycles(idx, "dev")[0], posinf=1e12))

    start = time.perf_counter()
    study.optimize(objective_fn, n_trials=n)
    return (time.perf_counter() - start) / n * 1e3


def _marks(budget: int) -> list[int]:
    """Where the best-so-far is shown: the ``CHECKPOINTS`` below ``budget``, then the budget itself (its end)."""
    return [c for c in CHECKPOINTS if c < budget] + [budget]


def _curve(values: list[float], budget: int) -> list[float]:
    best = np.minimum.accumulate(np.array(values + [np.inf] * max(0, budget - len(values)))[:budget])
    return [float(best[c - 1]) for c in _marks(budget)]


def _baseline(sampler: optuna.samplers.BaseSampler, budget: int, categorical: bool) -> list[float]:
    objective = BuiltinObjective()
    study = optuna.create_study(sampler=sampler)
    values: list[float] = []
    for _ in range(budget):
        trial = study.ask()
        idx = np.array([[k.choices.index(trial.suggest_categorical(k.name, list(k.choices))) if categorical
                         else trial.suggest_int(k.name, 0, k.size - 1) for k in KNOBS]], dtype=np.int16)
        result = objective.evaluate(idx, "dev")
        value = float(result.cycles[0]) if result.correct[0] else np.inf
        values.append(value)
        study.tell(trial, value if np.isfinite(value) else None, state=None if np.isfinite(value) else optuna.trial.TrialState.PRUNED)
    return values


class Unhinted(BuiltinObjective):
    """The task without its space file's ``Coupled`` hint: what the strategies learn on their own."""

    space = dataclasses.replace(SPACE, coupled=())


def quality(seeds: int, budget: int, target: float) -> None:
    rows: dict[str, list[list[float]]] = {"quick": [], "quick, no Coupled hint": [], "default TPE (categorical)": [],
                                          "RandomSampler": []}
    seconds, trials = 0.0, 0
    for seed in range(seeds):
        search = Search(_history(), BuiltinObjective(), Spec(strategy="quick", mode="dev", max_evals=budget, seed=seed))
        start = time.perf_counter()
        trials += STRATEGIES["quick"](search).new_evaluations
        seconds += time.perf_counter() - start
        rows["quick"].append(_curve(list(search.seen.values()), budget))     # every evaluation, in order (trials are thinned)
        search = Search(_history(), Unhinted(), Spec(strategy="quick", mode="dev", max_evals=budget, seed=seed))
        STRATEGIES["quick"](search)
        rows["quick, no Coupled hint"].append(_curve(list(search.seen.values()), budget))
        rows["default TPE (categorical)"].append(_curve(_baseline(optuna.samplers.TPESampler(seed=seed), budget, True), budget))
        rows["RandomSampler"].append(_curve(_baseline(optuna.samplers.RandomSampler(seed=seed), budget, False), budget))
    print(f"3. best-so-far median over {seeds} seeds (target {int(target)}; within 1% = <= {int(target * 1.01)}):")
    print("   " + f"{'evaluations':<28}" + "".join(f"{c:>10}" for c in _marks(budget)) + "   within 1% at end")
    for name, curves in rows.items():
        median = np.median(np.array(curves), axis=0)
        hits = np.mean([c[-1] <= target * 1.01 for c in curves])
        print("   " + f"{name:<28}" + "".join(f"{int(v):>10}" if np.isfinite(v) else f"{'-':>10}" for v in median) + f"   {hits:.0%}")
    ours, theirs = seconds / trials * 1e3, optuna_rdb_cost()
    print(f"2. quick, {trials} trials over {seeds} seeds with durable history: {ours:.1f} ms/trial; "
          f"Optuna TPE + RDBStorage(SQLite): {theirs:.1f} ms/trial (ratio {theirs / ours:.1f}x)")


def checkpoint_reach() -> None:
    reference = BuiltinObjective().cycles(_fixture("tensor_plan_iteration2_neighborhood_best")[None], "dev")[0]
    start = tuple(int(v) for v in _fixture("tensor_plan_attempt1_best"))
    for objective, hint in ((BuiltinObjective(), ""), (Unhinted(), ", no Coupled hint")):
        search = Search(_history(), objective, Spec(strategy="checkpoint", mode="dev", max_evals=300, start=start))
        STRATEGIES["checkpoint"](search)
        values = list(search.seen.values())
        reached = next((i + 1 for i, v in enumerate(np.minimum.accumulate(values)) if v <= reference), None)
        print(f"4. checkpoint from attempt-1{hint}: matches iteration-2 ({int(reference)}) after {reached} evaluations; "
              f"best after 300: {int(min(values))}")


def growth(seeds: int = 3) -> None:
    """ms/trial of quick at 500 and at 5,000 evaluations, each with a durable SQLite history: on the tensor plan, on
    the RTX 2080 Ti cache, a space small enough that a long run's TPE proposes configurations it scored before, on
    pnpoly, whose 4,092 configurations a run of 5,000 scores all of, and on GEMM without restrictions (82,944
    configurations, 78% of them failing). Each over ``seeds`` runs: one run of 500 takes about a second, and its
    figure moves by a third from run to run."""
    problems = [("the tensor plan", BuiltinObjective(), "dev"),
                ("the RTX 2080 Ti cache", CacheObjective(ROOT / "perf" / "caches" / "convolution-RTX_2080Ti.json.gz"), "time")]
    for label, cache in (("pnpoly", PNPOLY), ("GEMM, no restrictions", GEMM)):
        if cache.is_file():
            problems.append((label, CacheObjective(cache), "time"))
        else:
            print(f"5. {label} not measured: no {cache}")
    for label, objective, mode in problems:
        figures = {}
        for budget in (500, 5000):
            seconds, trials = 0.0, 0
            for seed in range(seeds):
                search = Search(_history(), objective, Spec(strategy="quick", mode=mode, max_evals=budget, seed=100 + seed))
                start = time.perf_counter()
                trials += STRATEGIES["quick"](search).new_evaluations
                seconds += time.perf_counter() - start
            figures[budget] = seconds / trials * 1e3
        print(f"5. quick ms/trial on {label} over {seeds} seeds: {figures[500]:.1f} at 500 evaluations, {figures[5000]:.1f} at 5,000 "
              f"(ratio {figures[5000] / figures[500]:.2f})")


def ask_cost(trials: int = 300, asks: int = 50) -> None:
    """ms per ask of Optuna's default TPE (every knob categorical) and of ``Parzen``, each told the same ``trials``
    random plans."""
    rng = np.random.default_rng(0)
    idx = SPACE.uniform(trials, rng)
    values = BuiltinObjective().cycles(idx, "dev")
    categorical = {k.name: CategoricalDistribution(list(k.choices)) for k in SPACE.knobs}
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    sampler = Parzen(SPACE, 0)
    for row, value in zip(idx, values, strict=True):
        finite = bool(np.isfinite(value))
        study.add_trial(create_trial(params=SPACE.decode(row), distributions=categorical,
                                     state=TrialState.COMPLETE if finite else TrialState.PRUNED,
                                     value=float(value) if finite else None))
        sampler.tell(row, value)
    start = time.perf_counter()
    for _ in range(asks):
        study.ask(categorical)
    theirs = (time.perf_counter() - start) / asks * 1e3
    start = time.perf_counter()
    for _ in range(asks):
        sampler.ask()
    ours = (time.perf_counter() - start) / asks * 1e3
    print(f"6. ms per TPE ask with {trials} trials held ({len(SPACE.knobs)} knobs): Optuna's TPESampler {theirs:.1f}, "
          f"Parzen {ours:.2f} ({theirs / ours:.3g}x)")


def _ask_ms(objective: Objective, plans: np.ndarray, asks: int) -> float:
    """ms per ``bayes`` ask (both processes fitted, every candidate scored) with ``plans`` scored."""
    rng = np.random.default_rng(0)
    search = Search(_history(), objective, Spec(strategy="bayes", mode=objective.modes[0], max_evals=len(plans) + asks, seed=0))
    search.evaluate(plans, {"phase": "random"})
    start = time.perf_counter()
    for _ in range(asks):
        bayes.propose(search, rng)
    return (time.perf_counter() - start) / asks * 1e3


def _nominal_cache() -> tuple[CacheObjective, np.ndarray]:
    """A cache of 2,000 configurations over three nominal knobs of 3,000 values and an ordinal one of 10, and 200 plans
    to score: 160 it measured, 40 at random (most not measured: failures)."""
    rng = np.random.default_rng(0)
    params = {f"n{i}": [f"v{j}" for j in range(3000)] for i in range(3)} | {"x": list(range(10))}
    configs = [dict(zip(params, (f"v{a}", f"v{b}", f"v{c}", int(x)), strict=True))
               for a, b, c, x in rng.integers(0, 3000, (2000, 4)) % [3000, 3000, 3000, 10]]
    records = {",".join(map(str, c.values())): c | {"time": 1.0 + int(c["n0"][1:]) % 7 + int(c["n1"][1:]) % 5 + c["x"]}
               for c in configs}
    path = Path(tempfile.mkdtemp()) / "nominal.json"
    path.write_text(json.dumps({"tune_params_keys": list(params), "tune_params": params, "cache": records}))
    objective = CacheObjective(path)
    return objective, np.concatenate([objective.space.encode_many(configs[:160]), objective.space.uniform(40, rng)])


def bayes_cost(held: tuple[int, ...] = (100, 200, 1000), asks: int = 5) -> None:
    figures, tensor = {}, BuiltinObjective()
    for count in held:
        plans = SPACE.uniform(20 * count, np.random.default_rng(0))
        figures[count] = _ask_ms(tensor, plans[tensor.feasible(plans)][:count], asks)
    shown = ", ".join(f"{ms:.0f} with {count:,}" for count, ms in figures.items())
    print(f"7. ms per bayes ask ({len(SPACE.knobs)} knobs): {shown} evaluations held "
          f"(ratio {figures[held[-1]] / figures[held[-2]]:.2f}); on three nominal knobs of 3,000 values, "
          f"{_ask_ms(*_nominal_cache(), asks):.0f} with 200")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=at_least_one, default=10)
    parser.add_argument("--budget", type=at_least_one, default=500)
    parser.add_argument("--only-growth", action="store_true", help="measure only the cost figures 5 to 7")
    args = parser.parse_args()
    if args.only_growth:
        growth()
        ask_cost()
        bayes_cost()
        return
    core = exhaustive()
    relaxed = STRATEGIES["exhaustive"](Search(_history(), BuiltinObjective(), Spec(
        strategy="exhaustive", mode="dev", max_evals=1_990_656, target="profile:iteration3_layout_relaxed",
        profile=load_profile("iteration3_layout_relaxed", SPACE, PROFILE_DIR)))).best.value
    checkpoint_reach()
    quality(args.seeds, args.budget, min(core, relaxed))
    growth()
    ask_cost()
    bayes_cost()


if __name__ == "__main__":
    main()
