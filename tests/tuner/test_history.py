"""History: real SQLite files, Optuna's schema, bulk writes, kills and concurrent processes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import optuna
import pytest
from conftest import ROOT, reading, where_nothing_can_be_written

from tuner.history import History, HistoryError, HistoryUnavailable, Row, TrialRecord, outlasting_outages, resolve_url, shown_url
from tuner.objectives.base import Evaluations
from tuner.plan import SPACE, encode, plan_hash
from tuner.space import space_from_tune_params


def tuner(workspace, *args, **kw):
    return subprocess.Popen([sys.executable, "-m", "tuner", "--workspace", str(workspace), "--json", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, **kw)


def test_cache_and_trials_round_trip(tmp_path, iteration2):
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    idx = encode(iteration2)
    study = history.study("s")
    history.write("obj", "dev", [Row(plan_hash(iteration2), 123.0, True, 1e-5, idx)], study._study_id,
                  [TrialRecord(idx, 123.0, {"phase": "t"}), TrialRecord(idx, None, {"phase": "p"})], space=SPACE)
    assert history.cached("obj", "dev")[plan_hash(iteration2)].cycles == 123.0
    assert history.cached("obj", "final") == {}
    trials = optuna.load_study(study_name="s", storage=history.storage).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL"] and [t.number for t in trials] == [0, 1]
    assert trials[0].value == 123.0 and trials[0].params == iteration2          # the real knob values, not indices
    assert trials[0].user_attrs == {"plan_hash": plan_hash(iteration2), "phase": "t"}
    assert history.outcomes("s") == []                     # trials written without members, as older versions did
    history.close()
    assert History(f"sqlite:///{tmp_path / 'h.db'}").outcomes("s") == [(plan_hash(iteration2), 123.0), (plan_hash(iteration2), None)]


def test_a_knob_whose_values_python_finds_equal_is_stored_as_each_value(tmp_path):
    # Optuna finds a categorical value by ==, so True and 1.0 would be stored as the 1 listed before them
    space = space_from_tune_params({"mode": ["a", 1, True, 1.0, 0, False], "bx": [16, 32]})
    idx = np.array([[m, b] for m in range(6) for b in range(2)], dtype=np.int16)
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    study = history.study("mixed")
    history.write("o", "time", [], study._study_id, [TrialRecord(row, 1.0, {}) for row in idx], space=space)
    trials = optuna.load_study(study_name="mixed", storage=history.storage).get_trials()
    shown = [(t.params["mode"], type(t.params["mode"]), t.params["bx"]) for t in trials]
    assert shown == [(v, type(v), b) for v in ("a", 1, True, 1.0, 0, False) for b in (16, 32)]
    history.close()


def _program_space(name: str, top: int) -> SimpleNamespace:
    """What :meth:`History.adopt` reads of a program's objective: its name, the program it measures (the same for
    all of them) and its space, knob ``k`` from 1 to ``top``."""
    return SimpleNamespace(name=name, measures="command:bench", space=space_from_tune_params({"k": list(range(1, top + 1))}))


def test_a_space_takes_over_the_value_another_space_measured_after_a_failure(tmp_path):
    """Three spaces of one program: the first's run of k=2 failed, the second took that failure over and measured it
    again. A third took over the first space's evaluation (its name sorts first), the failure with its reason, so
    every search on it held k=2 as failed. A read-only history (compare_history's, remeasure_failures' check) took
    nothing over, so it read no measurement on a space that no search had used yet."""
    first, second, third = _program_space("command:a", 3), _program_space("command:b", 4), _program_space("command:c", 5)
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    k2 = first.space.encode({"k": 2})
    assert history.adopt(first) == 0
    history.write(first.name, "time", [Row(first.space.hash_idx(k2), None, False, None, k2, reason="CUDA error"),
                                       Row(first.space.hash_idx(k2 + 1), 7.0, True, None, k2 + 1)])
    h = second.space.hash_idx(k2)
    reader = History(f"sqlite:///{tmp_path / 'h.db'}", read_only=True)             # reads what it would take over
    assert reader.adopt(second) == 2 and reader.failures(second.name, "time")[1] == {h: (None, "CUDA error")}
    assert reader.best_cached(second.name, "time", 5)[0].cycles == 7.0 and reader.reasons(second.name, "time", [h]) == {h: "CUDA error"}
    reader.close()
    assert history.failures(second.name, "time") == (0, {})                        # and writes nothing
    assert history.adopt(second) == 2 and history.failures(second.name, "time")[1] == {h: (None, "CUDA error")}
    assert history.adopt(second) == 0                                               # nothing new
    history.write(second.name, "time", [Row(h, 8.0, True, None, k2)], replaced=[h])      # measured again, as remeasure does
    assert history.adopt(third) == 2 and history.failures(third.name, "time") == (2, {})
    assert history.cached(third.name, "time", [h])[h].cycles == 8.0 and history.reasons(third.name, "time") == {}
    history.close()


def test_the_best_evaluations_are_the_best_correct_values_with_ties_by_plan_hash(tmp_path):
    """``best_cached`` (the history's seeds of the gate and of resume_search_history): the ``limit`` best evaluations
    that have a value and passed the problem's check, by value, then by plan hash; a lower value that failed the
    check and a failure take no place among them."""
    space = space_from_tune_params({"k": list(range(8))})
    idx = [space.encode({"k": k}) for k in range(8)]
    outcomes = [(1.0, False), (None, False), (5.0, True), (3.0, True), (3.0, True), (2.0, False), (9.0, True), (4.0, True)]
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    history.write("o", "time", [Row(space.hash_idx(i), v, ok, None, i) for i, (v, ok) in zip(idx, outcomes, strict=True)])
    tied = sorted(space.hash_idx(idx[k]) for k in (3, 4))
    best = [(r.cycles, r.plan_hash) for r in history.best_cached("o", "time", 3)]
    assert best == [(3.0, tied[0]), (3.0, tied[1]), (4.0, space.hash_idx(idx[7]))]
    history.close()


def test_a_space_takes_over_a_run_killed_at_a_time_limit_with_its_limit(tmp_path):
    """So that a search on the new space with a longer limit measures it again, as one on the earlier space would,
    where a plain failure would stand for good; a read-only history holds the limit too."""
    first, second = _program_space("command:a", 3), _program_space("command:b", 4)
    k2 = first.space.encode({"k": 2})
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    assert history.adopt(first) == 0
    history.write(first.name, "time", [Row(first.space.hash_idx(k2), None, False, None, k2, timed_out_s=0.5, reason="took over 0.5 s")])
    h = second.space.hash_idx(k2)
    reader = History(f"sqlite:///{tmp_path / 'h.db'}", read_only=True)
    assert reader.adopt(second) == 1 and reader.timed_out(second.name, "time") == {h: 0.5}
    reader.close()
    assert history.adopt(second) == 1 and history.timed_out(second.name, "time") == {h: 0.5}
    history.close()


def test_a_failures_reason_in_the_history_stands_before_one_an_older_trial_kept(tmp_path):
    """Where some failures have no reason in the history (an older version scored them), those come from the trials; a
    failure measured again since has its new reason in the history, and that one stands, not its old trial's."""
    space = space_from_tune_params({"k": [1, 2]})
    k1, k2 = space.encode({"k": 1}), space.encode({"k": 2})
    h1, h2 = space.hash_idx(k1), space.hash_idx(k2)
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    study = history.study("quick:space:time:seed0@o")
    history.write("o", "time", [Row(h1, None, False, None, k1), Row(h2, None, False, None, k2)], study._study_id,
                  [TrialRecord(k1, None, {"reason": "kept in a trial"}), TrialRecord(k2, None, {"reason": "the first run's"})], space=space)
    history.write("o", "time", [Row(h2, None, False, None, k2, reason="the second run's")], replaced=[h2])
    assert history.failures("o", "time") == (2, {h1: (None, "kept in a trial"), h2: (None, "the second run's")})
    history.close()


def test_a_history_written_before_reasons_were_kept_gives_read_only_the_reasons_its_trials_kept(tmp_path):
    """A history an older version wrote has no tuner_reasons table, and a read-only tool creates none: its failures
    have the reasons their trials kept, as the history would otherwise."""
    space = space_from_tune_params({"k": [1, 2]})
    k1 = space.encode({"k": 1})
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    history.write("o", "time", [Row(space.hash_idx(k1), None, False, None, k1)], history.study("quick:space:time:seed0@o")._study_id,
                  [TrialRecord(k1, None, {"reason": "kept in a trial"})], space=space)
    history.close()
    older = sqlite3.connect(tmp_path / "h.db")
    older.execute("DROP TABLE tuner_reasons")
    older.close()
    reader = History(f"sqlite:///{tmp_path / 'h.db'}", read_only=True, outage_s=0)
    assert reader.failures("o", "time") == (1, {space.hash_idx(k1): (None, "kept in a trial")})
    reader.close()


def test_a_read_only_history_refuses_a_write_and_keeps_what_it_holds(tmp_path):
    """A tool that declares no history writes opens it read-only: a write (a bug's) is refused, not made, even where
    the file could be written."""
    space = space_from_tune_params({"k": [1, 2]})
    k1 = space.encode({"k": 1})
    History(f"sqlite:///{tmp_path / 'h.db'}").close()
    reader = History(f"sqlite:///{tmp_path / 'h.db'}", read_only=True)
    with pytest.raises(HistoryError, match="opened read-only"):
        reader.write("o", "time", [Row(space.hash_idx(k1), 1.0, True, None, k1)])
    assert reader.cached("o", "time") == {}
    reader.close()


def test_a_configurations_samples_are_those_of_its_last_trial_in_the_newest_study_that_measured_it(tmp_path):
    """A configuration is measured again only to replace its result, and the cache holds the last measurement."""
    space = space_from_tune_params({"k": [1, 2]})
    k1 = space.encode({"k": 1})
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    for name, runs in (("quick:space:time:seed0@o", [[4.0, 6.0], [2.0, 3.0]]), ("remeasure:failures:1:time@o", [[1.0, 1.5]])):
        history.write("o", "time", [], history.study(name)._study_id,
                      [TrialRecord(k1, float(np.median(r)), {"samples": r}) for r in runs], space=space)
        assert history.samples("o") == {space.hash_idx(k1): runs[-1]}
    history.close()


def test_a_space_takes_over_a_correct_time_in_the_place_of_a_value_that_failed_the_check(tmp_path):
    """Of one program's spaces, the first (by name) measured k=1 with a value that failed the problem's check, the
    second a correct time: a third space takes over the correct time, which counts as no failure. A read-only history
    holds what it would take over in the place of the space's own failure (k=2: failed under the third space, timed
    under the second)."""
    first, second, third = _program_space("command:a", 3), _program_space("command:b", 3), _program_space("command:c", 3)
    k1, k2 = first.space.encode({"k": 1}), first.space.encode({"k": 2})
    h1, h2 = first.space.hash_idx(k1), first.space.hash_idx(k2)
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    assert [history.adopt(space) for space in (first, second, third)] == [0, 0, 0]          # each space recorded
    history.write(first.name, "time", [Row(h1, 5.0, False, 0.1, k1)])
    history.write(second.name, "time", [Row(h1, 6.0, True, None, k1), Row(h2, 7.0, True, None, k2)])
    history.write(third.name, "time", [Row(h2, None, False, None, k2, reason="CUDA error")])
    reader = History(f"sqlite:///{tmp_path / 'h.db'}", read_only=True)
    assert reader.adopt(third) == 2
    assert {h: (r.cycles, r.correct) for h, r in reader.cached(third.name, "time").items()} == {h1: (6.0, True), h2: (7.0, True)}
    assert list(reader.cached(third.name, "time", [h2])) == [h2]                # what is asked for, taken over or not
    assert reader.failures(third.name, "time") == (2, {}) and reader.best_cached(third.name, "time", 1)[0].plan_hash == h1
    reader.close()
    assert history.failures(third.name, "time") == (1, {h2: (None, "CUDA error")})      # the reader wrote nothing
    history.close()


def test_a_failure_is_measured_again_only_under_a_longer_time_limit(tmp_path):
    """A run killed at a time limit says only that it took longer: ``scored`` runs it again under a longer limit (and
    writes its new row in the failure's place), not under the same one; a crash is never run again. A configuration
    asked for twice runs once, and an error the objective did not measure (NaN) is none."""
    space = space_from_tune_params({"k": [1, 2, 3]})
    idx = np.stack([space.encode({"k": k}) for k in (1, 2, 3)])
    hashes = [space.hash_idx(row) for row in idx]
    runs = []

    def evaluate(batch: np.ndarray, mode: str) -> Evaluations:
        runs.extend(space.hash_idx(row) for row in batch)
        return Evaluations(np.full(len(batch), 2.0), np.ones(len(batch), bool), np.full(len(batch), np.nan))

    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    history.write("o", "time", [Row(hashes[0], None, False, None, idx[0], timed_out_s=0.5, reason="took over 0.5 s"),
                                Row(hashes[1], None, False, None, idx[1], reason="exited 3")])
    for limit, measured in ((0.5, [hashes[2]]), (2.0, [hashes[0]])):
        objective = SimpleNamespace(name="o", space=space, timeout_s=limit, evaluate=evaluate)
        rows = history.scored(objective, "time", np.concatenate([idx, idx]))
        assert runs == measured and set(rows) == set(hashes), limit
        assert [rows[h].max_abs for h in measured] == [None]
        runs.clear()
    assert {h: r.cycles for h, r in history.cached("o", "time").items()} == dict(zip(hashes, [2.0, None, 2.0], strict=True))
    history.close()


def test_history_accepts_any_sqlalchemy_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'nested' / 'x.db'}"
    History(url).study("a")
    assert "a" in History(url).study_names()


