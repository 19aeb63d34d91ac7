"""What a local search's step neighbourhood costs, by the shape of the space, side by side in one run (one core;
numbers vary by machine).

    python perf/step_speed.py [--repeats 3]

For each space, from a configuration its restrictions allow: the single moves, those the restrictions rule out, and
their repairs (each made feasible by the nearest change to one more knob: ``neighbourhood.repairs``), with the
candidate fixes checked to find them; then the best of ``--repeats`` times to build the singles and repair them (ms),
the candidate fixes checked per second, and the peak memory that takes (MB, as ``tracemalloc`` sees numpy's arrays,
in a run of its own). A knob of thousands of values gives each infeasible move thousands of candidate fixes: only the
knobs that a restriction links to what the move changed are tried (``Space.linked``; any knob for the tensor plan,
whose check is its model), a bounded batch at a time (``REPAIR_ROWS``), so that the memory stays flat.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
from arguments import at_least_one

from tuner.objectives.builtin import BuiltinObjective
from tuner.space import Space, space_from_t1
from tuner.strategies.neighbourhood import repairs, singles


def _t1(knobs: list[tuple[str, str, int]], conditions: list[str]) -> Space:
    return space_from_t1({"ConfigurationSpace": {
        "TuningParameters": [{"Name": name, "Values": values, "Default": default} for name, values, default in knobs],
        "Conditions": [{"Expression": c} for c in conditions]}})


Check = Callable[[np.ndarray], np.ndarray]


def spaces() -> list[tuple[str, Space, Check, tuple[tuple[int, ...], ...] | None]]:
    """(what it is, the space, its cheap check, the groups of knobs the check reads together): the tensor plan, then
    spaces with long value lists, as a cache or a program over them checks them."""
    tensor = BuiltinObjective()
    blocks = _t1([("block_size_x", "list(range(1, 1025))", 32), ("block_size_y", "list(range(1, 1025))", 8),
                  ("tile_x", "list(range(1, 17))", 1), ("tile_y", "list(range(1, 17))", 1)],
                 ["block_size_x * block_size_y <= 1024", "block_size_x * tile_x <= 2048"])
    wide = _t1([(f"k{i}", "list(range(1000))", 0) for i in range(64)], ["k0 % 7 != 3"])
    widest = _t1([(f"k{i}", "list(range(10000))", 5000 if i < 2 else 0) for i in range(64)], ["k0 + k1 <= 10000", "k2 * k3 <= 5000"])
    return [("tensor plan (19 knobs)", tensor.space, tensor.feasible, tensor.linked),
            ("4 knobs of up to 1,024 values, product limits", blocks, blocks.allowed, blocks.linked),
            ("64 knobs of 1,000 values, one restriction", wide, wide.allowed, wide.linked),
            ("64 knobs of 10,000 values, two restrictions", widest, widest.allowed, widest.linked)]


def measure(space: Space, feasible: Check, linked: tuple[tuple[int, ...], ...] | None,
            repeats: int) -> tuple[int, int, int, int, float, float]:
    """Singles, infeasible ones, repaired moves, candidate fixes checked, best seconds of ``repeats``, peak MB."""
    center, checked = space.default(), []

    def counted(rows: np.ndarray) -> np.ndarray:
        checked.append(len(rows))
        return feasible(rows)

    seconds = []
    for _ in range(repeats):
        checked.clear()
        started = time.perf_counter()
        moves = singles(space, center)
        fixed = repairs(space, center, moves, counted, linked)
        seconds.append(time.perf_counter() - started)
    tracemalloc.start()                             # once more, for the memory alone (tracing slows Python down)
    repairs(space, center, singles(space, center), feasible, linked)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return len(moves), int((~feasible(moves)).sum()), len(fixed), sum(checked) - len(moves), min(seconds), peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=at_least_one, default=3, help="times each neighbourhood is built (the best is shown)")
    args = parser.parse_args()
    print(f"{'space':<48}{'singles':>9}{'infeasible':>11}{'repaired':>9}{'fixes checked':>15}{'ms':>9}"
          f"{'fixes/s':>12}{'peak MB':>9}")
    for name, space, feasible, linked in spaces():
        moves, infeasible, fixed, fixes, best, peak = measure(space, feasible, linked, args.repeats)
        print(f"{name:<48}{moves:>9,}{infeasible:>11,}{fixed:>9,}{fixes:>15,}{best * 1e3:>9.1f}{fixes / best:>12,.0f}{peak:>9.1f}")


if __name__ == "__main__":
    main()
