"""What the tuner adds to each run of a measuring program (``--objective command:PROGRAM``), side by side in one run.

    python perf/program_runs.py [--runs 100]

The program reads its configuration on stdin and prints a time that depends on it, so a run costs about a
Python start. Its RUNS configurations are run three ways, and each prints its ms per run and its ratio to the
first:

1. started directly (``subprocess.run`` with the configuration as input): the floor, a process start;
2. through ``ProgramObjective.evaluate``: a private copy of the workspace, a process group per run, its
   input from a file and the ends of its output kept (1 and 2 alternate, configuration by configuration);
3. as a search: ``quick`` with a durable SQLite history, RUNS evaluations (its proposals, the history's
   writes and the runs).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from arguments import at_least_one

from tuner.history import History
from tuner.objectives.command import ProgramObjective
from tuner.search import Search, Spec
from tuner.space import space_from_t1
from tuner.strategies import STRATEGIES

PROGRAM = """import json, sys
c = json.load(sys.stdin)
print("measuring", c)
print(json.dumps({"time": 1.0 + abs(c["a"] - 7) + abs(c["b"] - 11) / 4}))
"""
T1 = {"ConfigurationSpace": {"TuningParameters": [{"Name": "a", "Values": "[i for i in range(24)]"},
                                                  {"Name": "b", "Values": "[i for i in range(24)]"}]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=at_least_one, default=100, help="configurations run each way (default 100, at most 576)")
    runs = min(parser.parse_args().runs, 576)
    with tempfile.TemporaryDirectory(prefix="perf-program-") as root:
        workspace = Path(root) / "kernel"
        workspace.mkdir()
        (workspace / "bench.py").write_text(PROGRAM)
        space = space_from_t1(T1)
        rows = np.stack(np.unravel_index(np.random.default_rng(0).permutation(space.size)[:runs], space.sizes), axis=1).astype(np.int16)

        objective = ProgramObjective(workspace, ["bench.py"], space)
        objective.evaluate(rows[:1], "time")                                  # the private copy is made once
        floor = evaluate = 0.0
        for row in rows:                                                      # alternated, so that a drift of the machine hits both
            start = time.perf_counter()
            subprocess.run([sys.executable, "bench.py"], input=json.dumps(space.decode(row)), cwd=workspace, capture_output=True,
                           text=True, check=True)
            floor += (time.perf_counter() - start) / runs
            start = time.perf_counter()
            assert np.isfinite(objective.evaluate(row[None], "time").cycles).all()
            evaluate += (time.perf_counter() - start) / runs

        search = Search(History(f"sqlite:///{root}/history.db"), objective, Spec(strategy="quick", mode="time", max_evals=runs, seed=0))
        start = time.perf_counter()
        STRATEGIES["quick"](search)
        searched = (time.perf_counter() - start) / max(len(search.seen), 1)
        objective.close()

    print(f"{runs} runs of a program that prints its time ({sys.executable} start included):")
    for label, cost in (("started directly (the floor)", floor), ("ProgramObjective.evaluate", evaluate),
                        ("quick search, durable SQLite history", searched)):
        print(f"  {label:<40}{cost * 1000:>8.1f} ms/run{cost / floor:>8.2f}x")


if __name__ == "__main__":
    main()
