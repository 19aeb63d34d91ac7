"""Search quality on measured GPU caches, every method side by side in one run.

    python perf/real_caches.py [--caches DIR ...] [--seeds 20] [--budget 200] [--jobs 2] [--only gemm ...]

For each Kernel Tuner cache in the DIRs (default: the shared GPU caches beside this checkout, then
``perf/caches``, other GPUs' caches that no constant of this project was chosen on), with the
T1 file of its kernel where one is there (its restrictions are known up front to every method; a
cache shipped without one is run without restrictions, and again with its kernel's T1 file from
``perf/spaces`` where there is one):
fraction of optimum (best time in the cache / best time found, 1.0 = the optimum) after 25, 50,
100 and 200 evaluations (those below the budget, then the budget), as the median and the 10th percentile over
seeds; the evaluations needed to reach 0.95 (median; ">B" when most seeds never do); and the mean at the budget with
its standard error over seeds (methods whose means differ by less than about two standard errors
are within noise of each other, and a median of 20 seeds moves by more: with 40 seeds or more, the
lowest and highest median of disjoint blocks of 20 seeds show how far). An evaluation is a
configuration scored for the first time; one the cache does not hold (or holds as failed) is a failed
evaluation and counts. Methods:

- ``quick``, ``bayes`` and ``checkpoint`` (from the space's default) of this project;
- Optuna's default TPESampler and RandomSampler (every knob categorical, as a user writes it);
- Kernel Tuner 1.5's strategies replaying the same cache in simulation mode (``pip install -e '.[perf]'``);
  unmeasured configurations are added to its copy of the cache as ``InvalidConfig``, so it pays
  for them as our methods do. The T1 file's conditions reach it as its own restriction strings, each
  one already accepted by this project's restricted evaluator when the file was read. Its constraint
  solver builds the space from strings far faster than from a Python callable, and on the shipped
  caches that space holds the same configurations as ours.

A file of the folders that the tuner cannot replay (damaged, or a cache whose knobs its kernel's T1 file in
``perf/spaces`` does not name) is one line saying why, and a method that fails on a cache (Kernel Tuner on a T4
results file) is left out of its table with its first failure; every other table is printed.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import multiprocessing
import random
import tempfile
import warnings
from pathlib import Path

import numpy as np
import optuna
from arguments import at_least_one

from tuner.history import History
from tuner.objectives.base import brief
from tuner.objectives.cache import CacheObjective
from tuner.search import Search, Spec
from tuner.space import ENUMERATION_CHUNK, WHOLE_SPACE, Space, load_profile
from tuner.strategies import STRATEGIES

ROOT = Path(__file__).resolve().parents[1]
CACHES = (ROOT.parent / "shared" / "data" / "gpu-caches", ROOT / "perf" / "caches")     # the shared ones, then other GPUs'
CHECKPOINTS = (25, 50, 100, 200)
KERNEL_TUNER = ("bayes_opt", "genetic_algorithm", "simulated_annealing", "dual_annealing", "greedy_ils", "pso")
OURS = ("quick", "bayes", "checkpoint")
OPTUNA = ("optuna TPE", "optuna random")
METHODS = (*OURS, *OPTUNA, *KERNEL_TUNER)
BLOCK = 20                      # seeds per block whose medians show how much a 20-seed median moves
optuna.logging.set_verbosity(optuna.logging.WARNING)


def caches_in(folders: list[Path], only: list[str] | None = None) -> list[Path]:
    """The caches in ``folders``, each folder's sorted (its T1 files left out); with ``only``, those whose
    file name starts with one of its names."""
    return [p for folder in folders for p in sorted(folder.glob("*.json*")) if not p.name.endswith(".t1.json")
            and (only is None or p.name.startswith(tuple(only)))]


def _t1_files(cache: Path, spaces: Path) -> list[Path | None]:
    """The T1 files a cache is run with: the one of its kernel beside it; for a cache shipped without one,
    none (every configuration the cache lacks is a failed evaluation), then the kernel's file in ``spaces``
    if there is one (its restrictions known up front)."""
    kernel = cache.name.split("-")[0].removesuffix(".json.gz").removesuffix(".json")
    beside, written = cache.parent / f"{kernel}.t1.json", spaces / f"{kernel}.t1.json"
    if beside.is_file():
        return [beside]
    return [None, written] if written.is_file() else [None]


@functools.cache
def _objective(cache: Path, t1: Path | None) -> CacheObjective:
    """The cache's objective, read once per process: every run on a cache scores the same records, and
    reading GEMM's takes about 0.4 s."""
    return CacheObjective(cache, t1)


def _ours(cache: Path, t1: Path | None, strategy: str, seed: int, budget: int) -> list[float]:
    objective = _objective(cache, t1)
    search = Search(History(f"sqlite:///{tempfile.mkdtemp(prefix='perf-')}/h.db"), objective,
                    Spec(strategy=strategy, mode=objective.modes[0], max_evals=budget, seed=seed,
                         start=tuple(int(v) for v in objective.space.default())))
    STRATEGIES[strategy](search)
    return list(search.seen.values())                       # every value in the order it was first scored