@pytest.mark.parametrize(("given", "read"), [
    ("postgres://u:p@h1:5432,h2:5433/db?target_session_attrs=read-write",
     "postgresql://u:p@/db?host=h1:5432&host=h2:5433&target_session_attrs=read-write"),
    ("postgresql+psycopg://h1,h2:5433/db", "postgresql+psycopg:///db?host=h1&host=h2:5433"),
    ("postgresql://u@h1,h2?sslmode=require", "postgresql://u@?host=h1&host=h2&sslmode=require"),     # no database named
    ("postgresql://u@h1:5432/db", "postgresql://u@h1:5432/db"),                                     # one host: as given
])
def test_a_postgres_url_listing_several_hosts_is_read_with_each_as_a_host_parameter(given, read):
    """libpq's list of hosts in the authority, which SQLAlchemy's URL parser takes for a port (the server test:
    tests/tuner/test_postgres.py)."""
    assert resolve_url(given) == read


def test_a_history_url_is_shown_as_given_with_its_password_hidden(tmp_path):
    folder = tmp_path / "résultats d'été"
    assert shown_url(resolve_url(folder / "h.db")) == f"sqlite:///{folder}/h.db"        # not percent-encoded
    assert shown_url("postgresql+psycopg://tuner:hunter2@db:5432/tuning") == "postgresql+psycopg://tuner:***@db:5432/tuning"
    assert shown_url("postgresql+psycopg://tuner@db/tuning?sslmode=require") == "postgresql+psycopg://tuner@db/tuning?sslmode=require"


