"""Cooperating workers: claims, heartbeats and dead workers, real processes on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time

import numpy as np
import pytest
from conftest import ROOT, toy_cache, until
from sqlalchemy import text

from tuner import BLAS_THREADS
from tuner.claims import Worker, audit
from tuner.history import OUTAGE_S, WORKERS, History, Row, TrialRecord
from tuner.objectives.cache import CacheObjective
from tuner.plan import SPACE
from tuner.search import Search, Spec
from tuner.workers import WorkersError, combine, exit_status, slot_environments

PROFILE_SIZE = 1_814_400                                    # iteration3_dev_core


def _worker(history: History, study: str = "s") -> Worker:
    history.study(study)
    return Worker(history, study, {"strategy": "quick", "objective": "obj", "mode": "dev", "target": "space"})


def test_a_plan_is_granted_once_and_the_study_budget_is_shared(tmp_path):
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    a, b = _worker(history), _worker(history)
    assert {a.slot, b.slot} == {0, 1}                       # each worker its own seed stream
    assert a.claim([("plan:x", 1, [0]), ("plan:y", 1, [1])], budget=3).granted == ["plan:x", "plan:y"]
    second = b.claim([("plan:x", 1, [0]), ("plan:z", 1, [2]), ("plan:w", 1, [3])], budget=3)
    assert second.elsewhere == ["plan:x"] and second.granted == ["plan:z"]      # plan:w is over the study's budget
    assert b.evaluations == 3 and history.sweep("s")["evaluations"] == 3
    assert b.claim([("plan:cached", 0, [4])], budget=3).granted == ["plan:cached"]   # a cache hit costs no budget
    history.write("obj", "dev", [Row("x", 5.0, True, 0.0, np.zeros(len(SPACE.knobs), dtype=np.int16))], history.study("s")._study_id,
                  members=[("x", 5.0)])
    assert b.claim([("plan:x", 1, [0])], budget=3).done == ["plan:x"]          # its result and member came in one write
    a.leave()
    taken = b.claim([("plan:y", 1, [1])], budget=3)
    assert taken.granted == ["plan:y"] and b.evaluations == 3                 # a left worker's claim, not counted again
    b.leave()
    history.close()


def test_a_studys_first_worker_searches_with_its_seed_and_every_other_with_a_stream_of_its_own(tmp_path):
    """So that a search resumed alone repeats its proposals, and workers side by side do not all propose the same."""
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    objective = CacheObjective(toy_cache(tmp_path, {(32, 1): 1.0}))
    searches = [Search(history, objective, Spec(strategy="quick", mode="time", seed=7)) for _ in range(3)]
    assert searches[0].seed == 7 and len({s.seed for s in searches}) == 3
    for search in searches:
        search.close()
    history.close()


def test_a_search_takes_the_fastest_evaluation_its_study_holds_as_its_best_not_the_first(tmp_path):
    """A resumed search (and a worker beside others) learns its study's evaluations in the order they came; its best,
    where `quick`'s last climb and `focused` start, is the fastest of them."""
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    objective = CacheObjective(toy_cache(tmp_path, {(32, 1): 3.0, (64, 1): 1.0, (128, 1): 2.0}))
    spec = Spec(strategy="quick", mode="time", seed=7)
    first = Search(history, objective, spec)
    first.evaluate(np.array([objective.space.encode({"bx": bx, "tile": 1}) for bx in (32, 64, 128)]))
    first.flush()
    first.close()
    resumed = Search(history, objective, spec)
    assert resumed.best is not None and resumed.best.value == 1.0
    assert objective.space.decode(resumed.best.idx) == {"bx": 64, "tile": 1}
    resumed.close()
    history.close()


def test_a_claim_is_granted_again_to_its_holder_and_a_taken_over_one_is_held_by_its_taker(tmp_path):
    """A worker that asks again for what it holds (the commit of its claim was lost to an outage, so it retried) gets it,
    counted once; one that takes over a left worker's claim holds it from then on, so that a third does not take it
    too; and a worker that joins takes the lowest slot no live worker holds."""
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    a, b = _worker(history), _worker(history)
    assert a.claim([("plan:x", 1, [0])], budget=5).granted == ["plan:x"]
    assert a.claim([("plan:x", 1, [0])], budget=5).granted == ["plan:x"] and a.evaluations == 1
    a.leave()
    assert b.claim([("plan:x", 1, [0])], budget=5).granted == ["plan:x"]
    c = _worker(history)
    assert (a.slot, b.slot, c.slot) == (0, 1, 0)
    assert c.claim([("plan:x", 1, [0])], budget=5).elsewhere == ["plan:x"]
    b.leave()
    c.leave()
    history.close()