def _optuna(cache: Path, t1: Path | None, method: str, seed: int, budget: int) -> list[float]:
    objective = _objective(cache, t1)
    space = objective.space
    sampler = optuna.samplers.TPESampler(seed=seed) if method == "optuna TPE" else optuna.samplers.RandomSampler(seed=seed)
    study = optuna.create_study(sampler=sampler)
    values: dict[bytes, float] = {}
    for _ in range(50 * budget):
        if len(values) >= budget:
            break
        trial = study.ask()
        config = {k.name: trial.suggest_categorical(k.name, list(k.choices)) for k in space.knobs}
        idx = space.encode(config)
        if not objective.feasible(idx[None])[0]:                    # ruled out up front: not an evaluation
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            continue
        value = values.setdefault(idx.tobytes(), float(objective.cycles(idx[None])[0]))
        # a failure told as pruned: Optuna's TPE ranks it among the worst trials, where it would ignore a FAIL
        study.tell(trial, value) if np.isfinite(value) else study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    return list(values.values())


@functools.cache
def _kernel_tuner_cache(cache: Path, space: Space) -> tuple[Path, dict]:
    """A copy of the cache holding every configuration the restrictions allow, unmeasured ones as InvalidConfig, and
    the cache's header (all but its records). Those the restrictions rule out are not added: Kernel Tuner never asks
    for them, and a space of millions of configurations would make a copy of gigabytes."""
    data = json.loads(gzip.decompress(cache.read_bytes()) if cache.suffix == ".gz" else cache.read_bytes())
    if "cache" not in data:
        raise ValueError(f"{cache.name} is no Kernel Tuner cache (a T4 results file?): Kernel Tuner replays only its own")
    keys = data["tune_params_keys"]
    records = dict(data["cache"])
    whole = load_profile(WHOLE_SPACE, space)
    for start in range(0, whole.size, ENUMERATION_CHUNK):
        idx = whole.plans(start, start + ENUMERATION_CHUNK)
        for row in idx[space.allowed(idx)]:
            config = space.decode(row)
            key = ",".join(str(config[k]) for k in keys)
            if key not in records:
                records[key] = {k: config[k] for k in keys} | {"time": "InvalidConfig"}
    path = Path(tempfile.mkdtemp(prefix="perf-kt-")) / "cache.json"
    header = {k: v for k, v in data.items() if k != "cache"}
    path.write_text(json.dumps(header | {"cache": records}))    # cache last: Kernel Tuner reads a file that does not
    return path, header                                         # end in '}}}' as one a tuning run left open


def _kernel_tuner(cache: Path, t1: Path | None, strategy: str, seed: int, budget: int) -> list[float]:
    import kernel_tuner

    space = _objective(cache, t1).space
    copy, data = _kernel_tuner_cache(cache, space)         # read once per process, not once per run
    random.seed(seed)                                       # Kernel Tuner's strategies draw from both global states
    np.random.seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results, _ = kernel_tuner.tune_kernel(data["kernel_name"], "", data["problem_size"], [], data["tune_params"],
                                              restrictions=list(space.conditions) or None, simulation_mode=True,
                                              cache=str(copy), strategy=strategy, strategy_options={"max_fevals": budget},
                                              quiet=True, lang="CUDA")
    values: dict[tuple, float] = {}
    for r in results:
        key = tuple(r[k] for k in data["tune_params_keys"])
        values.setdefault(key, float(r["time"]) if isinstance(r.get("time"), int | float) else np.inf)
    return list(values.values())[:budget]


def fractions(cache: Path, t1: Path | None, method: str, seed: int, budget: int) -> np.ndarray:
    """One run's fraction of optimum after each of its ``budget`` evaluations (1.0: the optimum)."""
    run = _ours if method in OURS else _optuna if method in OPTUNA else _kernel_tuner
    values = run(cache, t1, method, seed, budget)
    best = np.minimum.accumulate(np.array(values[:budget] + [np.inf] * max(0, budget - len(values))))
    return _objective(cache, t1).optimum / best


def _run(job: tuple[str, str | None, str, int, int]) -> tuple[str, np.ndarray | str]:
    """:func:`fractions` in a worker of the pool, or why the method failed on this cache (one line)."""
    cache, t1, method, seed, budget = job
    try:
        return method, fractions(Path(cache), Path(t1) if t1 else None, method, seed, budget)
    except Exception as exc:        # another GPU's cache may hold what a method cannot replay: the others still compare
        return method, f"seed {seed}: {type(exc).__name__}: {brief(str(exc))}"


