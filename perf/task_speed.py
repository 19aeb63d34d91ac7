"""Speed of the task (one core): batch plans/s on each suite, and the cost of verifying one plan.

    python perf/task_speed.py [--plans N]

Prints plans/s of the batch path (cycles only) side by side for dev and final, and the cold
(first) and warm (cached signature) cost of verifying one plan, plus the single-plan CLI path.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from arguments import at_least_one

from tuner.plan import KNOBS, decode
from tuner.task import verifier
from tuner.task.benchmark import benchmark_report, score_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plans", type=at_least_one, default=1_000_000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    idx = np.stack([rng.integers(0, k.size, args.plans) for k in KNOBS], axis=1).astype(np.int16)
    for mode in ("dev", "final"):
        score_batch(idx[:1000], mode)                       # build the per-case tables
        elapsed = float("inf")
        for _ in range(3):                                  # best of three: the machine is shared
            start = time.perf_counter()
            scores = score_batch(idx, mode)
            elapsed = min(elapsed, time.perf_counter() - start)
        print(f"batch {mode:5s}: {args.plans / elapsed:>12,.0f} plans/s  ({args.plans:,} plans in {elapsed:.2f} s, "
              f"{np.isfinite(scores).mean():.0%} feasible)")
    plan = decode(idx[0])
    for mode in ("dev", "final"):
        verifier.case_error.cache_clear()
        start = time.perf_counter()
        verifier.verify(plan, mode)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        verifier.verify(plan, mode)
        warm = time.perf_counter() - start
        print(f"verify {mode:5s}: cold {cold * 1e3:8.1f} ms, warm {warm * 1e6:8.1f} us  (ratio {cold / warm:,.0f}x)")
    start = time.perf_counter()
    benchmark_report(plan, "final")
    print(f"single plan, final, with trace (warm numerics): {(time.perf_counter() - start) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
