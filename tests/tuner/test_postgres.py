"""PostgreSQL as a first-class history: a real throwaway server (tests/conftest.py), the same code path as SQLite."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, toy_cache, until
from postgres_cluster import Cluster
from sqlalchemy import select

from tuner import history as history_module
from tuner import service
from tuner.claims import audit
from tuner.history import SWEEPS, History, HistoryUnavailable, Row, TrialRecord, outlasting_outages
from tuner.objectives.cache import CacheObjective
from tuner.plan import SPACE, encode, plan_hash
from tuner.search import Search, Spec
from tuner.strategies import STRATEGIES


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


def test_a_url_whose_password_holds_braces_opens_the_history_it_names(postgres_url, iteration2):
    """Optuna fills {SCHEMA_VERSION} into its storage URL with str.format: a password with braces (the server trusts
    every local user here, so any password connects) ended in a KeyError from Optuna."""
    url = postgres_url.replace("postgres@", "postgres:p{x}@", 1)
    assert url != postgres_url
    history = History(url)
    history.study("s")
    assert history.study_names() == ["s"]
    history.close()


def test_a_run_killed_at_a_time_limit_is_replaced_by_its_measurement_on_postgres(postgres_url, iteration2):
    history = History(postgres_url)
    idx, h = encode(iteration2), plan_hash(iteration2)
    history.write("obj", "time", [Row(h, None, False, None, idx, timed_out_s=0.5)])
    assert history.timed_out("obj", "time") == {h: 0.5} and history.cached("obj", "time")[h].cycles is None
    history.write("obj", "time", [Row(h, 2.0, True, None, idx)], replaced=[h])               # measured under a longer limit
    assert history.timed_out("obj", "time") == {} and history.cached("obj", "time")[h].cycles == 2.0
    history.write("obj", "time", [Row(h, None, False, None, idx, timed_out_s=0.1)])           # another process's: the time stays
    assert history.cached("obj", "time")[h].cycles == 2.0
    history.close()


def test_a_postgres_url_as_managed_services_write_it_names_the_same_history(postgres_url, tmp_path):
    """``postgres://`` is libpq's other name for the scheme (a managed service's DATABASE_URL); SQLAlchemy knows
    no dialect of that name, so the command ended with "Can't load plugin: sqlalchemy.dialects:postgres"."""
    for url in (postgres_url.replace("postgresql+psycopg://", "postgres://"), postgres_url.replace("postgresql+", "postgres+")):
        _assert_a_search_through(url, lands_in=postgres_url, tmp_path=tmp_path)


def _assert_a_search_through(url: str, lands_in: str, tmp_path: Path) -> None:
    """A search of a toy cache with ``--history url`` writes its trials to the history ``lands_in``."""
    cache = toy_cache(tmp_path, {(32, 1): 1.0, (64, 1): 0.5})
    out = subprocess.run([sys.executable, "-m", "tuner", "--objective", f"cache:{cache}", "--history", url, "--json",
                          "search_plans", "--max-evals", "2"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    history = History(lands_in)
    assert history.trials(json.loads(out.stdout)["study"]), "the search's trials are in the history the URL names"
    history.close()


def test_a_url_listing_several_hosts_as_libpq_does_uses_the_first_that_answers(postgres_url, tmp_path):
    """``postgresql://u@h1:p1,h2:p2/db``, as a high-availability service gives it (the primary is whichever answers):
    SQLAlchemy read ``p1,h2:p2`` as a port and the command ended with "not a database URL"."""
    with socket.socket() as closed:                                   # a port that nothing listens on: refused at once
        closed.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{closed.getsockname()[1]}"
    scheme, _, rest = postgres_url.partition("://")
    user, _, live = rest.partition("/")[0].partition("@")
    url = postgres_url.replace(f"@{live}/", f"@{dead},{live}/") + "?application_name=tuner-test"
    assert history_module.resolve_url(url) == (f"{scheme}://{user}@/{postgres_url.rpartition('/')[2]}"
                                               f"?host={dead}&host={live}&application_name=tuner-test")
    _assert_a_search_through(url, lands_in=postgres_url, tmp_path=tmp_path)


def test_a_t4_file_whose_objective_has_a_long_name_replays_on_postgres(postgres_url, tmp_path):
    """The objective of a T4 file that measures no time names its mode, which PostgreSQL holds to the history's
    length (SQLite does not): a longer name stopped the first write with 'value too long for type character varying'."""
    results = [{"configuration": {"bx": bx}, "times": {}, "invalidity": "correct", "correctness": 1,
                "measurements": [{"name": "nvml_energy_total_joules", "value": value, "unit": "J"}],
                "objectives": ["nvml_energy_total_joules"]} for bx, value in [(32, 3.0), (64, 2.0), (128, 1.0)]]
    (tmp_path / "energy.json").write_text(json.dumps({"schema_version": "1.0.0", "results": results}))
    out = subprocess.run([sys.executable, "-m", "tuner", "--objective", "cache:energy.json", "--history", postgres_url, "--json",
                          "search_plans", "--max-evals", "3"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert (result["mode"], result["best"]["plan"], result["of_optimum"]) == ("nvml_energy_tota", {"bx": 128}, 1.0)


def test_a_programs_measurements_carry_over_to_a_grown_space_on_postgres(postgres_url, tmp_path):
    log = tmp_path / "runs.log"
    (tmp_path / "bench.py").write_text(f"import json, sys\nc = json.load(sys.stdin)\nopen({str(log)!r}, 'a').write('x\\n')\n"
                                       "print(c['bx'] / 32)\n")
    for values in ([32, 64], [16, 32, 64]):
        (tmp_path / "grid.t1.json").write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [{"Name": "bx", "Values": values}]}}))
        out = subprocess.run([sys.executable, "-m", "tuner", "--workspace", str(tmp_path), "--objective", "command:bench.py",
                              "--space", "grid.t1.json", "--history", postgres_url, "--json", "bounded_exhaustive_search",
                              "--profile", "all"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert out.returncode == 0 and json.loads(out.stdout)["best"]["plan"] == {"bx": values[0]}, out.stderr
    assert "the history holds 2 measurements of this program" in out.stderr and len(log.read_text().split()) == 3


def test_a_failures_reason_is_kept_and_picks_it_to_be_measured_again_on_postgres(postgres_url, tmp_path):
    """The history keeps why each configuration failed; PostgreSQL's text refuses the NUL byte that a program's stderr
    may hold, which would have ended the search's write."""
    broken = tmp_path / "broken"
    (tmp_path / "bench.py").write_text(f"import json, os, sys\nc = json.load(sys.stdin)\nif c['bx'] == 64 and os.path.exists("
                                       f"{str(broken)!r}):\n    sys.stderr.write('no device\\0'); sys.exit(1)\nprint(c['bx'] / 32)\n")
    (tmp_path / "grid.t1.json").write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [{"Name": "bx", "Values": [32, 64]}]}}))

    def tuner(*args: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "tuner", "--workspace", str(tmp_path), "--objective", "command:bench.py",
                              "--space", "grid.t1.json", "--history", postgres_url, "--json", *args],
                             capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    broken.touch()
    assert tuner("bounded_exhaustive_search", "--profile", "all")["failed"] == 1
    broken.unlink()
    again = tuner("remeasure_failures", "--reason", "no device\\0")
    assert again["new_evaluations"] == 1 and again["best"]["plan"] == {"bx": 64} and again["best"]["time"] == 2.0


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


