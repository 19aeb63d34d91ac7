"""Headroom: how much better ``quick`` would do if its climbs knew which moves improve, or if it knew
which configurations fail before scoring them.

    python perf/headroom.py [--seeds 100] [--jobs 2] [--caches DIR] [--only tensor gemm ...] [--budgets 300 100]

``quick`` polishes its best configurations with :func:`tuner.strategies.checkpoint.climb`. The
climb takes the current configuration's step neighbours in the order the learned model gives
(:mod:`tuner.strategies.interactions`) and moves at the first improvement. This script swaps that
order for two oracles that read the objective's true values, which no real search can do:

- "improving first": the neighbours that improve on the current configuration come first, and the
  model's order holds otherwise;
- "best first": every neighbour sorted by its true value.

Two more oracles, run on the caches only, make the objective's cheap check (``feasible``) rule out
every configuration the cache holds no time for, so that no evaluation is spent on one:

- "failures known": everywhere, as a space file with the kernel's exact restrictions would;
- "failures known to exploration": only while ``quick``'s design and TPE propose, not in its climbs.

(The tensor plan is left out of these: its runs spend almost no evaluation on a failure.)
Everything else is as shipped. The oracles run side by side in one run on:

- the tensor plan without its space file's ``Coupled`` hint (dev mode, 300 evaluations): how many
  runs end within 1% of 178,866 cycles (the best plan of both exhaustive profiles, as
  ``perf/tuner_speed.py`` computes it), and the median best;
- each cache ``perf/real_caches.py`` runs (100 evaluations): the median fraction of optimum, and
  the mean with its standard error.

``--budgets`` sets the two budgets, so the same tables tell how the headroom changes with the budget.

The gap between "as shipped" and the first two oracles is what a better model of the moves could win;
the gap to the last two is what a better model of failures could.
"""

from __future__ import annotations

import argparse
import multiprocessing
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from unittest import mock

import numpy as np
from arguments import at_least_one
from real_caches import _t1_files, caches_in, fractions, mean_with_error, unreadable
from tuner_speed import ROOT, Unhinted, _history

from tuner.objectives.cache import CacheObjective
from tuner.search import Search, Spec
from tuner.strategies import STRATEGIES, checkpoint, quick

ORDERS = ("as shipped", "improving first", "best first")
FAILURE_ORACLES = ("failures known", "failures known to exploration")
TENSOR_BUDGET, CACHE_BUDGET = 300, 100    # evaluations per run (defaults of --budgets)
TENSOR_TARGET = 178_866              # dev cycles of the best plan of both exhaustive profiles