def test_a_range_whose_claim_the_worker_did_not_hear_of_is_its_next_range(tmp_path):
    """A worker asks for a range again without completing the one it has (the commit of its claim was lost to an outage,
    so it retried): it gets the same range back, not the next one, which would leave the first claimed for ever."""
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    worker = _worker(history)
    assert worker.claim_range(100, 10) == (0, 10) and worker.claim_range(100, 10) == (0, 10)
    worker.complete_range(0, [])
    assert worker.claim_range(100, 10) == (10, 20)
    worker.leave()
    history.close()


def test_a_profile_whose_last_range_a_live_worker_scores_is_not_done_until_that_range_is(tmp_path):
    """``False`` (wait: the rest are being scored), then ``None`` (every range is done)."""
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    a, b = _worker(history), _worker(history)
    assert a.claim_range(10, 10) == (0, 10) and b.claim_range(10, 10) is False
    a.complete_range(0, [])
    assert b.claim_range(10, 10) is None
    a.leave()
    b.leave()
    history.close()


def test_the_audit_finds_ranges_that_do_not_tile_the_profile_and_work_not_done(tmp_path):
    """What the workers' tests rely on to catch a range scored twice or never, or left claimed."""
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    worker = _worker(history)
    assert worker.claim_range(40, 10) == (0, 10)
    worker.complete_range(0, [])
    assert worker.claim_range(40, 10) == (10, 20)
    report = audit(history, "s")
    assert (report["range_gaps"], report["range_plans"], report["unfinished"], report["done"]) == (0, 20, 1, 10)
    with history.engine.begin() as connection:              # a range past a gap, as a bug would claim it
        connection.execute(text("insert into tuner_claims (study_name, item, size, worker, state) "
                                "values ('s', 'range:000000000000025', 5, 'w', 'claimed')"))
    report = audit(history, "s")
    assert (report["range_gaps"], report["range_plans"], report["unfinished"]) == (1, 25, 2)
    worker.leave()
    history.close()


def _silent_worker(history: History, name: str, age_s: float) -> None:
    """A worker on another machine whose last heartbeat was ``age_s`` ago, holding plan:x. Its process number is one no
    process here has (a child that ended): that machine's numbers say nothing of this one's processes."""
    ended = subprocess.Popen([sys.executable, "-c", ""])
    ended.wait()
    with history.engine.begin() as connection:
        now = history.now(connection)
        connection.execute(WORKERS.insert().values(worker=name, study_name="s", slot=5, host="elsewhere", local="another-machine",
                                                   pid=ended.pid, heartbeat=now - age_s))
        connection.execute(text("insert into tuner_claims (study_name, item, size, worker, state, plan) "
                                "values ('s', 'plan:x', 1, :w, 'claimed', '[0]')"), {"w": name})


@pytest.mark.parametrize(("outage_s", "age_s", "free"), [(None, 2 * OUTAGE_S + 5, True), (None, 1.0, False),
                                                         (2 * OUTAGE_S, 2 * OUTAGE_S + 5, False), (1.0, 5.0, False)])
def test_a_worker_on_another_host_is_dead_only_after_the_heartbeat_timeout(tmp_path, outage_s, age_s, free):
    """Dead once silent for twice the history's outage window (``--outage-s``), so that a worker that waited out a failing
    database is not taken for dead: a longer window waits longer for the others, a shorter one no less than the default's."""
    history = History(f"sqlite:///{tmp_path / 'h.db'}", outage_s=outage_s)
    history.study("s")
    _silent_worker(history, "elsewhere:1:abc", age_s)
    worker = _worker(history)
    assert worker.unfinished() == (([[0]], 0) if free else ([], 1))      # a dead worker's plan is there to redo
    claimed = worker.claim([("plan:x", 1, [0])], budget=10)
    assert (claimed.granted, claimed.elsewhere) == ((["plan:x"], []) if free else ([], ["plan:x"]))
    worker.leave()