GATED = """import json, os, sys, time
c = json.load(sys.stdin)
gate = {gate!r}
runs = len(os.listdir(gate)) - os.path.exists(os.path.join(gate, "go"))
open(os.path.join(gate, f"run-{{runs}}"), "w").close()
if runs == 4:                                           # the fifth run waits for the test: the server goes away meanwhile
    while not os.path.exists(os.path.join(gate, "go")):
        time.sleep(0.01)
print(json.dumps({{"time": 1.0 + abs(c["bx"] - 96) / 32 + abs(c["tile"] - 4)}}))
"""


def _gated_search(tmp_path: Path, url: str, outage_s: float | None = None) -> subprocess.Popen:
    """A search whose program's fifth run waits for the file ``gate/go``; ``outage_s``: how long the tuner waits out a
    failing history (``--outage-s``; default: the tuner's)."""
    kernel, gate = tmp_path / "kernel", tmp_path / "gate"
    kernel.mkdir(exist_ok=True)
    gate.mkdir(exist_ok=True)
    space = {"ConfigurationSpace": {"TuningParameters": [{"Name": "bx", "Values": [32, 64, 96, 128, 160]},
                                                         {"Name": "tile", "Values": [1, 2, 4, 8]}]}}
    (kernel / "space.t1.json").write_text(json.dumps(space))
    (kernel / "bench.py").write_text(GATED.format(gate=str(gate)))
    argv = ["--history", url, *(["--outage-s", str(outage_s)] if outage_s is not None else []), "--objective", "command:bench.py",
            "--space", "space.t1.json", "search_plans", "--strategy", "quick", "--max-evals", "16", "--seed", "3", "--json"]
    return subprocess.Popen([sys.executable, "-m", "tuner", *argv], cwd=kernel, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _fifth_run_measuring(tmp_path: Path, search: subprocess.Popen) -> None:
    """Wait until the search's fifth run is measuring (a state: it waits for ``gate/go``)."""
    until((tmp_path / "gate" / "run-4").exists, search)
    assert search.poll() is None, search.communicate()


def _server_goes_away(tmp_path: Path, search: subprocess.Popen, server: Cluster) -> None:
    """Once the search's fifth run is measuring, stop the server and let the run end: the search's next read or write finds
    the history gone."""
    _fifth_run_measuring(tmp_path, search)
    server.stop()
    (tmp_path / "gate" / "go").touch()


def _assert_whole(url: str, result: dict) -> None:
    """The search scored its whole budget, and its history holds each plan once with nothing left claimed."""
    assert result["evaluations"] == 16 and result["best"]["time"] == 1.0
    history = History(url)
    assert audit(history, result["study"]) == {**audit(history, result["study"]), "unfinished": 0, "plan_claims": 16, "members": 16,
                                               "distinct_members": 16, "claimed": 16, "counted": 16}
    assert history.sweep(result["study"])["state"] == "stopped"
    history.close()


def test_a_search_waits_out_a_postgres_restart_and_loses_nothing(postgres_server, postgres_url, tmp_path):
    """The server restarts (maintenance, a failover) while a search scores a plan: its next claim or write is tried again
    until the server answers, the log says so, and the search ends as if nothing had happened."""
    search = _gated_search(tmp_path, postgres_url)
    try:
        _server_goes_away(tmp_path, search, postgres_server)
        line = search.stderr.readline()
        assert "failed (" in line and "trying again for up to 30 s" in line, line
    finally:
        postgres_server.start()
    out, err = search.communicate(timeout=600)
    assert search.returncode == 0 and "Traceback" not in err, err
    assert "answers again" in err
    _assert_whole(postgres_url, json.loads(out))


def test_a_history_gone_for_good_ends_the_search_with_one_line_and_the_same_command_resumes(postgres_server, postgres_url, tmp_path):
    search = _gated_search(tmp_path, postgres_url, outage_s=1.0)
    try:
        _server_goes_away(tmp_path, search, postgres_server)
        out, err = search.communicate(timeout=600)
    finally:
        postgres_server.start()
    assert search.returncode == 1 and out == "" and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("tuner search_plans: failed: HistoryError: the history 'postgresql+psycopg://postgres@127.0.0.1:"), last
    assert "kept failing for 1 s" in last and "the same command resumes" in last
    resumed = _gated_search(tmp_path, postgres_url)
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    _assert_whole(postgres_url, json.loads(out))


def test_a_password_in_the_history_url_is_never_shown(postgres_url, tmp_path):
    """The throwaway server trusts every connection, so a password in the URL is accepted and ignored: what matters is that
    no line the tuner prints shows it."""
    url = postgres_url.replace("postgres@", "postgres:hunter2@")
    search = _gated_search(tmp_path, url)
    _fifth_run_measuring(tmp_path, search)
    search.send_signal(signal.SIGTERM)
    _, err = search.communicate(timeout=600)
    assert search.returncode == 128 + signal.SIGTERM, err
    assert "progress is saved in postgresql+psycopg://postgres:***@127.0.0.1" in err and "hunter2" not in err


def test_a_search_holds_no_connection_for_optunas_storage(postgres_url, tmp_path):
    """A server takes few connections (PostgreSQL's default is 100), and each worker of a study holds its own: the search's
    and its heartbeat's (two at most). Optuna's storage names and creates the study once a run, so it keeps none open."""
    import psycopg

    records = {(bx, tile): 1.0 + bx / 64 + tile for bx in (32, 64, 128) for tile in (1, 2)}
    search = Search(History(postgres_url), CacheObjective(toy_cache(tmp_path, records)),
                    Spec(strategy="quick", mode="time", max_evals=6, seed=0))
    STRATEGIES["quick"](search)
    server, database = postgres_url.rsplit("/", 1)
    with psycopg.connect(f"{server.replace('postgresql+psycopg', 'postgresql')}/{database}", autocommit=True) as connection:
        held = connection.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                                  (database,)).fetchone()[0]
    assert held == search.history.engine.pool.checkedin() <= 2           # every one the search's, pooled
    search.history.close()