def unreadable(cache: Path, t1: Path | None) -> str | None:
    """Why the tuner cannot replay ``cache`` with ``t1`` (its own one-line error), or ``None`` where it can."""
    try:
        _objective(cache, t1)
    except (ValueError, OSError) as exc:
        return str(exc)
    return None


def mean_with_error(values: np.ndarray) -> str:
    """The mean of ``values`` with its standard error ("0.950 ±0.010"); the mean alone for a single value."""
    return f"{values.mean():.3f} ±{values.std(ddof=1) / np.sqrt(len(values)):.3f}" if len(values) > 1 else f"{values.mean():.3f}"


def _report(name: str, curves: dict[str, list[np.ndarray]], budget: int) -> None:
    """One table: per method (runs in seed order), the checkpoints' medians and 10th percentiles, the evaluations
    to 0.95, the mean at the budget with its standard error and, with 40 seeds or more, the lowest and
    highest median of disjoint blocks of 20 seeds there (how far a 20-seed median moves by the seeds alone)."""
    marks = [c for c in CHECKPOINTS if c < budget] + [budget]
    seeds = len(next(iter(curves.values())))
    blocks = seeds // BLOCK if seeds >= 2 * BLOCK else 0
    print(f"\n{name}: fraction of optimum, median (10th percentile) over {seeds} seeds")
    print(f"  {'method':<22}" + "".join(f"{c:>15}" for c in marks) + f"{'evals to 0.95':>15}{f'mean at {marks[-1]}':>17}"
          + (f"{f'{BLOCK}-seed medians ({blocks})':>24}" if blocks else ""))
    for method, runs in curves.items():
        fractions = np.array(runs)
        cells = "".join(f"{np.median(fractions[:, c - 1]):>8.3f} ({np.percentile(fractions[:, c - 1], 10):.2f})" for c in marks)
        reach = [int(np.argmax(f >= 0.95)) + 1 if (f >= 0.95).any() else budget + 1 for f in fractions]
        median = np.median(reach)
        last = fractions[:, marks[-1] - 1]
        spread = mean_with_error(last)
        medians = np.median(last[:blocks * BLOCK].reshape(blocks, BLOCK), axis=1) if blocks else None
        ranged = f"{medians.min():>18.3f}-{medians.max():.3f}" if medians is not None else ""
        print(f"  {method:<22}{cells}{(f'>{budget}' if median > budget else f'{median:.0f}'):>15}{spread:>17}{ranged}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--caches", type=Path, nargs="+", default=list(CACHES),
                        help="folders of caches (default: the shared GPU caches, then perf/caches)")
    parser.add_argument("--spaces", type=Path, default=Path(__file__).resolve().parent / "spaces",
                        help="T1 files for caches shipped without one (default: perf/spaces)")
    parser.add_argument("--seeds", type=at_least_one, default=20)
    parser.add_argument("--budget", type=at_least_one, default=200)
    parser.add_argument("--jobs", type=at_least_one, default=2)
    parser.add_argument("--only", nargs="+", default=None, help="caches whose file name starts with one of these")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS, metavar="METHOD",
                        help=f"methods to run (default: all of {', '.join(map(repr, METHODS))})")
    args = parser.parse_args()
    caches = caches_in(args.caches, args.only)
    if not caches:
        parser.error(f"no cache{' starts with ' + ' or '.join(args.only) if args.only else ''} in {' '.join(map(str, args.caches))}")
    if any(m in KERNEL_TUNER for m in args.methods):
        try:
            import kernel_tuner  # noqa: F401
        except ImportError:
            raise SystemExit("Kernel Tuner is missing: pip install -e '.[perf]' (or pass --methods without its strategies)") from None
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:         # one BLAS thread each (see tuner)
        for cache, t1 in ((c, t1) for c in caches for t1 in _t1_files(c, args.spaces)):   # each table once its runs are done
            name = f"{cache.name} ({f'restrictions of {t1.parent.name}/{t1.name}' if t1 else 'no T1 file: no restrictions'})"
            if why := unreadable(cache, t1):
                print(f"\n{name}: skipped: {why}")
                continue
            jobs = [(str(cache), str(t1) if t1 else None, m, s, args.budget) for m in args.methods for s in range(args.seeds)]
            curves: dict[str, list[np.ndarray]] = {m: [] for m in args.methods}
            failed: dict[str, str] = {}
            for method, outcome in pool.imap(_run, jobs):                      # in seed order: blocks of seeds are comparable
                if isinstance(outcome, str):
                    failed.setdefault(method, outcome)
                else:
                    curves[method].append(outcome)
            if ran := {m: runs for m, runs in curves.items() if m not in failed}:
                _report(name, ran, args.budget)
            else:
                print(f"\n{name}:")
            for method, why in failed.items():
                print(f"  {method:<22}failed, left out ({why})")
        pool.close()                        # the processes end on their own: a terminated one leaves its semaphores behind
        pool.join()


if __name__ == "__main__":
    main()