@pytest.mark.parametrize("reaped", [True, False])
def test_a_killed_worker_on_this_machine_is_dead_at_once(tmp_path, reaped):
    """Its process is gone, or a zombie its parent has not waited for yet: either way it runs nothing."""
    db = tmp_path / "h.db"
    script = ("import sys; from tuner.history import History; from tuner.claims import Worker\n"
              f"h = History('sqlite:///{db}'); h.study('s')\n"
              "w = Worker(h, 's', {'strategy': 'quick', 'objective': 'obj', 'mode': 'dev', 'target': 'space'})\n"
              "w.claim([('plan:x', 1, [0, 1])], budget=10); print('claimed', flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert child.stdout.readline().strip() == "claimed"
    history = History(f"sqlite:///{db}")
    worker = _worker(history)
    assert worker.claim([("plan:x", 1, [0, 1])], budget=10).elsewhere == ["plan:x"]      # alive: its heartbeat is fresh
    child.kill()
    if reaped:
        child.wait()
    else:                                                   # ended, and left unreaped: a zombie
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    assert worker.unfinished() == ([[0, 1]], 0)             # no heartbeat timeout to wait for: it runs no more
    assert worker.claim([("plan:x", 1, [0, 1])], budget=10).granted == ["plan:x"]
    worker.leave()
    child.wait()


STOPPED_WORKER = """
import sys
import numpy as np
from tuner.claims import Worker
from tuner.history import History, Row, TrialRecord
from tuner.plan import SPACE

h = History(sys.argv[1])
study = h.study("s")
w = Worker(h, "s", {"strategy": "quick", "objective": "obj", "mode": "dev", "target": "space"})
idx = np.zeros(len(SPACE.knobs), dtype=np.int16)
w.claim([("plan:" + SPACE.hash_idx(idx), 1, idx.tolist())], budget=10)
print("claimed", flush=True)
sys.stdin.readline()                                        # its benchmark run, during which it is stopped
h.write("obj", "dev", [Row(SPACE.hash_idx(idx), 7.0, True, 0.0, idx)], study._study_id, [TrialRecord(idx, 7.0, {})],
        space=SPACE, members=[(SPACE.hash_idx(idx), 7.0)])
w.leave()
print("written", flush=True)
"""


def test_a_worker_stopped_past_the_heartbeat_timeout_does_not_record_again_what_another_redid(tmp_path):
    """A worker stopped (Ctrl-Z, a scheduler's suspend, a paused VM) for longer than the heartbeat timeout is taken for
    dead: another redoes its plan. Woken, it finishes its run and writes its result too; the study recorded the plan
    twice (2 members and 2 trials of 1 plan: measured with 2 workers, one stopped for 75 s, 42 members of 40 plans)."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    child = subprocess.Popen([sys.executable, "-c", STOPPED_WORKER, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             cwd=ROOT)
    assert child.stdout.readline().strip() == "claimed"
    child.send_signal(signal.SIGSTOP)                       # its heartbeat stops with it
    history = History(url)
    taker = _worker(history)
    taker.stale_s = 0.5                                     # (2 x the outage window in use: 60 s)
    assert until(lambda: taker.unfinished()[0] == [[0] * len(SPACE.knobs)], child, limit_s=60)
    idx = np.zeros(len(SPACE.knobs), dtype=np.int16)
    plan = "plan:" + SPACE.hash_idx(idx)
    assert taker.claim([(plan, 1, idx.tolist())], budget=10).granted == [plan]
    history.write("obj", "dev", [Row(SPACE.hash_idx(idx), 6.0, True, 0.0, idx)], history.study("s")._study_id,
                  [TrialRecord(idx, 6.0, {})], space=SPACE, members=[(SPACE.hash_idx(idx), 6.0)])
    child.send_signal(signal.SIGCONT)
    out, _ = child.communicate("\n", timeout=120)
    assert child.returncode == 0 and out.strip() == "written"
    assert audit(history, "s") | {"members": 1, "distinct_members": 1} == audit(history, "s")
    assert [t.value for t in history.trials("s")] == [6.0] and history.outcomes("s") == [(SPACE.hash_idx(idx), 6.0)]
    taker.leave()
    history.close()


def test_a_range_redone_for_a_stopped_worker_keeps_the_first_result(tmp_path):
    """As above for a range of a profile: the stopped worker's result, written last, replaced the one recorded."""
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    stopped, taker = _worker(history), _worker(history)
    assert stopped.claim_range(100, 10) == (0, 10)
    stopped.leave()                                         # gone from the study: its range is free, as a dead worker's
    assert taker.claim_range(100, 10) == (0, 10)
    taker.complete_range(0, [{"idx": [1], "cycles": 6.0, "at": 3}])
    stopped.complete_range(0, [{"idx": [2], "cycles": 7.0, "at": 4}])
    assert taker.range_results() == [{"idx": [1], "cycles": 6.0, "at": 3}]
    taker.leave()
    history.close()


def test_the_heartbeat_keeps_the_worker_alive(tmp_path):
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    history.study("s")
    worker = Worker(history, "s", {"strategy": "quick", "objective": "obj", "mode": "dev", "target": "space"}, heartbeat_s=0.01)

    def beat() -> float:
        with history.engine.connect() as connection:
            return connection.execute(text("select heartbeat from tuner_workers")).scalar_one()

    first, deadline = beat(), time.monotonic() + 60
    while beat() == first and time.monotonic() < deadline:   # waits on the state: the next beat
        time.sleep(0.01)
    assert beat() > first
    worker.leave()
    with history.engine.connect() as connection:
        assert connection.execute(text("select count(*) from tuner_workers")).scalar_one() == 0


def test_a_worker_removed_while_it_was_stopped_registers_again_when_it_wakes(tmp_path, monkeypatch):
    """A worker stopped past the heartbeat timeout is removed by the next worker that joins the study. Woken, it went on
    working unregistered: its claims were any asker's at once, its slot a newcomer's, and its study looked abandoned."""
    import tuner.claims

    url = f"sqlite:///{tmp_path / 'h.db'}"
    script = ("import sys; from tuner.history import History; from tuner.claims import Worker\n"
              "h = History(sys.argv[1]); h.study('s')\n"
              "w = Worker(h, 's', {'strategy': 'quick', 'objective': 'obj', 'mode': 'dev', 'target': 'space'}, heartbeat_s=0.05)\n"
              "print(w.slot, flush=True); sys.stdin.readline(); w.leave()")
    child = subprocess.Popen([sys.executable, "-c", script, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    slot = int(child.stdout.readline())
    history = History(url)

    def registered() -> list[tuple[str, int]]:
        with history.engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text("select host, slot from tuner_workers where pid = :p"), {"p": child.pid})]

    child.send_signal(signal.SIGSTOP)
    monkeypatch.setattr(tuner.claims, "stale_s", lambda _history: -1.0)    # any heartbeat is stale: no timeout to wait for
    newcomer = _worker(history)                             # finds it silent past the timeout: dead, and removed
    assert registered() == [] and newcomer.slot == slot
    child.send_signal(signal.SIGCONT)
    assert until(lambda: registered() != [], child, limit_s=60), "woken, the worker is registered again"
    assert [s for _, s in registered()] == [slot]
    child.communicate("\n", timeout=60)
    newcomer.leave()
    history.close()


def test_worker_environments_and_combined_results():
    envs = slot_environments(3, ["CUDA_VISIBLE_DEVICES={slot}", "TAG=run-{slot}-x"])
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1", "2"] and envs[2]["TAG"] == "run-2-x"
    for bad in ("NOVALUE", "1X=2", "A B=1"):
        with pytest.raises(WorkersError, match="NAME=VALUE"):
            slot_environments(2, [bad])
    top = [{"plan_hash": "b", "dev": 5, "correct": True}, {"plan_hash": "a", "dev": 7, "correct": True}]
    result = combine([{"study": "s", "strategy": "quick", "target": "space", "evaluations": 9, "new_evaluations": 4, "stopped": "x",
                       "top": top, "failed": 4, "failure_reasons": {"infeasible": 2, "c": 2}, "cached_failed": 1, "cached": 3,
                       "seconds": 2.5},
                      {"study": "s", "strategy": "quick", "target": "space", "evaluations": 10, "new_evaluations": 6, "stopped": "y",
                       "top": [{"plan_hash": "c", "dev": 3, "correct": False}, top[1], {"plan_hash": "ab", "dev": 5, "correct": True},
                               {"plan_hash": "d", "dev": 9, "correct": True, "final": 20, "final_correct": True}],
                       "failed": 7, "failure_reasons": {"a": 3, "b": 1, "infeasible": 3}, "cached_failed": 2, "cached": 4, "seconds": 2.0},
                      None], [0, 0, 1], "dev")
    assert result["evaluations"] == 10 and result["new_evaluations"] == 10 and "optimum" not in result
    assert (result["mode"], result["cached"], result["seconds"]) == ("dev", 7, 2.5)      # the longest worker's seconds
    assert (result["target"], result["stopped"]) == ("space", "x; y")          # each worker's reason, once
    assert result["failed"] == 11 and result["cached_failed"] == 3
    assert result["failure_reasons"] == {"infeasible": 5, "a": 3, "c": 2}         # the three most common, as a search's
    assert [e["plan_hash"] for e in result["top"]] == ["d", "ab", "b", "a", "c"]    # checked first; a tie by plan hash
    assert result["per_worker"][2] == {"slot": 2, "exit": 1, "new_evaluations": None, "stopped": None}
    replayed = [{"study": "s", "strategy": "quick", "target": "space", "evaluations": 5, "new_evaluations": n, "stopped": "x",
                 "top": [{"plan_hash": h, "time": t, "correct": True}], "failed": 0, "failure_reasons": {}, "cached_failed": 0,
                 "cached": 0, "seconds": 1.0, "optimum": 2.0} for n, h, t in ((2, "e", 3.0), (3, "f", 2.5))]
    assert (combine(replayed, [0, 0], "time")["of_optimum"], combine(replayed[:1], [0], "time")["of_optimum"]) == (0.8, 0.6667)


def test_the_workers_exit_status_is_the_first_failure_else_whether_any_found_a_value():
    """As a shell says it (128 + N for signal N); a worker that exited 1 having run nothing fails nothing."""
    found, nothing = {"best": {"plan_hash": "a"}}, {"best": None}
    assert exit_status([0, -signal.SIGKILL, 2], [found, None, None], True) == 137
    assert exit_status([1, 0], [nothing, found], True) == 0 and exit_status([1, 1], [nothing, nothing], False) == 1
    assert exit_status([1, 0], [None, found], True) == 1          # exited 1 without a result: a failure of its own
    assert exit_status([0, 0], [found, found], True) == 0 and exit_status([0], [nothing], False) == 1


# --- real processes -------------------------------------------------------------------------------

def _tuner(workspace, history: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tuner", "--workspace", str(workspace), "--history", history, "--json", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def _one(history: History, query: str) -> object:
    with history.engine.connect() as connection:
        return connection.execute(text(query)).scalar_one()


def _rows(history: History, query: str) -> list:
    with history.engine.connect() as connection:
        return connection.execute(text(query)).all()


def _assert_consistent(history: History, study: str, budget: int, killed: tuple[subprocess.Popen, ...] = ()) -> None:
    """Every claim done, one member per claim and no plan twice, the budget spent exactly, contiguous trials, and
    only ``killed`` workers still registered."""
    report = audit(history, study)
    assert report["unfinished"] == 0 and report["claimed"] == report["counted"] == budget
    assert report["plan_claims"] == report["members"] == report["distinct_members"] >= budget
    assert _one(history, "select count(*) from tuner_evaluations where mode = 'dev'") == budget     # each plan scored once
    numbers = sorted(t.number for t in history.trials(study))
    assert numbers == list(range(len(numbers))) and numbers
    left = {pid for (pid,) in _rows(history, "select pid from tuner_workers")}
    assert left <= {p.pid for p in killed}                                  # every other worker deregistered


def test_workers_option_runs_one_study_in_n_processes(workspace):
    db = f"sqlite:///{workspace / 'h.db'}"
    proc = _tuner(workspace, db, "search_plans", "--max-evals", "120", "--seed", "2", "--workers", "3",
                  "--worker-env", "TUNER_TEST_SLOT={slot}")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err
    result = json.loads(out)
    assert result["workers"] == 3 and [w["exit"] for w in result["per_worker"]] == [0, 0, 0]
    history = History(db)
    assert result["new_evaluations"] == result["evaluations"] == 120      # the sum of the workers' evaluations: none twice
    _assert_consistent(history, result["study"], 120)
    # every worker saw the whole study before it ended: its best finalist, correct in final first (a run may have none)
    best = _rows(history, "select d.best_cycles, f.correct from tuner_evaluations d join tuner_evaluations f on f.plan_hash = d.plan_hash "
                          "and f.mode = 'final' where d.mode = 'dev' and d.correct = 1 order by f.correct desc, d.best_cycles limit 1")
    assert (result["best"]["dev"], result["best"]["final_correct"]) == (best[0][0], bool(best[0][1]))
    history.close()


def test_each_worker_shows_its_progress_on_a_line_of_its_own_in_a_terminal(workspace):
    """The workers' bars shared one line of the terminal, each overwriting the others' counts and bests."""
    terminal, end = pty.openpty()
    fcntl.ioctl(end, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))     # a terminal of 120 columns
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "--workspace", str(workspace), "--history", f"sqlite:///{workspace / 'h.db'}",
                             "search_plans", "--max-evals", "60", "--workers", "2"], stdout=subprocess.DEVNULL, stderr=end, cwd=ROOT)
    os.close(end)
    shown = b""
    with contextlib.suppress(OSError):                      # EIO: every process holding the terminal has ended
        while select.select([terminal], [], [], 300)[0] and (chunk := os.read(terminal, 65536)):   # at most 300 s of silence
            shown += chunk
    os.close(terminal)
    assert proc.wait(timeout=600) == 0, shown[-2000:]
    lines = {name: shown.count(name.encode()) for name in ("quick worker 0:", "quick worker 1:")}
    assert all(lines.values()) and b"\n\rquick worker 1:" in shown, lines       # worker 1 one line below worker 0


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("3", "3")])
def test_a_tuner_process_and_its_workers_get_one_blas_thread_unless_the_environment_says(given, expected):
    """Processes sharing a machine, each with a BLAS thread per core, slow one another down many times over."""
    env = {name: value for name, value in os.environ.items() if name not in BLAS_THREADS}
    env.update({"OPENBLAS_NUM_THREADS": given} if given else {})
    code = ("import os, tuner, numpy\nfrom tuner.workers import slot_environments\n"
            "print(os.environ['OPENBLAS_NUM_THREADS'], slot_environments(2, [])[1]['OPENBLAS_NUM_THREADS'], os.environ['OMP_NUM_THREADS'])")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [expected, expected, "1"]