def test_the_connections_probe_a_silent_server_unless_the_url_says_otherwise(postgres_url):
    """A server's host that died (or a network cut) left a worker waiting on its connection for hours: for an answer to a
    query in flight, and 15 minutes for the acknowledgement of one sent. With these, TCP gives up within a minute, and the
    history's outage handling takes over (measured with a server in a network namespace whose link went down)."""
    dead = history_module.DEAD_SERVER
    for url, idle in ((postgres_url, str(dead["keepalives_idle"])), (f"{postgres_url}?keepalives_idle=7", "7")):
        history = History(url)
        try:
            with history.engine.connect() as connection:
                parameters = connection.connection.dbapi_connection.info.get_parameters()
        finally:
            history.close()
        assert {name: parameters[name] for name in ("keepalives", "keepalives_idle", "tcp_user_timeout", "connect_timeout")} == {
            "keepalives": "1", "keepalives_idle": idle, "tcp_user_timeout": str(dead["tcp_user_timeout"]), "connect_timeout": "10"}


def test_a_server_that_accepts_and_never_answers_is_given_up_after_the_connect_timeout(monkeypatch):
    """psycopg waits 130 s for a server that takes the connection and says nothing (a hung server, a wrong port behind a
    proxy), and the command says nothing meanwhile; the history gives it ``CONNECT_S`` unless the URL sets its own."""
    monkeypatch.setattr(history_module, "CONNECT_S", 1)
    with socket.create_server(("127.0.0.1", 0)) as silent:
        url = f"postgresql+psycopg://tuner@127.0.0.1:{silent.getsockname()[1]}/history"
        with pytest.raises(HistoryUnavailable, match=r"cannot open history .*connection timeout expired"):
            History(url)