def test_a_history_path_may_hold_percent_signs_and_question_marks(tmp_path):
    """In a URL, ``%`` starts an escape and ``?`` the query: a path's own are escaped, so the file is where it was named."""
    file = tmp_path / "50%20 done?mode=ro" / "h.db"
    history = History(resolve_url(file))
    history.study("a")
    history.close()
    assert file.is_file() and History(resolve_url(file), read_only=True).study_names() == ["a"]


def test_an_in_memory_history_reads_as_empty_and_refuses_to_be_written():
    """Optuna's storage and the tuner's tables each open their own engine, and an in-memory SQLite database is
    one per engine: a search written there would fail half-way, so it is refused up front, by name."""
    for url in ("sqlite://", "sqlite:///:memory:", resolve_url(":memory:"), "sqlite:///file:shared?mode=memory&uri=true"):
        assert History(url, read_only=True).study_names() == []
        with pytest.raises(HistoryUnavailable, match=r"in-memory.*give a file"):
            History(url)


def _sweep(db):
    """The sweep record, or ``None`` while the searching process has not written one yet."""
    try:
        with reading(db) as conn:
            row = conn.execute("select evaluations, progress, state from tuner_sweeps").fetchone()
    except sqlite3.OperationalError:                  # tables not created yet
        return None
    return (row[0], json.loads(row[1]), row[2]) if row else None