def _reordered(order: str) -> Callable[[Search, np.ndarray, np.random.Generator], np.ndarray]:
    """``checkpoint.step_neighbours`` with its moves reordered by their true values."""
    shipped = checkpoint.step_neighbours

    def step_neighbours(search: Search, center: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        moves = shipped(search, center, rng)
        if not len(moves):
            return moves
        true = search.objective.cycles(moves, search.spec.mode)
        key = true if order == "best first" else true >= search.objective.cycles(center[None], search.spec.mode)[0]
        return moves[np.argsort(key, kind="stable")]

    return step_neighbours


@contextmanager
def failures_known(everywhere: bool) -> Iterator[None]:
    """Within it, a cache's ``feasible`` also rules out what the cache holds no time for: always
    (``everywhere``), or only while ``quick`` draws its design and TPE proposes."""
    known, shipped = everywhere, CacheObjective.feasible

    def feasible(objective: CacheObjective, idx: np.ndarray) -> np.ndarray:
        allowed = shipped(objective, idx)
        return allowed & np.isfinite(objective.cycles(idx)) if known else allowed

    def exploring(function: Callable) -> Callable:
        def knowing(*args: object) -> object:
            nonlocal known
            known = True
            try:
                return function(*args)
            finally:
                known = everywhere
        return knowing

    with (mock.patch.object(CacheObjective, "feasible", feasible),
          mock.patch.object(CacheObjective, "linked", None if everywhere else CacheObjective.linked),   # it reads every knob then
          mock.patch.object(quick, "feasible_design", exploring(quick.feasible_design)),
          mock.patch.object(quick._Tpe, "propose", exploring(quick._Tpe.propose))):
        yield


def _patches(oracle: str) -> AbstractContextManager:
    """The patches that make a run ``oracle``'s (none: as shipped)."""
    if oracle in FAILURE_ORACLES:
        return failures_known(everywhere=oracle == FAILURE_ORACLES[0])
    return mock.patch.object(checkpoint, "step_neighbours", _reordered(oracle)) if oracle != ORDERS[0] else nullcontext()


def _run(job: tuple[str, str | None, str, int, int]) -> tuple[str, str | None, str, float]:
    """One run of ``budget`` evaluations: the best value (tensor plan, cycles) or fraction of optimum (a cache) it reached."""
    cache, t1, oracle, seed, budget = job
    with _patches(oracle):
        if cache == "tensor":
            search = Search(_history(), Unhinted(), Spec(strategy="quick", mode="dev", max_evals=budget, seed=seed))
            STRATEGIES["quick"](search)
            return cache, t1, oracle, min(list(search.seen.values())[:budget])
        return cache, t1, oracle, float(fractions(Path(cache), Path(t1) if t1 else None, "quick", seed, budget)[-1])


def _oracles_on(problem: str) -> tuple[str, ...]:
    """The oracles run on a problem: the failure oracles on caches only."""
    return ORDERS if problem == "tensor" else ORDERS + FAILURE_ORACLES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--caches", type=Path, default=ROOT.parent / "shared" / "data" / "gpu-caches",
                        help="folder of Kernel Tuner caches (default: the shared GPU caches beside this checkout)")
    parser.add_argument("--spaces", type=Path, default=Path(__file__).resolve().parent / "spaces",
                        help="T1 files for caches shipped without one (default: perf/spaces)")
    parser.add_argument("--seeds", type=at_least_one, default=100)
    parser.add_argument("--jobs", type=at_least_one, default=2)
    parser.add_argument("--only", nargs="+", default=None,
                        help="problems to run: 'tensor' (the tensor plan) or caches whose file name starts with one of these")
    parser.add_argument("--budgets", type=at_least_one, nargs=2, default=(TENSOR_BUDGET, CACHE_BUDGET), metavar=("TENSOR", "CACHE"),
                        help=f"evaluations per run on the tensor plan and on a cache (default: {TENSOR_BUDGET} {CACHE_BUDGET})")
    args = parser.parse_args()
    tensor_budget, cache_budget = args.budgets
    problems = [("tensor", None)] if args.only is None or "tensor" in args.only else []
    caches = caches_in([args.caches], args.only)
    if not problems and not caches:
        parser.error(f"--only {' '.join(args.only)}: no problem matches ('tensor', or the start of a cache's file name in {args.caches})")
    for cache, t1 in ((c, t1) for c in caches for t1 in _t1_files(c, args.spaces)):     # as real_caches.py: a line each
        if why := unreadable(cache, t1):
            print(f"{cache.name} with {t1.name if t1 else 'no T1 file'}: skipped: {why}")
        else:
            problems.append((str(cache), str(t1) if t1 else None))
    results: dict[tuple[str, str | None, str], list[float]] = {}
    with multiprocessing.Pool(args.jobs) as pool:
        jobs = [(cache, t1, oracle, seed, tensor_budget if cache == "tensor" else cache_budget)
                for cache, t1 in problems for oracle in _oracles_on(cache) for seed in range(args.seeds)]
        for cache, t1, oracle, value in pool.imap_unordered(_run, jobs):
            results.setdefault((cache, t1, oracle), []).append(value)
    for cache, t1 in problems:
        if cache == "tensor":
            print(f"\ntensor plan, no Coupled hint ({tensor_budget} evaluations, {args.seeds} seeds): "
                  f"runs within 1% of {TENSOR_TARGET:,}, median best")
            for oracle in _oracles_on(cache):
                best = np.array(results[cache, t1, oracle])
                print(f"  {oracle:<18}{(best <= TENSOR_TARGET * 1.01).sum():>5} of {len(best)}{int(np.median(best)):>12,}")
            continue
        known = f"restrictions of {Path(t1).name}" if t1 else "no restrictions"
        print(f"\n{Path(cache).name} ({known}; {cache_budget} evaluations, {args.seeds} seeds): fraction of optimum, "
              "median, mean ± s.e.")
        for oracle in _oracles_on(cache):
            fraction = np.array(results[cache, t1, oracle])
            print(f"  {oracle:<31}{np.median(fraction):>7.3f}{mean_with_error(fraction):>15}")


if __name__ == "__main__":
    main()