def test_a_process_stopped_inside_a_transaction_holds_the_study_until_the_idle_limit(postgres_url, tmp_path, monkeypatch):
    """A worker stopped (Ctrl-Z, a job scheduler's suspend) or cut off while it holds a study's lock made every other
    worker of the study wait, for the two hours of the server's TCP keepalive when its host was gone. The server now ends
    such a session after ``IDLE_IN_TRANSACTION_S`` (unless the server, the database or the URL sets a limit), the other
    worker goes on, and the stopped one, when it goes on, runs its transaction again on a new connection. The stopped
    process is this test's history, with the limit at 1 s; the worker is a real command."""
    cache = toy_cache(tmp_path, {(bx, tile): 1.0 + bx / 64 + tile for bx in (32, 64, 128) for tile in (1, 2)})
    command = [sys.executable, "-m", "tuner", "--objective", f"cache:{cache}", "--history", postgres_url, "--json",
               "search_plans", "--seed", "0", "--max-evals"]
    first = subprocess.run([*command, "2"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    study = json.loads(first.stdout)["study"]

    class Stopped:
        """Holds the study's lock in its first try until the worker has finished, then reads the study's evaluations."""

        def __init__(self) -> None:
            self.history, self.said, self.tries, self.worker = History(postgres_url, log=self.said_line), [], 0, None

        def said_line(self, line: str) -> None:
            self.said.append(line)

        @outlasting_outages
        def evaluations(self) -> int:
            self.tries += 1
            with self.history.begin() as connection:
                assert self.history.study_lock(connection, study)
                if self.worker is None:                          # the worker waits for the lock until the server ends this
                    self.worker = subprocess.run([*command, "6"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
                return connection.execute(select(SWEEPS.c.evaluations).where(SWEEPS.c.study_name == study)).scalar_one()

    monkeypatch.setattr(history_module, "IDLE_IN_TRANSACTION_S", 1.0)
    stopped = Stopped()
    assert stopped.evaluations() == 6 and stopped.tries == 2
    assert stopped.worker.returncode == 0 and "Traceback" not in stopped.worker.stderr, stopped.worker.stderr
    assert json.loads(stopped.worker.stdout)["evaluations"] == 6
    assert "idle-in-transaction timeout" in stopped.said[0] and "answers again" in stopped.said[-1], stopped.said
    stopped.history.close()


def test_the_server_ends_the_sessions_of_stuck_clients_unless_told_otherwise(postgres_url):
    """Each session of the history (the tuner's engine and Optuna's) asks the server to end it once idle inside a
    transaction for a minute, and to probe a silent client as the client probes the server, so that a dead host's
    sessions (their connection slots, their locks) end within a minute, not two hours; a value that the server, the
    database, the role or the URL sets stands."""
    import psycopg

    names = ("idle_in_transaction_session_timeout", "tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count")

    def limits(url: str) -> set[tuple[str, ...]]:
        history, shown = History(url), set()
        for engine in (history.engine, history.storage.engine):
            with engine.connect() as connection:
                shown.add(tuple(connection.exec_driver_sql(f"SHOW {name}").scalar_one() for name in names))
        history.close()
        return shown

    assert limits(postgres_url) == {("1min", "20", "10", "3")}
    assert limits(f"{postgres_url}?options=-c%20tcp_keepalives_idle%3D300") == {("1min", "300", "10", "3")}
    server, database = postgres_url.rsplit("/", 1)
    with psycopg.connect(f"{server.replace('postgresql+psycopg', 'postgresql')}/{database}", autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{database}" SET idle_in_transaction_session_timeout = 5000')
    assert limits(postgres_url) == {("5s", "20", "10", "3")}


def test_a_server_out_of_connection_slots_is_one_line_wherever_opening_the_history_meets_it(postgres_url, workspace):
    """Opening a history takes a few connections at once: the tuner's own, then Optuna's storage. A role (or a server)
    with no slot left for one of them is refused by the server, and the command says so in one line and exits 2, at
    whichever of them it happens (Optuna's printed a traceback of its own error, which hides the server's words). Three
    are enough to open the history and search (four were: the tuner's tables were made on a connection of their own),
    so more workers starting together fit a server's slots."""
    import uuid

    import psycopg

    server, database = postgres_url.rsplit("/", 1)
    role = f"r_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{server.replace('postgresql+psycopg', 'postgresql')}/{database}", autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")                     # a superuser is not held to a connection limit
        admin.execute(f'ALTER DATABASE "{database}" OWNER TO {role}')
        admin.execute(f"ALTER SCHEMA public OWNER TO {role}")
        codes = {}
        for limit in (1, 2, 3):
            admin.execute(f"ALTER ROLE {role} CONNECTION LIMIT {limit}")
            out = subprocess.run([sys.executable, "-m", "tuner", "--workspace", str(workspace), "--history",
                                  postgres_url.replace("postgres@", f"{role}@"), "search_plans", "--max-evals", "5"],
                                 capture_output=True, text=True, timeout=600)
            codes[limit] = out.returncode
            assert out.returncode in (0, 2) and "Traceback" not in out.stderr, out.stderr
            if out.returncode == 2:
                assert len(out.stderr.splitlines()) == 1 and f'too many connections for role "{role}"' in out.stderr, out.stderr
        admin.execute(f'ALTER DATABASE "{database}" OWNER TO postgres')
        admin.execute("ALTER SCHEMA public OWNER TO postgres")
        admin.execute(f"DROP OWNED BY {role}")
        admin.execute(f"DROP ROLE {role}")
    assert codes[1] == 2 and codes[3] == 0, codes