def _done(db) -> int:
    """The evaluations whose results are in the history: the sizes of the done claims."""
    with sqlite3.connect(db) as conn:
        return conn.execute("select coalesce(sum(size), 0) from tuner_claims where state = 'done'").fetchone()[0]


def test_killed_exhaustive_sweep_resumes_without_recomputing(workspace):
    db = workspace / "h.db"
    proc = tuner(workspace, "--history", str(db), "bounded_exhaustive_search", "--profile", "iteration3_dev_core")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if db.exists() and (s := _sweep(db)) and s[0] > 0 and _done(db) > 0:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with sqlite3.connect(db) as conn:
        assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
    done_before = _done(db)                            # the range the killed process held is not done: it is redone
    assert 0 < done_before <= _sweep(db)[0] < 1_814_400
    rerun = tuner(workspace, "--history", str(db), "bounded_exhaustive_search", "--profile", "iteration3_dev_core")
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    result = json.loads(out)
    assert result["evaluations"] == 1_814_400
    assert result["new_evaluations"] == 1_814_400 - done_before
    assert result["stopped"] == "exhausted"


def test_killed_sampler_search_keeps_its_written_work(workspace):
    db = workspace / "h.db"
    args = ("--history", str(db), "search_plans", "--strategy", "quick", "--max-evals", "1000", "--seed", "5")
    proc = tuner(workspace, *args)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:               # killed once some work is written (a flush comes every 2 s)
        time.sleep(0.05)
        if db.exists() and (s := _sweep(db)) and s[0] >= 40 and _done(db) > 0:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _states(workspace, db) == ["lost"]          # recorded as running, and no live worker is on it
    with sqlite3.connect(db) as conn:
        assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
        cached = conn.execute("select count(*) from tuner_evaluations").fetchone()[0]
    claimed, recorded = _sweep(db)[0], _done(db)      # claimed plans the killed process had not written are redone
    assert cached >= recorded > 0 and claimed >= recorded
    rerun = tuner(workspace, *args)
    out, err = rerun.communicate(timeout=180)
    assert rerun.returncode == 0, err
    result = json.loads(out)
    assert result["evaluations"] == 1000 and result["new_evaluations"] == 1000 - recorded
    assert _states(workspace, db) == ["stopped"]


