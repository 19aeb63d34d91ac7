"""Restrictions' speed, side by side in one run (one core; numbers vary by machine).

    python perf/space_speed.py [--configs 1000000]

Configurations per second that ``Space.allowed`` checks against a guarded restriction
(``t == 0 or n % t == 0``: its division is evaluated, for all configurations at once, only where the guard lets
Python reach it), a conditional one and a membership in a list (``n in [1, 2, 4, ...]``, compared element-wise),
beside the same restrictions evaluated one configuration at a time, as a restriction that
faults on some values is (a 20,000-configuration sample), and the ratio. Both give the same answers.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from arguments import at_least_one

from tuner.space import space_from_t1

RESTRICTIONS = ["t == 0 or n % t == 0", "m > 5 if t else m < 50", "n in [1, 2, 4, 8, 16, 32, 64] or m > 2"]
SAMPLE = 20_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=at_least_one, default=1_000_000, help="configurations checked at once (default 1,000,000)")
    args = parser.parse_args()
    space = space_from_t1({"ConfigurationSpace": {
        "TuningParameters": [{"Name": "t", "Values": "list(range(100))"}, {"Name": "n", "Values": "list(range(1, 101))"},
                             {"Name": "m", "Values": "list(range(100))"}],
        "Conditions": [{"Expression": c} for c in RESTRICTIONS]}})
    rng = np.random.default_rng(0)
    idx = space.uniform(args.configs, rng)
    started = time.perf_counter()
    at_once = space.allowed(idx)
    rate = args.configs / (time.perf_counter() - started)
    sample = idx[:SAMPLE]
    started = time.perf_counter()
    alone = [all(space._allows(c, space.decode(row)) for c in RESTRICTIONS) for row in sample]
    single = len(sample) / (time.perf_counter() - started)
    assert at_once[:SAMPLE].tolist() == alone
    print(f"restrictions {RESTRICTIONS}: {at_once.mean():.1%} of {args.configs:,} configurations allowed")
    print(f"  all at once:       {rate:>12,.0f} configurations/s")
    print(f"  one at a time:     {single:>12,.0f} configurations/s")
    print(f"  ratio:             {rate / single:>12,.0f}x")


if __name__ == "__main__":
    main()
