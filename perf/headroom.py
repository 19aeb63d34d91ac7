"""Headroom: how much better ``quick`` would do if its climbs knew which moves improve.

    python perf/headroom.py [--seeds 100] [--jobs 2] [--caches DIR]

``quick`` polishes its best configurations with :func:`tuner.strategies.checkpoint.climb`. The
climb takes the current configuration's step neighbours in the order the learned model gives
(:mod:`tuner.strategies.interactions`) and moves at the first improvement. This script swaps that
order for two oracles that read the objective's true values, which no real search can do:

- "improving first": the neighbours that improve on the current configuration come first, and the
  model's order holds otherwise;
- "best first": every neighbour sorted by its true value.

Everything else is as shipped. The three orders run side by side in one run on:

- the tensor plan without its space file's ``Coupled`` hint (dev mode, 300 evaluations): how many
  runs end within 1% of 178,866 cycles (the best plan of both exhaustive profiles, as
  ``perf/tuner_speed.py`` computes it), and the median best;
- each cache ``perf/real_caches.py`` runs (100 evaluations): the median fraction of optimum, and
  the mean with its standard error.

The gap between "as shipped" and the oracles is what a better model of the moves could win.
"""

from __future__ import annotations

import argparse
import multiprocessing
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from unittest import mock

import numpy as np
from real_caches import _run as _run_cache
from real_caches import _t1_files
from tuner_speed import ROOT, Unhinted, _history

from tuner.search import Search, Spec
from tuner.strategies import STRATEGIES, checkpoint

ORDERS = ("as shipped", "improving first", "best first")
TENSOR_BUDGET, CACHE_BUDGET = 300, 100
TENSOR_TARGET = 178_866              # dev cycles of the best plan of both exhaustive profiles


def _oracle(order: str) -> Callable[[Search, np.ndarray, np.random.Generator], np.ndarray]:
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


def _run(job: tuple[str, str | None, str, int]) -> tuple[str, str | None, str, float]:
    """One run: the best value (tensor plan, cycles) or fraction of optimum (a cache) it reached."""
    cache, t1, order, seed = job
    with mock.patch.object(checkpoint, "step_neighbours", _oracle(order)) if order != ORDERS[0] else nullcontext():
        if cache == "tensor":
            search = Search(_history(), Unhinted(), Spec(strategy="quick", mode="dev", max_evals=TENSOR_BUDGET, seed=seed))
            STRATEGIES["quick"](search)
            return cache, t1, order, min(list(search.seen.values())[:TENSOR_BUDGET])
        return cache, t1, order, float(_run_cache((cache, cache, t1, "quick", seed, CACHE_BUDGET))[2][-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--caches", type=Path, default=ROOT.parent / "shared" / "data" / "gpu-caches",
                        help="folder of Kernel Tuner caches (default: the shared GPU caches beside this checkout)")
    parser.add_argument("--spaces", type=Path, default=Path(__file__).resolve().parent / "spaces",
                        help="T1 files for caches shipped without one (default: perf/spaces)")
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    caches = sorted(p for p in args.caches.glob("*.json*") if not p.name.endswith(".t1.json"))
    problems = [("tensor", None)] + [(str(c), str(t1) if t1 else None) for c in caches for t1 in _t1_files(c, args.spaces)]
    results: dict[tuple[str, str | None, str], list[float]] = {}
    with multiprocessing.Pool(args.jobs) as pool:
        jobs = [(cache, t1, order, seed) for cache, t1 in problems for order in ORDERS for seed in range(args.seeds)]
        for cache, t1, order, value in pool.imap_unordered(_run, jobs):
            results.setdefault((cache, t1, order), []).append(value)
    for cache, t1 in problems:
        if cache == "tensor":
            print(f"\ntensor plan, no Coupled hint ({TENSOR_BUDGET} evaluations, {args.seeds} seeds): "
                  f"runs within 1% of {TENSOR_TARGET:,}, median best")
            for order in ORDERS:
                best = np.array(results[cache, t1, order])
                print(f"  {order:<18}{(best <= TENSOR_TARGET * 1.01).sum():>5} of {len(best)}{int(np.median(best)):>12,}")
            continue
        known = f"restrictions of {Path(t1).name}" if t1 else "no restrictions"
        print(f"\n{Path(cache).name} ({known}; {CACHE_BUDGET} evaluations, {args.seeds} seeds): fraction of optimum, "
              "median, mean ± s.e.")
        for order in ORDERS:
            fraction = np.array(results[cache, t1, order])
            print(f"  {order:<18}{np.median(fraction):>7.3f}{fraction.mean():>8.3f} ±{fraction.std(ddof=1) / np.sqrt(len(fraction)):.3f}")


if __name__ == "__main__":
    main()