def _states(workspace, db):
    """The searches' states as ``resume_search_history`` shows them."""
    out, _ = tuner(workspace, "--history", str(db), "resume_search_history").communicate(timeout=120)
    return [search["state"] for search in json.loads(out)["searches"]]


OPEN_AT_ONCE = """import os, sys, time
from tuner.history import History
print(flush=True)                                  # imported
while not os.path.exists(sys.argv[2]):             # the barrier: every process starts opening once the file exists
    time.sleep(0.0005)
History("sqlite:///" + sys.argv[1]).study("s")
"""


def test_processes_that_open_a_new_history_at_once_all_open_it(tmp_path):
    """Workers started together on a new SQLite history: switching it to WAL does not wait on SQLite's busy timeout, so
    one of them got "database is locked" and died at its start (1 open in 25 with six at once)."""
    for round_ in range(6):
        database, go = tmp_path / f"h{round_}.db", tmp_path / f"go{round_}"
        processes = [subprocess.Popen([sys.executable, "-c", OPEN_AT_ONCE, str(database), str(go)], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(8)]
        for process in processes:
            process.stdout.readline()                # every process has imported the tuner
        go.touch()
        errors = [process.stderr.read() for process in processes]           # each ends as its stderr closes
        assert [process.wait(timeout=300) for process in processes] == [0] * 8, errors


def test_four_processes_share_one_history(workspace):
    db = workspace / "shared.db"
    procs = [tuner(workspace, "--history", str(db), "search_plans", "--strategy", "quick", "--max-evals", "150", "--seed", str(s))
             for s in range(4)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert "Traceback" not in err
        results.append(json.loads(out))
    history = History(f"sqlite:///{db}")
    for result in results:
        trials = history.trials(result["study"])
        assert len(trials) == result["trials"] > 0
        assert sorted(t.number for t in trials) == list(range(len(trials)))
    with sqlite3.connect(db) as conn:
        assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
        rows = conn.execute("select count(distinct plan_hash) from tuner_evaluations").fetchone()[0]
    assert rows >= max(r["new_evaluations"] for r in results)


def test_plan_file_is_never_partial_when_apply_is_killed(workspace):
    plan_path = workspace / "kernel_plan.json"
    original = plan_path.read_text()
    for delay in (0.5, 1.5, 3.0):
        proc = tuner(workspace, "--history", str(workspace / "k.db"), "apply_candidate",
                     "--plan", "tensor_plan_iteration2_neighborhood_best", "--dry-run", "false")
        time.sleep(delay)
        proc.kill()
        proc.wait()
        text = plan_path.read_text()
        assert text == original or json.loads(text)["num_warps"] == 6
        assert json.loads(text)
    leftovers = [p.name for p in workspace.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_timestamps_and_values_survive_for_the_dashboard(tmp_path, iteration2):
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    study = history.study("x")
    idx = np.stack([encode(iteration2)] * 3)
    history.write("o", "dev", [], study._study_id, [TrialRecord(r, float(i), {}) for i, r in enumerate(idx)], space=SPACE)
    trials = history.trials("x")
    assert all(t.datetime_start is not None and t.datetime_complete is not None for t in trials)
    assert [t.value for t in trials] == [0.0, 1.0, 2.0]


def test_one_query_reads_agree_with_optuna_and_the_tools_write_nothing(workspace):
    from tuner import service

    ctx = service.Context.create(workspace)
    for seed in (1, 2):
        service.search_plans(ctx, "quick", max_evals=60, seed=seed)
    service.local_neighborhood_search(ctx, fixture="tensor_plan_attempt1_best", max_evals=40, include_final=False)
    seed = json.loads((workspace / "fixtures" / "tensor_plan_iteration2_neighborhood_best.json").read_text())["plan"]
    tiny = {k: [v] for k, v in seed.items()} | {"block_m": [48, 64], "num_warps": [4, 6], "dma_stages": [2, 3]}
    (workspace / "studies" / "tiny.json").write_text(json.dumps({"knobs": tiny}))
    service.bounded_exhaustive_search(ctx, "tiny", include_final=False)           # 8 plans, one range: one member
    history, objective = ctx.history, ctx.objective.name
    names = history.study_names()
    sweeps = {s["study_name"]: s for s in history.sweeps()}
    assert len(names) == 4 and set(names) == set(sweeps)
    tops = history.study_tops(objective, 5)
    for name in [n for n in names if sweeps[n]["strategy"] != "exhaustive"]:
        trials = history.trials(name)
        assert history.outcomes(name) == [(t.user_attrs["plan_hash"], t.value) for t in trials]
        scored = sorted((t.value, t.user_attrs["plan_hash"]) for t in trials if t.value is not None)
        assert tops[name] == (len(scored), [h for _, h in scored[:5]])
    assert history.study_tops("no-such-objective", 5) == {}
    database = workspace / "studies" / "history.db"
    ctx.close()
    before = database.read_bytes()
    ranks = service.rank_experiments(service.Context.create(workspace, tool="rank_experiments"))
    ranking = ranks["ranking"]
    assert "optimum" not in ranks and not any("of_optimum" in r for r in ranking)     # the tensor plan's best is not known
    assert database.read_bytes() == before and {r["study"] for r in ranking} <= set(names)
    finals = [r["final"] for r in ranking]
    assert finals == sorted(finals) and all(r["evaluations"] == sweeps[r["study"]]["evaluations"] for r in ranking)
    assert [r["evaluations"] for r in ranking if r["study"].startswith("exhaustive:")] == [8]     # not its 1 member


def test_a_database_of_another_tools_optuna_studies_reads_as_an_empty_history_and_is_left_as_it_was(workspace):
    database = workspace / "studies" / "theirs.db"
    study = optuna.create_study(study_name="theirs", storage=f"sqlite:///{database}")
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1) ** 2, n_trials=3)
    before = database.read_bytes()
    for tool in ("compare_history", "rank_experiments", "resume_search_history", "report"):
        out = subprocess.run([sys.executable, "-m", "tuner", "--workspace", str(workspace), "--history", str(database), "--json", tool],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0 and "Traceback" not in out.stderr, (tool, out.stderr)
    assert database.read_bytes() == before
    assert json.loads(out.stdout)["sections"] and not History(f"sqlite:///{database}", read_only=True).study_names()


def test_an_incorrect_plans_failed_trial_shows_the_cycles_it_ran_in_and_its_error(tmp_path, iteration2):
    """The dashboard shows a failed trial without a value: one for a plan that ran but failed the verifier keeps what it
    measured among its user attributes, so a person sees how fast it would have been and by how much it missed."""
    from tuner.objectives.builtin import BuiltinObjective
    from tuner.search import Search, Spec
    from tuner.task.benchmark import benchmark_report

    plan = dict(iteration2, accum="sequential", softmax="approx_poly", scratchpad_kb=128)     # fast, and wrong on final
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    search = Search(history, BuiltinObjective(), Spec(strategy="quick", mode="final", seed=0))
    search.evaluate(encode(plan)[None])
    search.flush()
    search.close()
    (trial,) = history.trials(search.name)
    report = benchmark_report(plan, "final", trace=False)
    assert not report["correct"] and trial.state == optuna.trial.TrialState.FAIL and trial.value is None
    assert trial.user_attrs == {"cached": False, "correct": False, "cycles": report["best_cycles"], "max_abs": report["max_abs"],
                                "plan_hash": plan_hash(plan)}
    history.close()


def test_a_long_run_thins_its_trials_for_the_dashboard_and_resumes_exactly(workspace, monkeypatch):
    """A person sees the run's first trials, then every improvement and every 20th evaluation; every evaluation stays a
    member."""
    from tuner import search as search_module
    from tuner import service

    monkeypatch.setattr(search_module, "DASHBOARD_TRIALS", 30)
    ctx = service.Context.create(workspace)
    first = service.search_plans(ctx, "quick", max_evals=150, seed=4)
    history = ctx.history
    outcomes, trials = history.outcomes(first["study"]), history.trials(first["study"])
    assert len(outcomes) >= 150 > len(trials) >= 30                        # every evaluation a member, fewer trials
    improvements, best = set(), np.inf
    for h, v in outcomes:
        if v is not None and v < best:
            improvements.add(h)
            best = v
    kept = {h for i, (h, _) in enumerate(outcomes) if i < search_module.DASHBOARD_TRIALS or i % search_module.THIN_EVERY == 0}
    kept |= improvements
    assert [t.user_attrs["plan_hash"] for t in trials] == [h for h, _ in outcomes if h in kept]
    resumed = service.search_plans(ctx, "quick", max_evals=150, seed=4)   # same budget: nothing new, nothing lost
    assert resumed["new_evaluations"] == 0 and resumed["best"] == first["best"]
    ctx.close()


RETURNED_CONNECTION_FAILS = '''
import sys
from tuner.history import History
history = History(sys.argv[1])
def rollback(connection):                   # what the rollback of a connection returned to the pool meets
    raise {fault}("while the connection was returned")
history.engine.dialect.do_rollback = rollback
try:
    history.engine.connect().close()
except KeyboardInterrupt:
    print("stopped")
'''


@pytest.mark.parametrize(("fault", "stdout", "stderr"), [
    ("KeyboardInterrupt", "stopped\n", ""),
    ("RuntimeError", "", "sqlalchemy.pool.impl.QueuePool: Exception during reset or similar: RuntimeError: while the connection was "
                         "returned\n"),
])
def test_an_error_as_a_connection_is_returned_is_one_line_and_an_interruption_none(tmp_path, fault, stdout, stderr):
    """Ctrl-C landing in the rollback of a connection going back to SQLAlchemy's pool printed the pool's log of it, a
    traceback, before the command's own one line (seen in CI); an interruption propagates, so the pool says nothing of
    it, and any other error there is one line."""
    script = tmp_path / "script.py"
    script.write_text(RETURNED_CONNECTION_FAILS.format(fault=fault))
    out = subprocess.run([sys.executable, str(script), f"sqlite:///{tmp_path / 'history.db'}"], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert (out.returncode, out.stdout, out.stderr) == (0, stdout, stderr)


def test_a_history_that_kept_failing_says_how_long_it_waited_when_one_try_outlasted_the_window(tmp_path):
    """A SQLite file that another process holds locked makes each try wait its busy timeout, longer than the outage
    window: the error says the time waited (it said the window, "30 s", after a busy wait of 60 s)."""
    import sqlalchemy

    file = tmp_path / "history.db"

    class Writer:
        """Writes through an engine whose busy wait (1.5 s) outlasts its history's outage window (0.1 s)."""

        def __init__(self) -> None:
            self.history = History(f"sqlite:///{file}", outage_s=0.1)
            self.engine = sqlalchemy.create_engine(f"sqlite:///{file}", connect_args={"timeout": 1.5})

        @outlasting_outages
        def write(self) -> None:
            with self.engine.begin() as connection:
                connection.exec_driver_sql("INSERT INTO tuner_sweeps (study_name) VALUES ('s')")

    writer = Writer()
    holder = sqlite3.connect(file, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")                       # a writer stopped inside its transaction
    with pytest.raises(HistoryError, match=r"kept failing for \d+ s \(database is locked\)") as raised:
        writer.write()
    assert int(str(raised.value).split("kept failing for ")[1].split(" s")[0]) >= 1, raised.value
    holder.close()
    writer.engine.dispose()
    writer.history.close()


@pytest.mark.parametrize("log_left", [False, True])
def test_a_history_in_a_folder_that_cannot_be_written_is_read_by_the_tools_that_only_read(workspace, tmp_path, log_left):
    folder = tmp_path / "archive"
    folder.mkdir()
    database = folder / "h.db"
    search = tuner(workspace, "--history", str(database), "search_plans", "--strategy", "quick", "--seed", "1", "--max-evals", "20")
    assert search.wait(timeout=300) == 0, search.stderr.read()
    if log_left:                                         # a copy taken while a writer's log held commits not yet in the file
        writer = sqlite3.connect(database)
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("CREATE TABLE later (x)")
        writer.commit()
        (folder / "h.db-shm").unlink()                   # as a copy of the file and its log only would be
    reads = {}
    outputs = {"report": "results/report.html", "export_results": "results/results.t4.json"}     # written to the workspace
    for tool in ("compare_history", "rank_experiments", "resume_search_history", *outputs):
        command = [sys.executable, "-m", "tuner", "--workspace", str(workspace), "--history", str(database), "--json", tool]
        before = sorted(p.name for p in folder.iterdir())
        out = subprocess.run(where_nothing_can_be_written(folder, command), capture_output=True, text=True, timeout=300, cwd=ROOT)
        folder.chmod(0o755)
        assert sorted(p.name for p in folder.iterdir()) == before, "a tool that only reads leaves the folder as it was"
        if log_left:
            assert out.returncode == 2 and "h.db-wal" in out.stderr and "Traceback" not in out.stderr, out.stderr
            continue
        assert out.returncode == 0, out.stderr
        reads[tool] = out.stdout if tool not in outputs else (workspace / outputs[tool]).read_bytes()
        again = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT).stdout
        assert reads[tool] == (again if tool not in outputs else (workspace / outputs[tool]).read_bytes()), tool
    if not log_left:
        assert json.loads(reads["rank_experiments"])["ranking"], "the search is there to rank"
        command = [sys.executable, "-m", "tuner", "--workspace", str(workspace), "--history", str(database), "search_plans",
                   "--max-evals", "25"]
        out = subprocess.run(where_nothing_can_be_written(folder, command), capture_output=True, text=True, timeout=300, cwd=ROOT)
        folder.chmod(0o755)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert f"cannot write history 'sqlite:///{database}'" in out.stderr and "cannot be written" in out.stderr
