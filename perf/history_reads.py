"""History reads at scale, measured side by side in one run (2-core machine; numbers vary by machine).

    python perf/history_reads.py [--studies 50] [--trials 2000] [--spaces 4]

Builds a SQLite history of STUDIES x TRIALS scored tensor plans (random, seeded; written in bulk;
each study's ten best checked in final mode, as a search with include_final leaves them), then
times ``compare_history``, ``rank_experiments`` and ``resume_search_history`` (seconds each, the
tools as the CLI and MCP run them) and, beside them, the per-study reading they replaced (every
trial of every study loaded through Optuna), with the ratio; and what opening the history for
writing costs. Then a program's history under SPACES edited spaces of TRIALS measurements each (each space's values
shifted by one from the last): what a command on a new space pays to take their measurements over, and what every
later command on a space pays to find nothing new (both read every other space's measurements).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from arguments import at_least_one

from tuner import service
from tuner.history import History, Row, TrialRecord, rows_of
from tuner.objectives.builtin import BuiltinObjective
from tuner.objectives.command import ProgramObjective
from tuner.plan import SPACE
from tuner.space import space_from_t1

ROOT = Path(__file__).resolve().parents[1]


def build(workspace: Path, studies: int, trials: int) -> str:
    """A workspace copy whose history holds ``studies`` studies of ``trials`` scored plans each."""
    for item in ("kernel_plan.json", "fixtures"):
        source = ROOT / item
        shutil.copytree(source, workspace / item) if source.is_dir() else shutil.copy2(source, workspace / item)
    url = f"sqlite:///{workspace / 'studies' / 'history.db'}"
    history, objective = History(url), BuiltinObjective()
    rng = np.random.default_rng(0)
    for s in range(studies):
        idx = SPACE.uniform(trials, rng)
        idx = np.unique(idx, axis=0)
        result = objective.evaluate(idx, "dev")
        hashes = [SPACE.hash_idx(row) for row in idx]
        rows = rows_of(result, hashes, idx)
        study = history.study(f"quick:space:dev:seed{s}@{objective.name}")
        records = [TrialRecord(row.idx, row.cycles if row.correct else None, {}) for row in rows]
        history.write(objective.name, "dev", rows, study._study_id, records, space=SPACE,
                      members=[(r.plan_hash, r.cycles if r.correct else None) for r in rows])
        best = sorted((r.cycles, r.plan_hash) for r in rows if r.correct and r.cycles is not None)[:10]
        top = {r.plan_hash: r.idx for r in rows}
        history.scored(objective, "final", np.stack([top[h] for _, h in best]))   # as a search with include_final does
    history.close()
    return url


def edited_spaces(workspace: Path, spaces: int, trials: int) -> tuple[str, ProgramObjective]:
    """A history of one program measured under ``spaces`` spaces of two knobs, each of about ``trials`` configurations
    (its ``x`` values shifted by one from the last's), every configuration measured once; and the next such space."""
    (workspace / "bench.py").write_text("print(1.0)\n")
    url = f"sqlite:///{workspace / 'program.db'}"
    side = max(2, round(trials ** 0.5))
    history = History(url)

    def space(shift: int) -> ProgramObjective:
        return ProgramObjective(workspace, ["bench.py"], space_from_t1({"ConfigurationSpace": {"TuningParameters": [
            {"Name": "x", "Values": list(range(shift, shift + side))}, {"Name": "y", "Values": list(range(side))}]}}))

    for shift in range(spaces):
        objective = space(shift)
        history.adopt(objective)
        held = history.cached(objective.name, "time")
        idx = np.indices(objective.space.sizes).reshape(2, -1).T.astype(np.int16)
        rows = [Row(h, 1.0 + shift, True, None, row) for row in idx if (h := objective.space.hash_idx(row)) not in held]
        history.write(objective.name, "time", rows)
    history.close()
    return url, space(spaces)


def per_study_reads(url: str, objective: str) -> float:
    """Seconds to read every study's five best trials the way the tools did before: each study loaded whole."""
    history = History(url, read_only=True)
    start = time.perf_counter()
    for name in history.study_names():
        if name.endswith(objective):
            trials = [t for t in history.trials(name) if t.value is not None]
            sorted(trials, key=lambda t: (t.value, t.user_attrs["plan_hash"]))[:5]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--studies", type=at_least_one, default=50)
    parser.add_argument("--trials", type=at_least_one, default=2000)
    parser.add_argument("--spaces", type=at_least_one, default=4)
    args = parser.parse_args()
    workspace = Path(tempfile.mkdtemp(prefix="tuner-history-reads-"))
    start = time.perf_counter()
    url = build(workspace, args.studies, args.trials)
    total = sum(len(History(url, read_only=True).outcomes(n)) for n in History(url, read_only=True).study_names())
    print(f"history: {args.studies} studies, {total:,} trials, built in {time.perf_counter() - start:.1f} s")
    figures = {}
    for tool in ("compare_history", "rank_experiments", "resume_search_history"):
        ctx = service.Context.create(workspace, url, tool=tool)
        start = time.perf_counter()
        getattr(service, tool)(ctx)
        figures[tool] = time.perf_counter() - start
        ctx.close()
        print(f"  {tool:<24} {figures[tool]:8.3f} s")
    start = time.perf_counter()
    for _ in range(10):
        History(url).close()
    print(f"  History open (writable)  {(time.perf_counter() - start) / 10 * 1e3:8.1f} ms  (what every writing command pays first)")
    old = per_study_reads(url, BuiltinObjective().name)
    print(f"  per-study Optuna reads   {old:8.3f} s  (what rank_experiments and compare_history did before; "
          f"{old / figures['rank_experiments']:.3g}x rank_experiments now)")
    program, objective = edited_spaces(workspace, args.spaces, args.trials)
    for what, read_only in (("a new space, read-only", True), ("a new space", False), ("the same, again", False)):
        history = History(program, read_only=read_only)
        start = time.perf_counter()
        copied = history.adopt(objective)
        print(f"  adopt: {what:<22} {(time.perf_counter() - start) * 1e3:8.1f} ms  ({copied:,} measurements taken over, "
              f"of {args.spaces} spaces)")
        history.close()
    shutil.rmtree(workspace)


if __name__ == "__main__":
    main()