@pytest.mark.parametrize("command", ["search_plans", "run"])
def test_a_bad_worker_env_is_refused_before_any_worker_starts(workspace, command):
    proc = _tuner(workspace, f"sqlite:///{workspace / 'h.db'}", command, "--workers", "2", "--worker-env", "1BAD=x")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and out == "" and "NAME=VALUE" in err and err.count("\n") == 1, err
    assert not (workspace / "h.db").exists() and not (workspace / "results").exists()


@pytest.mark.parametrize(("command", "piped"), [("search_plans", "cache"), ("run", "cache"), ("run", "space")])
def test_a_file_given_as_a_pipe_is_refused_before_any_worker_starts(tmp_path, command, piped):
    """Each worker reads the problem's files again, and a pipe gives what it holds to one reader: the workers read the
    pipe that is their stdin as the cache, waiting on it for ever. A pipe is refused, by name, before anything is read."""
    cache = toy_cache(tmp_path, {(32, 1): 1.0, (64, 2): 2.0}, "toy.json")
    space = tmp_path / "toy.t1.json"
    space.write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "bx", "Type": "int", "Values": "[32, 64, 128]"}, {"Name": "tile", "Type": "int", "Values": "[1, 2]"}]}}))
    given = {"cache": f"cache:{cache}", "space": str(space)} | {piped: "cache:/dev/stdin" if piped == "cache" else "/dev/stdin"}
    out = subprocess.run([sys.executable, "-m", "tuner", "--workspace", str(tmp_path), "--objective", given["cache"], "--space",
                          given["space"], command, "--workers", "2"], input=(cache if piped == "cache" else space).read_text(),
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert (out.returncode, out.stdout) == (2, ""), out.stderr
    assert out.stderr == (f"tuner {command}: error: {piped} file '/dev/stdin' is a pipe or a device, which only one process can "
                          "read, and every worker of --workers reads it: save it to a file\n")
    assert not (tmp_path / "studies").exists() and not (tmp_path / "results").exists()


def test_a_worker_that_fails_fails_the_main_job_with_one_line_of_its_own(workspace):
    proc = _tuner(workspace, f"sqlite:///{workspace / 'h.db'}", "run", "--workers", "2", "--worker-env", "PYTHONHOME=/nowhere/{slot}")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and out == "", err                       # each worker's Python said why before it
    assert err.splitlines()[-1] == ("tuner run: failed: WorkerFailed: worker 0 of local_neighborhood_search ended with exit status 1, "
                                    "for the reason it gave above")


def test_a_search_whose_every_worker_failed_prints_no_result(workspace):
    """Each worker said why; the combined result of none (study, strategy and best all null) was printed beneath."""
    proc = _tuner(workspace, f"sqlite:///{workspace / 'h.db'}", "search_plans", "--workers", "2", "--worker-env",
                  "PYTHONHOME=/nowhere/{slot}")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and out == "" and "/nowhere/0" in err and "/nowhere/1" in err, (out, err)


def test_a_history_that_cannot_be_opened_is_refused_once_before_any_worker_starts(workspace):
    """Each worker refused it, on its own line, under an empty combined result."""
    (workspace / "h.db").write_text("not a database\n")
    proc = _tuner(workspace, f"sqlite:///{workspace / 'h.db'}", "search_plans", "--workers", "3")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and out == "" and err.count("\n") == 1 and "file is not a database" in err, err
    assert (workspace / "h.db").read_text() == "not a database\n"


def test_the_main_jobs_summary_says_that_workers_ran_its_searches(tmp_path):
    toy_cache(tmp_path, {(bx, tile): bx / 32 + tile for bx in (32, 64, 128) for tile in (1, 2)})
    out = subprocess.run([sys.executable, "-m", "tuner", "--workspace", str(tmp_path), "--objective", "cache:toy.json.gz",
                          "run", "--workers", "2"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    searches = [line for line in out.stdout.splitlines() if line.startswith(("  checkpoint", "  quick"))]
    assert len(searches) == 2 and all(" by 2 workers, " in line for line in searches), out.stdout


def test_a_worker_of_the_main_job_stopped_by_a_signal_of_its_own_leaves_its_search_to_the_others(workspace):
    """Only a worker that failed fails ``run --workers``: one that a signal to it alone stopped saved its progress, and
    the other takes over its claims."""
    url = f"sqlite:///{workspace / 'h.db'}"
    history = History(url)
    proc = _tuner(workspace, url, "run", "--workers", "2", "--time-s", "120")
    deadline, victim = time.monotonic() + 300, None
    while victim is None and time.monotonic() < deadline and proc.poll() is None:
        rows = _rows(history, "select worker from tuner_claims where state = 'claimed' and item like 'range:%'")
        for pid in {int(worker.split(":")[1]) for (worker,) in rows} - {proc.pid}:
            with contextlib.suppress(ProcessLookupError):     # it may have finished since
                os.kill(pid, signal.SIGSTOP)                   # held still: it cannot finish its claim meanwhile
                if _rows(history, f"select 1 from tuner_claims where state = 'claimed' and worker like '%:{pid}:%'"):
                    victim = pid
                    os.kill(pid, signal.SIGTERM)
                os.kill(pid, signal.SIGCONT)
            if victim:
                break
    out, err = proc.communicate(timeout=600)
    assert victim is not None and proc.returncode == 0, err[-2000:]
    assert "terminated by SIGTERM; it saved its progress" in err and json.loads(out)["best"]["dev"] == 178866, err[-2000:]
    history.close()


@pytest.mark.parametrize(("command", "named"), [
    (("bounded_exhaustive_search", "--profile", "nope"), "unknown profile 'nope'"),
    (("local_neighborhood_search", "--fixture", "nope"), "unknown fixture 'nope'"),
    (("local_neighborhood_search", "--plan", "nope.json"), "no plan file 'nope.json' in the workspace"),
])
def test_a_bad_argument_is_refused_once_before_any_worker_starts(workspace, command, named):
    """It used to be refused by each worker, on its own line, under an empty combined result."""
    proc = _tuner(workspace, f"sqlite:///{workspace / 'h.db'}", *command, "--workers", "3")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and out == "" and err.count("\n") == 1 and named in err, err
    assert not (workspace / "h.db").exists()


def _kill_claim_holders(history: History, processes: list[subprocess.Popen], count: int, least: int) -> list[subprocess.Popen]:
    """Once the study has ``least`` claims, ``kill -9`` ``count`` of ``processes`` that hold a claim not yet done."""
    pids = {p.pid: p for p in processes}
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            rows = _rows(history, "select worker, state from tuner_claims")
        except Exception:                                   # tables not created yet
            rows = []
        holders = {int(w.split(":")[1]) for w, state in rows if state == "claimed"} & pids.keys()
        if len(rows) >= least and len(holders) >= count:
            victims = [pids[pid] for pid in sorted(holders)[:count]]
            for victim in victims:
                victim.send_signal(signal.SIGKILL)
            return victims
        time.sleep(0.01)
    raise AssertionError("the workers never held enough claims at once")


def _run_with_kills(history: History, command: list[str], workers: int, kills: int) -> tuple[list[dict], list[subprocess.Popen]]:
    """``workers`` processes of the same search; ``kills`` of them killed with -9 while they hold claims. The
    survivors' results and the killed processes."""
    processes = [_tuner(*command) for _ in range(workers)]
    killed = _kill_claim_holders(history, processes, kills, least=8 + _one(history, "select count(*) from tuner_claims"))
    outputs = {p.pid: p.communicate(timeout=600) for p in processes}
    survivors = [p for p in processes if p not in killed]
    assert [p.returncode for p in killed] == [-signal.SIGKILL] * kills
    assert [p.returncode for p in survivors] == [0] * (workers - kills), [outputs[p.pid][1][-2000:] for p in survivors]
    assert all("Traceback" not in outputs[p.pid][1] for p in survivors)
    return [json.loads(outputs[p.pid][0]) for p in survivors], killed


def _done_by(history: History, processes: list[subprocess.Popen], kind: str) -> int:
    """Evaluations the ``processes`` recorded before they were killed: the sizes of their done claims of ``kind``."""
    pids = {p.pid for p in processes}
    rows = _rows(history, f"select worker, size from tuner_claims where item like '{kind}:%' and state = 'done'")
    return sum(size for worker, size in rows if int(worker.split(":")[1]) in pids)


def test_workers_on_postgres_finish_the_study_of_killed_ones(postgres_url, workspace):
    history = History(postgres_url)
    budget = 120
    results, killed = _run_with_kills(history, [workspace, postgres_url, "search_plans", "--max-evals", str(budget), "--seed", "4"], 6, 2)
    _assert_consistent(history, results[0]["study"], budget, tuple(killed))
    assert sum(r["new_evaluations"] for r in results) + _done_by(history, killed, "plan") == budget    # none twice, none lost

    results, killed = _run_with_kills(history, [workspace, postgres_url, "bounded_exhaustive_search", "--profile", "iteration3_dev_core"],
                                      6, 2)
    report = audit(history, results[0]["study"])
    assert report["unfinished"] == 0 and report["range_gaps"] == 0 and report["range_plans"] == PROFILE_SIZE  # the profile, tiled once
    assert sum(r["new_evaluations"] for r in results) + _done_by(history, killed, "range") == PROFILE_SIZE
    assert {r["stopped"] for r in results} == {"exhausted"} and len({r["best"]["plan_hash"] for r in results}) == 1
    assert results[0]["best"]["dev"] == 211691                                              # the profile's known best
    history.close()
