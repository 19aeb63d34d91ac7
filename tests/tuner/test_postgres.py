"""PostgreSQL as a first-class history: a real throwaway server (tests/conftest.py), the same code path as SQLite."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
from conftest import ROOT

from tuner import service
from tuner.history import History, Row, TrialRecord
from tuner.plan import SPACE, encode, plan_hash


def test_cache_trials_and_sweeps_round_trip_on_postgres(postgres_url, iteration2):
    history = History(postgres_url)
    idx = encode(iteration2)
    study = history.study("s")
    row = Row(plan_hash(iteration2), 123.0, True, 1e-5, idx)
    for _ in range(2):                                                       # the cache insert is idempotent
        history.write("obj", "dev", [row], study._study_id, [TrialRecord(idx, 123.0, {"phase": "t"})], space=SPACE,
                      members=[(row.plan_hash, 123.0)])
    assert history.cached("obj", "dev")[plan_hash(iteration2)].cycles == 123.0
    assert [t.number for t in history.trials("s")] == [0, 1] and history.trials("s")[0].params == iteration2
    assert history.outcomes("s") == [(plan_hash(iteration2), 123.0)] * 2
    history.close()


def test_four_processes_share_one_postgres_history(postgres_url, workspace):
    command = [sys.executable, "-m", "tuner", "--workspace", str(workspace), "--history", postgres_url, "--json",
               "search_plans", "--strategy", "quick", "--seed", "7", "--max-evals", "120"]
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(4)]
    outputs = [p.communicate(timeout=600) for p in processes]
    assert [p.returncode for p in processes] == [0] * 4, [err[-2000:] for _, err in outputs]
    assert all("Traceback" not in err for _, err in outputs)
    studies = {json.loads(out)["study"] for out, _ in outputs}
    assert len(studies) == 1
    study = studies.pop()
    history = History(postgres_url)
    numbers = [t.number for t in history.trials(study)]
    assert numbers == list(range(len(numbers)))                          # contiguous trial numbers, no race
    ctx = service.Context.create(workspace, postgres_url, tool="rank_experiments")
    tops = ctx.history.study_tops(ctx.objective.name, 5)
    assert list(tops) == [study] and len(tops[study][1]) == 5
    # the workers' interleaving decides the plans; the study is ranked when one of its five best is correct in every mode
    cached = ctx.history.cached(ctx.objective.name, "dev", set(tops[study][1]))
    best = np.stack([cached[h].idx for h in tops[study][1]])
    verified = (ctx.objective.evaluate(best, "dev").correct & ctx.objective.evaluate(best, "final").correct).any()
    ranking = service.rank_experiments(ctx)["ranking"]
    assert [r["study"] for r in ranking] == ([study] if verified else [])
    history.close()
