"""Search history: one database (SQLite by default, any SQLAlchemy URL) that is also the cache.

Optuna's own schema holds a study per search run and its trials, so optuna-dashboard shows them
(a long run's trials are thinned to what a person looks at). Plain tables sit beside it:
``tuner_evaluations``, the evaluation cache keyed by objective, mode and plan hash;
``tuner_members``, every evaluation each study saw, in order (resume and the summaries read it);
``tuner_sweeps``, the progress of each search (for resuming); ``tuner_workers`` and ``tuner_claims``,
the processes working on a study and the work each holds (:mod:`tuner.claims`). Every write
is one transaction (``BEGIN IMMEDIATE`` on SQLite), so a kill at any moment leaves the last
committed batch intact and several processes can share one file.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import sqlite3
import stat
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import compress
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import optuna
from optuna.distributions import distribution_to_json
from optuna.storages._rdb import models
from optuna.trial import TrialState
from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    create_engine,
    event,
    func,
    insert,
    inspect,
    or_,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.pool import NullPool, StaticPool

from tuner import stopping
from tuner.objectives.base import MODE_CHARS, Evaluations, Objective
from tuner.space import Space

DEFAULT_PATH = Path("studies") / "history.db"
_META = MetaData()
EVALUATIONS = Table(
    "tuner_evaluations", _META,
    Column("objective", String(64), primary_key=True),
    Column("mode", String(MODE_CHARS), primary_key=True),
    Column("plan_hash", String(16), primary_key=True),
    Column("best_cycles", Float, nullable=True),
    Column("correct", Integer, nullable=False),
    Column("max_abs", Float, nullable=True),
    Column("plan", Text, nullable=False),
)
TIMEOUTS = Table(                                      # failed evaluations that were runs killed at a time limit
    "tuner_timeouts", _META,
    Column("objective", String(64), primary_key=True),
    Column("mode", String(MODE_CHARS), primary_key=True),
    Column("plan_hash", String(16), primary_key=True),
    Column("limit_s", Float, nullable=False),
)
REASONS = Table(                                       # why each evaluation without a value failed
    "tuner_reasons", _META,
    Column("objective", String(64), primary_key=True),
    Column("mode", String(MODE_CHARS), primary_key=True),
    Column("plan_hash", String(16), primary_key=True),
    Column("reason", Text, nullable=False),
)
SWEEPS = Table(
    "tuner_sweeps", _META,
    Column("study_name", String(512), primary_key=True),
    Column("strategy", String(32), nullable=False),
    Column("objective", String(64), nullable=False),
    Column("mode", String(MODE_CHARS), nullable=False),
    Column("target", String(512), nullable=False),
    Column("state", String(16), nullable=False),       # running | stopped (budget or time) | cancelled | done (all but done resume)
    Column("evaluations", Integer, nullable=False),
    Column("progress", Text, nullable=False),           # strategy-specific JSON (resume point)
    Column("updated", String(32), nullable=False),
)

MEMBERS = Table(
    "tuner_members", _META,                             # every evaluation a study saw, in order (its trials may be thinned)
    Column("study_name", String(512), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("plan_hash", String(16), nullable=False),
    Column("value", Float, nullable=True),              # the trial value: None where infeasible or incorrect
)
WORKERS = Table(
    "tuner_workers", _META,                             # processes working on a study now (see tuner.claims)
    Column("worker", String(128), primary_key=True),    # host:pid:nonce
    Column("study_name", String(512), nullable=False),
    Column("slot", Integer, nullable=False),            # the worker's ordinal among the study's live workers (its seed stream)
    Column("host", String(128), nullable=False),
    Column("local", String(128), nullable=False),       # boot and pid namespace: where a pid can be checked directly
    Column("pid", Integer, nullable=False),
    Column("heartbeat", Float, nullable=False),         # the database's clock, seconds since the epoch
)
SPACES = Table(
    "tuner_spaces", _META,                              # the space each measured objective scores (see History.adopt)
    Column("objective", String(64), primary_key=True),
    Column("measures", String(64), nullable=False),     # what it measures, whatever the space: its program and knob names
    Column("knobs", Text, nullable=False),              # JSON [[name, [value, ...]], ...]: what its index vectors mean
)
CLAIMS = Table(
    "tuner_claims", _META,                              # every unit of a study's work, claimed once (see tuner.claims)
    Column("study_name", String(512), primary_key=True),
    Column("item", String(32), primary_key=True),       # plan:HASH, or range:START (zero-padded) of an exhaustive profile
    Column("size", Integer, nullable=False),            # evaluations it counts against the study's budget
    Column("worker", String(128), nullable=False),
    Column("state", String(8), nullable=False),         # claimed | done
    Column("plan", Text, nullable=True),                # plan items: the index vector (JSON), so another worker can redo it
    Column("result", Text, nullable=True),              # range items, when done: its best plans (JSON)
)
_STUDIES, _TRIALS = models.StudyModel.__table__, models.TrialModel.__table__          # Optuna's own tables, read directly
_VALUES, _ATTRS = models.TrialValueModel.__table__, models.TrialUserAttributeModel.__table__
_IN_CHUNK = 500                                         # plan hashes per IN (...) query
_SCHEMA_LOCK = 7_461_010                                # PostgreSQL advisory lock key held while the schema is created
CONNECT_S = 10                  # seconds a PostgreSQL server has to answer a connection, unless its URL sets connect_timeout
# a PostgreSQL server's host that dies or is cut off: TCP gives up on it after about 50 s, waiting for an answer (keepalives)
# or for the acknowledgement of a query sent (tcp_user_timeout, ms), where the system's defaults wait hours and 15 minutes
DEAD_SERVER = {"keepalives": 1, "keepalives_idle": 20, "keepalives_interval": 10, "keepalives_count": 3, "tcp_user_timeout": 50_000}
# a process stopped (Ctrl-Z, a job scheduler's suspend) or cut off inside a transaction holds its locks (a study's: every
# worker of it waits) this long at most, where the server would keep them until its own TCP keepalive (two hours)
IDLE_IN_TRANSACTION_S = 60.0
# and the server probes a silent client as the client probes a silent server (DEAD_SERVER): a dead host's sessions, with
# their connection slots and locks, end within a minute, where the system's keepalive takes over two hours
DEAD_CLIENT = {f"tcp_{name}": DEAD_SERVER[name] for name in ("keepalives_idle", "keepalives_interval", "keepalives_count")}
OUTAGE_S = 30.0                 # how long a read or write is tried again while the database fails (a restart, a failover,
                                # a full disk), unless the history is opened with its own (``--outage-s``)
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

optuna.logging.set_verbosity(optuna.logging.WARNING)


class _PoolLog(logging.Handler):
    """SQLAlchemy's connection pool logs an error that hits a connection as it is returned (a lost server, Ctrl-C or
    SIGTERM during the rollback) with its traceback, through Python's last-resort handler (or the MCP server's). This
    says it in one line on standard error instead, and not at all for an interruption, which propagates: the command
    says it stopped."""

    def emit(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and not isinstance(error, Exception):
            return
        words = f": {error.__class__.__name__}: {first_line(error)}" if error is not None else ""
        print(f"{record.name}: {record.getMessage()}{words}", file=sys.stderr)


_POOL_LOG = logging.getLogger("sqlalchemy.pool")
_POOL_LOG.addHandler(_PoolLog(logging.WARNING))
_POOL_LOG.propagate = False                             # said once, not again by a handler the application configures


class HistoryError(RuntimeError):
    """The history database cannot be written, or has failed for longer than its ``outage_s``."""


class HistoryUnavailable(HistoryError, ValueError):
    """The history cannot be opened: a bad path or URL, or its database driver is not installed."""


DRIVER_EXTRAS = {"postgresql": "postgres"}              # URL scheme -> the package extra that installs its driver


@dataclass
class Row:
    """One evaluation: ``cycles`` is ``best_cycles`` (``None`` where infeasible)."""

    plan_hash: str
    cycles: float | None
    correct: bool
    max_abs: float | None
    idx: np.ndarray = field(repr=False)
    timed_out_s: float | None = None        # a failed run killed at this time limit (s): a longer one may measure it
    reason: str | None = None               # why a row scored by this process has no value (kept in tuner_reasons)


def _valued(cycles: float | None, correct: Any) -> bool:
    """Whether an evaluation has a value that counts: one, and one that passed the problem's check."""
    return cycles is not None and bool(correct)


def rows_of(result: Evaluations, hashes: list[str], idx: np.ndarray) -> list[Row]:
    """Cache rows of an objective's results (aligned with ``hashes`` and ``idx``)."""
    timed_out = result.timed_out or [None] * len(hashes)
    reasons = result.reasons or [None] * len(hashes)
    return [Row(h, float(c) if np.isfinite(c) else None, bool(ok), None if np.isnan(m) else float(m), np.array(row), limit, why)
            for h, c, ok, m, row, limit, why in zip(hashes, result.cycles, result.correct, result.max_abs, idx, timed_out,
                                                    reasons, strict=True)]


def _row(record: Any) -> Row:
    """The :class:`Row` of a ``tuner_evaluations`` record."""
    return Row(record.plan_hash, record.best_cycles, bool(record.correct), record.max_abs,
               np.array(json.loads(record.plan), dtype=np.int16))


@dataclass
class TrialRecord:
    """A trial to store: the plan, its value (``None`` when it failed: infeasible, incorrect or not measured) and user
    attributes (a failure's ``reason`` among them)."""

    idx: np.ndarray
    value: float | None
    attrs: dict[str, Any]


def resolve_url(target: str | Path | None) -> str:
    """SQLAlchemy URL of ``target``: a URL as is (``postgres://``, libpq's other name that managed services write, as
    ``postgresql://``), a path as a SQLite file (default ``studies/history.db``), SQLite's ``:memory:`` as the
    in-memory database it names."""
    if target is None:
        target = DEFAULT_PATH
    text = str(target)
    if text.startswith(("postgres://", "postgres+")):
        text = "postgresql" + text.removeprefix("postgres")
    if text.startswith("postgresql") and "," in (authority := re.split("[/?]", text.partition("://")[2])[0]):
        return _hosts_as_query(text, authority)
    if "://" in text:
        return text
    if text == ":memory:":
        return "sqlite://"
    path = str(Path(text).resolve()).replace("%", "%25").replace("?", "%3F")       # its own, not a query or an escape
    return f"sqlite:///{path}"


def _hosts_as_query(url: str, authority: str) -> str:
    """``url`` with libpq's hosts, listed in its authority (``postgresql://u@h1:5432,h2:5432/db``, as high-availability
    services write it: the first that answers is used), as the ``host`` parameters SQLAlchemy reads instead."""
    user, at, hosts = authority.rpartition("@")
    scheme, _, rest = url.partition("://")
    path, mark, query = rest.removeprefix(authority).partition("?")
    hosts_query = "&".join(f"host={host}" for host in hosts.split(","))
    return f"{scheme}://{user}{at}{path}?{hosts_query}{'&' if mark else ''}{query}"


def _retry(action: Callable[[], T], errors: tuple[type[Exception], ...], attempts: int, pause_s: float) -> T:
    """``action()``, tried again after a growing pause while it raises ``errors`` (a busy database)."""
    for attempt in range(attempts - 1):
        try:
            return action()
        except errors:
            time.sleep(pause_s * (attempt + 1))
    return action()


def outlasting_outages(method: F) -> F:
    """``method`` (of a :class:`History`, or of an object with a ``history``; one transaction or one read) run again
    from its start while the database fails, for up to the history's ``outage_s``: a server that restarts or fails
    over, a disk that is full for a while, a session that the server ended (a process that was stopped inside a
    transaction for longer than ``IDLE_IN_TRANSACTION_S``). A failed transaction left nothing behind, so running it
    again is safe. Past that, a :class:`HistoryError` that names the history and the database's words."""
    @functools.wraps(method)
    def outlasting(self: Any, *args: Any, **kwargs: Any) -> Any:
        history: History = self if isinstance(self, History) else self.history
        say = history.log or (lambda line: None)
        started, pause = time.monotonic(), 0.0
        while True:
            try:
                result = method(self, *args, **kwargs)
            except DBAPIError as exc:
                if not isinstance(exc, (OperationalError, InterfaceError)) and not exc.connection_invalidated:
                    raise
                words = first_line(exc.orig or exc)[:300]
                pause = min(2 * pause, 2.0) if pause else 0.05
                if time.monotonic() + pause > started + history.outage_s:
                    failing_s = max(int(time.monotonic() - started), history.outage_s)   # a try (a busy wait) may outlast it
                    raise HistoryError(f"the history {_safe(history.url)} kept failing for {failing_s:g} s ({words}); what was "
                                       "saved before stays, and the same command resumes the search") from None
                if pause == 0.05:
                    say(f"the history {_safe(history.url)} failed ({words}); trying again for up to {history.outage_s:g} s")
                time.sleep(pause)
                continue
            if pause:
                say(f"the history {_safe(history.url)} answers again, after {time.monotonic() - started:.1f} s")
            return result
    return outlasting  # type: ignore[return-value]


def in_chunks(column: Any, values: list[str]) -> Iterator[Any]:
    """``column IN (...)`` conditions covering ``values``, ``_IN_CHUNK`` at a time (the drivers' parameter limits)."""
    for i in range(0, len(values), _IN_CHUNK):
        yield column.in_(values[i:i + _IN_CHUNK])


def put_sweep(connection: Any, sweep: dict[str, Any]) -> None:
    """Update the sweep record ``sweep["study_name"]`` with the columns ``sweep`` names (``progress`` as an object), or
    insert it (a new record: no evaluations yet). Its ``evaluations`` are the study's and only claims change them."""
    record = dict(sweep, updated=_now().isoformat(timespec="seconds"))
    if "progress" in record:
        record["progress"] = json.dumps(record["progress"])
    if not connection.execute(SWEEPS.update().where(SWEEPS.c.study_name == record["study_name"]).values(**record)).rowcount:
        connection.execute(insert(SWEEPS), [{"state": "running", "evaluations": 0, "progress": "{}", **record}])


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def shown_url(url: str) -> str:
    """``url`` as a person may see it: any password hidden, the rest as given (SQLAlchemy would percent-encode a path's
    non-ASCII letters)."""
    try:
        parsed = make_url(url)
        return url if parsed.password is None else parsed.render_as_string(hide_password=True)
    except Exception:                       # not a URL SQLAlchemy can parse: the text says so itself, but for a password
        return re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", url[:200])


def parsed_url(url: str) -> URL:
    """``url`` as SQLAlchemy reads it; one it cannot read (a port that is not a number) is refused by name, its password
    hidden."""
    try:
        return make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise HistoryUnavailable(f"cannot open history {_safe(url)}: not a database URL ({first_line(exc)[:200]})") from None


def _safe(url: str) -> str:
    return repr(shown_url(url))


def first_line(words: object) -> str:
    """The first line of ``words`` (an error's: SQLAlchemy adds the SQL and a link after the database's words)."""
    return (str(words).strip().splitlines() or [""])[0]


def _in_memory(url: str) -> bool:
    """Whether SQLite ``url`` names an in-memory database, of which every engine opening it gets one of its own."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):     # not a URL SQLAlchemy can read (a port that is not a number)
        return False
    return parsed.database in (None, "", ":memory:") or parsed.query.get("mode") == "memory"


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names (its query, such as ``?timeout=5``, left out); ``None`` for another database, an
    in-memory one or a URL SQLAlchemy cannot read (opening it says why)."""
    with contextlib.suppress(ArgumentError, ValueError):
        if url.startswith("sqlite") and not _in_memory(url):
            return Path(make_url(url).database)
    return None


def _wal(dbapi_connection: Any, wait_s: float = 60.0) -> None:
    """Put the SQLite file in WAL mode (persistent; a no-op once set). The switch does not wait on the busy timeout: a
    process that opens a new history while another one creates it got "database is locked" at once (workers starting
    together), so it is tried again for up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            dbapi_connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _server_args(url: str) -> dict[str, Any]:
    """Connect arguments for a database server's ``url``, each unless the URL sets it: a PostgreSQL server that does not
    answer is given up after ``CONNECT_S`` (psycopg would wait 130 s, saying nothing), and a connection to one whose host
    died or was cut off after about 50 s (``DEAD_SERVER``), which makes it an outage."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        return {}
    return {name: value for name, value in {"connect_timeout": CONNECT_S, **DEAD_SERVER}.items() if name not in parsed.query}


def _ending_stuck_sessions(engine: Engine) -> Engine:
    """``engine``, whose PostgreSQL sessions the server ends once idle in a transaction for ``IDLE_IN_TRANSACTION_S``
    (``idle_in_transaction_session_timeout``), or once their client's host is silent (``DEAD_CLIENT``), each where
    the server, the database, the role or the URL sets nothing: the locks and the connection slot of a process that
    cannot go on are freed, and that process, if it does go on, finds its connection closed, an outage that it
    outlasts (:func:`outlasting_outages`) by running the transaction again."""
    if engine.dialect.name == "postgresql":
        event.listen(engine, "connect", _limit_stuck_sessions)
    return engine


def _limit_stuck_sessions(dbapi_connection: Any, _record: Any) -> None:
    wanted = {"idle_in_transaction_session_timeout": round(IDLE_IN_TRANSACTION_S * 1000), **DEAD_CLIENT}
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SELECT set_config(name, value, false) FROM pg_settings JOIN unnest(%s::text[], %s::text[]) "
                       "AS wanted(name, value) USING (name) WHERE source = 'default'", (list(wanted), [str(v) for v in wanted.values()]))
    dbapi_connection.commit()                           # a setting made in a transaction that is rolled back is undone


def _reading(url: str) -> dict[str, Any]:
    """Engine arguments for a tool that writes no history to open SQLite ``url`` where it cannot be written (a read-only
    mount, a shared or archived history, another user's file): each connection read-only (``mode=ro``), or where SQLite
    cannot make the index its write-ahead log needs (``-shm``: the folder cannot be written, and no writer has made it),
    immutable: the file alone, which holds every committed write once no log is beside it (a log left there is
    refused: it would be ignored). Elsewhere none: the connections read as they would write, so that the last one to
    close folds the log into the file and leaves no file behind."""
    file = sqlite_file(url)
    if file is None or not file.is_file() or _unwritable(file) is None:
        return {}
    shm, wal, uri = Path(f"{file}-shm"), Path(f"{file}-wal"), file.absolute().as_uri()

    def connection() -> sqlite3.Connection:
        if os.access(file.parent, os.W_OK) or shm.exists():
            return sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=60)
        if wal.exists() and wal.stat().st_size:
            raise HistoryUnavailable(f"cannot read history {str(file)[:200]!r} in a folder that cannot be written: its write-ahead "
                                     f"log ({wal.name}) holds writes not yet in the file; copy both files to a folder that can be written")
        return sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=60)

    return {"creator": connection}


def _refused_path(file: Path) -> str | None:
    """Why ``file`` cannot be a history file (a name too long, a file where a folder should be, a folder, a device or
    a pipe), or ``None``; a path that does not exist yet is no refusal."""
    try:
        mode = file.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    if stat.S_ISDIR(mode):
        return "it is a folder, not a history file"
    return None if stat.S_ISREG(mode) else "it is a device or a pipe, not a history file"


def _unwritable(file: Path) -> str | None:
    """What keeps SQLite history ``file`` from being written here (a read-only mount, another user's file or folder;
    SQLite writes its log beside the file), or ``None``. A folder not made yet is judged by the first that exists."""
    folder = file.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if file.exists() and not os.access(file, os.W_OK):
        return "the file cannot be written here"
    if not os.access(folder, os.W_OK) and not all(os.access(f"{file}{log}", os.W_OK) for log in ("-wal", "-shm")):
        return f"its folder {str(folder)[:200]!r} cannot be written"     # where SQLite would make its log
    return None


def _sqlite_engine(url: str, read_only: bool = False) -> Engine:
    if url == "sqlite://":
        engine = create_engine(url, poolclass=StaticPool)        # one in-memory database for every connection
    elif read_only:
        engine = create_engine(url, connect_args={"timeout": 60}, poolclass=NullPool, **_reading(url))
    else:
        if (file := sqlite_file(url)) is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 60})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None            # we issue BEGIN ourselves
        dbapi_connection.execute("PRAGMA busy_timeout = 60000")
        if not read_only:
            _wal(dbapi_connection)
            dbapi_connection.execute("PRAGMA synchronous = NORMAL")

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")     # a writer's lock, taken up front

    return engine


class History:
    """The history database at ``url`` (created on first use). ``read_only``: nothing is ever written, and a
    SQLite file that does not exist yet, or a database no tuner wrote to (another tool's Optuna studies only),
    reads as an empty history (it is neither created nor changed). A database that fails is tried again for
    ``outage_s`` seconds (default ``OUTAGE_S``), and ``log`` hears of it (see :func:`outlasting_outages`)."""

    def __init__(self, url: str, read_only: bool = False, log: Callable[[str], None] | None = None,
                 outage_s: float | None = None) -> None:
        self.url, self.read_only, self.log = url, read_only, log
        self._taken: dict[str, dict[str, dict[str, Row]]] = {}      # a read-only history's adopt: objective, mode, hash
        self.outage_s = OUTAGE_S if outage_s is None else outage_s
        parsed_url(url)
        self.sqlite = url.startswith("sqlite")
        if self.sqlite and not read_only and _in_memory(url):
            raise HistoryUnavailable(f"cannot write history {url[:200]!r}: an in-memory database is one per connection pool, so "
                                     "Optuna's trials and the tuner's cache would not meet; give a file (PATH or sqlite:///PATH)")
        file = sqlite_file(url)
        if file is not None and (why := _refused_path(file)):
            raise HistoryUnavailable(f"cannot open history {_safe(url)}: {why}")
        if not read_only and file is not None and (why := _unwritable(file)):
            raise HistoryUnavailable(f"cannot write history {_safe(url)}: {why}; the commands that only read a history, such as "
                                     "compare_history, rank_experiments or report, read it there")
        if read_only and self.sqlite and not (file and file.is_file()):
            url = "sqlite://"                                # an empty history, in memory
        with stopping.held():                               # a stop signal waits until the history is open
            self._open(url, read_only)

    def _open(self, url: str, read_only: bool) -> None:
        try:
            if self.sqlite:
                self.engine = _sqlite_engine(url, read_only)
            else:
                self.engine = _ending_stuck_sessions(create_engine(url, pool_pre_ping=True, connect_args=_server_args(url)))
            if read_only and url != "sqlite://" and not set(_META.tables) & set(inspect(self.engine).get_table_names()):
                self.engine.dispose()
                url, self.sqlite = "sqlite://", True
                self.engine = _sqlite_engine(url, read_only)
            with self._schema_lock() as locked:
                if not read_only or url == "sqlite://":
                    _META.create_all(locked or self.engine)
                    if locked is not None:
                        locked.commit()                     # the other connections see the tables
                self.storage = self._optuna_storage(url)
                if not read_only:
                    self._backfill_members()
                if url == "sqlite://":
                    models.BaseModel.metadata.create_all(self.engine)     # an empty history reads Optuna's tables too
        except ImportError as exc:
            scheme = url.split(":", 1)[0].split("+", 1)[0]
            extra = DRIVER_EXTRAS.get(scheme)
            hint = (f"the '{extra}' extra installs psycopg 3: pip install -e '.[{extra}]', then use {scheme}+psycopg://..."
                    if extra else "install the driver SQLAlchemy names")
            raise HistoryUnavailable(f"the database driver for {scheme} ({exc.name}) is not installed; {hint}") from None
        except (SQLAlchemyError, OSError, optuna.exceptions.StorageInternalError) as exc:
            if isinstance(exc, optuna.exceptions.StorageInternalError) and exc.__cause__ is not None:
                exc = exc.__cause__                         # Optuna's words say nothing; the database's say why
            raise HistoryUnavailable(f"cannot open history {_safe(url)}: {exc.__class__.__name__}: {first_line(exc)}") from None

    def _backfill_members(self) -> None:
        """A history written before ``tuner_members``: each study's trials become its members, once. The check
        reads only the studies (no write lock); the trials are read and copied only for a study that needs it."""
        unlisted = (select(_STUDIES.c.study_id)
                    .where(~select(MEMBERS.c.study_name).where(MEMBERS.c.study_name == _STUDIES.c.study_name).exists(),
                           select(_TRIALS.c.trial_id).where(_TRIALS.c.study_id == _STUDIES.c.study_id).exists()))
        with self.connect() as connection:
            if connection.execute(unlisted.limit(1)).first() is None:
                return
        query = (select(_STUDIES.c.study_name, _TRIALS.c.number, _ATTRS.c.value_json, _VALUES.c.value)
                 .select_from(_TRIALS.join(_STUDIES, _STUDIES.c.study_id == _TRIALS.c.study_id)
                              .join(_ATTRS, and_(_ATTRS.c.trial_id == _TRIALS.c.trial_id, _ATTRS.c.key == "plan_hash"))
                              .outerjoin(_VALUES, and_(_VALUES.c.trial_id == _TRIALS.c.trial_id, _VALUES.c.objective == 0)))
                 .where(_STUDIES.c.study_id.in_(unlisted)))              # checked again under the write lock: copied once
        with self.begin() as connection:
            rows = [{"study_name": name, "seq": number, "plan_hash": json.loads(h), "value": v}
                    for name, number, h, v in connection.execute(query)]
            if rows:
                connection.execute(insert(MEMBERS), rows)

    @contextmanager
    def _schema_lock(self) -> Iterator[Connection | None]:
        """Hold a server-wide lock while the schema is created (PostgreSQL: an advisory lock, on the connection given
        to create the tables with, so that opening a history takes no connection more than Optuna's storage needs:
        many workers starting together need the server's slots), so processes starting together do not race on
        ``CREATE TABLE``; SQLite serializes them itself (``None``)."""
        if self.sqlite:
            yield None
            return
        with self.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _SCHEMA_LOCK})
            connection.commit()
            try:
                yield connection
            finally:
                connection.rollback()                       # what failed, if anything; the advisory lock outlives it
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _SCHEMA_LOCK})
                connection.commit()

    def _optuna_storage(self, url: str) -> optuna.storages.RDBStorage:
        kwargs: dict[str, Any] = {"connect_args": {"timeout": 60} if self.sqlite else _server_args(url)}
        if self.read_only and self.sqlite:
            kwargs.update(_reading(url))
        if url != "sqlite://":          # no connection outlives a use: Optuna's storage names and creates studies, once a run
            kwargs["poolclass"] = NullPool  # (so a worker holds two, its search's and its heartbeat's; no -wal/-shm left by reads)
        template = url.replace("{", "{{").replace("}", "}}")   # Optuna fills {SCHEMA_VERSION} in (str.format): a URL's braces are its own
        storage = _retry(lambda: optuna.storages.RDBStorage(template, engine_kwargs=kwargs),   # first use may race on the schema
                         (SQLAlchemyError, optuna.exceptions.StorageInternalError, RuntimeError), attempts=20, pause_s=0.1)
        _ending_stuck_sessions(storage.engine)            # its connections from now on (none is pooled on a server)
        return storage

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A connection in a transaction, committed at the end of the body (rolled back if it raises). A stop signal
        waits until the connection is back (:func:`tuner.stopping.held`); every use of the database goes through here
        or :meth:`connect`."""
        with stopping.held(), self.engine.begin() as connection:
            yield connection

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A connection to read with (or to commit on itself), as :meth:`begin` holds off a stop signal."""
        with stopping.held(), self.engine.connect() as connection:
            yield connection

    def close(self) -> None:
        """Close every connection (on SQLite the last one folds the write-ahead log into the file)."""
        with stopping.held():
            self.engine.dispose()
            self.storage.engine.dispose()

    # --- evaluation cache -------------------------------------------------------------------

    @outlasting_outages
    def cached(self, objective: str, mode: str, hashes: Iterable[str] | None = None) -> dict[str, Row]:
        """Cached evaluations of ``objective`` in ``mode`` (all, or those of ``hashes``)."""
        hashes = None if hashes is None else set(hashes)
        query = select(EVALUATIONS).where(EVALUATIONS.c.objective == objective, EVALUATIONS.c.mode == mode)
        if hashes is None:
            queries = [query]
        else:
            queries = [query.where(condition) for condition in in_chunks(EVALUATIONS.c.plan_hash, sorted(hashes))]
        rows: dict[str, Row] = {}
        with self.connect() as connection:
            for q in queries:
                rows |= {r.plan_hash: _row(r) for r in connection.execute(q)}
        return rows | {h: row for h, row in self._held(objective, mode).items() if hashes is None or h in hashes}

    @outlasting_outages
    def timed_out(self, objective: str, mode: str) -> dict[str, float]:
        """The failed evaluations of ``objective`` in ``mode`` that were runs killed at a time limit: plan hash -> limit (s)."""
        query = select(TIMEOUTS.c.plan_hash, TIMEOUTS.c.limit_s).where(TIMEOUTS.c.objective == objective, TIMEOUTS.c.mode == mode)
        held = self._held(objective, mode)
        with self.connect() as connection:
            return {r.plan_hash: r.limit_s for r in connection.execute(query) if r.plan_hash not in held} | {
                h: row.timed_out_s for h, row in held.items() if row.timed_out_s is not None}

    def stale(self, objective: Objective, mode: str, rows: dict[str, Row]) -> set[str]:
        """The failures among ``rows`` that were runs killed at a shorter time limit than ``objective``'s: they say
        only that the run took longer, so a run with this limit measures them again (their new rows are written as
        ``replaced``)."""
        limit = getattr(objective, "timeout_s", None)
        if not limit or all(r.cycles is not None for r in rows.values()):
            return set()
        return {h for h, was in self.timed_out(objective.name, mode).items() if was < limit and h in rows and rows[h].cycles is None}

    @outlasting_outages
    def best_cached(self, objective: str, mode: str, limit: int) -> list[Row]:
        """The ``limit`` best correct evaluations of ``objective`` in ``mode`` (one query; ties by plan hash)."""
        query = (select(EVALUATIONS).where(EVALUATIONS.c.objective == objective, EVALUATIONS.c.mode == mode,
                                           EVALUATIONS.c.correct == 1, EVALUATIONS.c.best_cycles.is_not(None))
                 .order_by(EVALUATIONS.c.best_cycles, EVALUATIONS.c.plan_hash).limit(limit))
        with self.connect() as connection:
            rows = [_row(r) for r in connection.execute(query)]
        held = [row for row in self._held(objective, mode).values() if _valued(row.cycles, row.correct)]  # none in rows: a
        return sorted(rows + held, key=lambda r: (r.cycles, r.plan_hash))[:limit] if held else rows    # value replaces none

    @outlasting_outages
    def sample(self, objective: str, mode: str, limit: int) -> list[Row]:
        """Up to ``limit`` evaluations of ``objective`` in ``mode``, by plan hash: a fixed pseudo-random sample (one query)."""
        query = (select(EVALUATIONS).where(EVALUATIONS.c.objective == objective, EVALUATIONS.c.mode == mode)
                 .order_by(EVALUATIONS.c.plan_hash).limit(limit))
        with self.connect() as connection:
            return [_row(r) for r in connection.execute(query)]

    @outlasting_outages
    def paired(self, objective: str, first: str, second: str, limit: int) -> list[tuple[float | None, bool, float | None, bool]]:
        """``(value, correct)`` in ``first`` and in ``second`` of up to ``limit`` plans scored in both modes (one query)."""
        a, b = EVALUATIONS.alias("a"), EVALUATIONS.alias("b")
        query = (select(a.c.best_cycles, a.c.correct, b.c.best_cycles, b.c.correct)
                 .join_from(a, b, and_(b.c.plan_hash == a.c.plan_hash, b.c.objective == a.c.objective, b.c.mode == second))
                 .where(a.c.objective == objective, a.c.mode == first).order_by(a.c.plan_hash).limit(limit))
        with self.connect() as connection:
            return [(v1, bool(c1), v2, bool(c2)) for v1, c1, v2, c2 in connection.execute(query)]

    def scored(self, objective: Objective, mode: str, idx: np.ndarray, measure: bool = True) -> dict[str, Row]:
        """Rows of the configurations ``idx`` in ``mode``: from the cache, the rest (and the :meth:`stale` failures)
        scored now and cached unless read-only; a failed one carries its ``reason``. Without ``measure``, only the
        cache's rows that stand (the others are left out)."""
        hashes = [objective.space.hash_idx(row) for row in idx]
        found = self.cached(objective.name, mode, hashes)
        stale = self.stale(objective, mode, found)
        found = {h: r for h, r in found.items() if h not in stale}
        todo = sorted({h: i for i, h in enumerate(hashes) if h not in found}.values())
        if todo and measure:
            rows = rows_of(objective.evaluate(idx[todo], mode), [hashes[i] for i in todo], idx[todo])
            if not self.read_only:
                self.write(objective.name, mode, rows, replaced=stale)
            found |= {r.plan_hash: r for r in rows}
        return found

    @outlasting_outages
    def adopt(self, objective: Objective) -> int:
        """Copy into ``objective``'s evaluations what the history measured of the same program under other spaces (the
        same knob names; values added, removed or reordered, other restrictions): each configuration its space holds
        and allows that it has not measured, or whose run failed where another space's gave a time, so that none is
        measured again; the number copied. Each objective's space is recorded for that (a space used only by older
        versions was not). A read-only history writes nothing: it holds the copies in memory, where its reads of
        ``objective`` find them."""
        if objective.measures is None or (self.read_only and SPACES.name not in self._tables):
            return 0
        if self.read_only:
            with self.connect() as connection:
                self._taken[objective.name] = carried = self._carried_over(connection, objective)
            return sum(map(len, carried.values()))
        with self.begin() as connection:
            carried = self._carried_over(connection, objective)
            for mode, rows in carried.items():              # in the place of the failures they replace
                self._replace(connection, objective.name, mode, rows)
                self._write(connection, objective.name, mode, list(rows.values()), None, [], None, None, [])
            knobs = json.dumps([[knob.name, list(knob.choices)] for knob in objective.space.knobs])
            dialect_insert = sqlite_insert if self.sqlite else postgresql_insert
            connection.execute(dialect_insert(SPACES).on_conflict_do_nothing(),
                               [{"objective": objective.name, "measures": objective.measures, "knobs": knobs}])
        return sum(map(len, carried.values()))

    def _held(self, objective: str, mode: str) -> dict[str, Row]:
        """What this read-only history took over for ``objective`` in ``mode`` (:meth:`adopt`), by plan hash: these
        stand in the place of what the database holds for them."""
        return self._taken.get(objective, {}).get(mode, {})

    @staticmethod
    def _carried_over(connection: Connection, objective: Objective) -> dict[str, dict[str, Row]]:
        """What :meth:`adopt` copies to ``objective``, by mode and plan hash, each with the timeout and reason kept
        with it: of each configuration, the first other space's evaluation (by the space's name) that has a value, else
        the first's failure; where ``objective`` holds one, only a value in the place of its failure."""
        space = objective.space
        others = dict(connection.execute(select(SPACES.c.objective, SPACES.c.knobs).where(
            SPACES.c.measures == objective.measures, SPACES.c.objective != objective.name).order_by(SPACES.c.objective)).all())
        if not others:
            return {}
        own = {(mode, h): _valued(best, correct) for mode, h, best, correct in connection.execute(
            select(EVALUATIONS.c.mode, EVALUATIONS.c.plan_hash, EVALUATIONS.c.best_cycles, EVALUATIONS.c.correct)
            .where(EVALUATIONS.c.objective == objective.name))}            # configuration -> whether it has a value
        carried: dict[str, dict[str, Row]] = {}
        origin: dict[tuple[str, str, str], Row] = {}    # (other space, mode, its plan hash): the row made of it
        for other, knobs in others.items():
            names, choices = zip(*json.loads(knobs), strict=True)
            held = []                                   # the other space's records of this one's configurations
            for record in connection.execute(select(EVALUATIONS).where(EVALUATIONS.c.objective == other)):
                config = {name: values[i] for name, values, i in zip(names, choices, json.loads(record.plan), strict=True)}
                try:                                    # with this space's hash of it, from its values
                    held.append((record, space.encode(config), space.hash(config)))
                except (KeyError, ValueError):          # a value this space no longer holds
                    continue
            allowed = space.allowed(np.stack([idx for _, idx, _ in held])) if held else []
            for record, idx, h in compress(held, allowed):  # those this space's restrictions rule out are not its own
                kept = carried.get(record.mode, {}).get(h)
                standing = _valued(kept.cycles, kept.correct) if kept is not None else own.get((record.mode, h))
                if standing or (standing is False and not _valued(record.best_cycles, record.correct)):
                    continue                            # a time, from anywhere, beats a failure; else the first stands
                row = Row(h, record.best_cycles, bool(record.correct), record.max_abs, idx)
                carried.setdefault(record.mode, {})[h] = origin[(other, record.mode, record.plan_hash)] = row
        for r in connection.execute(select(TIMEOUTS).where(TIMEOUTS.c.objective.in_(list(others)))):     # what is kept
            if (row := origin.get((r.objective, r.mode, r.plan_hash))) is not None:                       # with each row
                row.timed_out_s = r.limit_s
        for r in connection.execute(select(REASONS).where(REASONS.c.objective.in_(list(others)))):
            if (row := origin.get((r.objective, r.mode, r.plan_hash))) is not None:
                row.reason = r.reason
        return carried

    # --- studies ----------------------------------------------------------------------------

    def study(self, name: str, attrs: dict[str, Any] | None = None, metric: str | None = None) -> optuna.Study:
        """The Optuna study ``name`` (created, minimizing, when new), with the user attributes ``attrs`` and ``metric`` as
        the name of its value (what optuna-dashboard heads the values with, in place of "Objective 0"). Tried again
        while another process creates or writes it too (Optuna's SQLite transactions are not ``BEGIN IMMEDIATE``:
        two workers starting at once could fail one with "database is locked")."""
        def open_study() -> optuna.Study:
            study = optuna.create_study(storage=self.storage, study_name=name, direction="minimize", load_if_exists=True)
            for key, value in (attrs or {}).items():
                study.set_user_attr(key, value)
            if metric is not None:
                with warnings.catch_warnings():                 # "experimental" since Optuna 3.2: not the user's concern
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    study.set_metric_names([metric])
            return study

        with stopping.held():
            return _retry(open_study, (SQLAlchemyError, optuna.exceptions.StorageInternalError), attempts=20, pause_s=0.1)

    @outlasting_outages
    def study_names(self) -> list[str]:
        """Every study's name, oldest first (one query)."""
        with self.connect() as connection:
            return list(connection.execute(select(_STUDIES.c.study_name).order_by(_STUDIES.c.study_id)).scalars())

    def trials(self, name: str) -> list[optuna.trial.FrozenTrial]:
        """The stored trials of study ``name`` (completed and failed) as Optuna's frozen trials (empty when it does not exist)."""
        try:
            with stopping.held():
                return optuna.load_study(study_name=name, storage=self.storage).get_trials(deepcopy=False)
        except KeyError:
            return []

    def samples(self, objective: str) -> dict[str, list[float]]:
        """Each configuration's repeated measurements (plan hash -> the values of its runs) where ``objective`` repeats
        its runs, from the trials of its studies (the newest study's where several measured one); empty elsewhere."""
        return self._kept(objective, "samples")

    @outlasting_outages
    def failures(self, objective: str, mode: str) -> tuple[int, dict[str, tuple[float | None, str | None]]]:
        """How many configurations ``objective`` scored in ``mode``, and each one without a value (infeasible, or a
        value that failed the problem's check) by plan hash: its value, if any, and why it failed (``None`` for an
        incorrect value). A failure scored before the history kept reasons has the last one a trial of the objective's
        studies kept (``None`` where its trial was thinned). Three queries, or four where an older version scored some."""
        failing = or_(EVALUATIONS.c.best_cycles.is_(None), EVALUATIONS.c.correct == 0)
        of = and_(EVALUATIONS.c.objective == objective, EVALUATIONS.c.mode == mode)
        with self.connect() as connection:
            scored = connection.execute(select(func.count()).select_from(EVALUATIONS).where(of)).scalar_one()
            failed = dict(connection.execute(select(EVALUATIONS.c.plan_hash, EVALUATIONS.c.best_cycles).where(of, failing)).all())
        held = self._held(objective, mode)                 # new configurations, or values in the place of failures
        scored += len(held.keys() - failed.keys())
        failed = {h: v for h, v in failed.items() if h not in held} | {
            h: row.cycles for h, row in held.items() if not _valued(row.cycles, row.correct)}
        reasons = self.reasons(objective, mode) if failed else {}
        if any(value is None and h not in reasons for h, value in failed.items()):
            reasons = self._kept(objective, "reason") | reasons
        return scored, {h: (value, reasons.get(h)) for h, value in failed.items()}

    @outlasting_outages
    def reasons(self, objective: str, mode: str, hashes: Iterable[str] | None = None) -> dict[str, str]:
        """Why the failed evaluations of ``objective`` in ``mode`` failed (those of ``hashes``, or all), by plan hash, as
        the history keeps it (not for those an older version scored)."""
        hashes = None if hashes is None else set(hashes)
        held = self._held(objective, mode)
        taken = {h: row.reason for h, row in held.items() if row.reason is not None and (hashes is None or h in hashes)}
        if REASONS.name not in self._tables:
            return taken
        query = select(REASONS.c.plan_hash, REASONS.c.reason).where(REASONS.c.objective == objective, REASONS.c.mode == mode)
        queries = [query] if hashes is None else [query.where(c) for c in in_chunks(REASONS.c.plan_hash, sorted(hashes))]
        with self.connect() as connection:
            return {h: why for q in queries for h, why in connection.execute(q) if h not in held} | taken

    @functools.cached_property
    def _tables(self) -> set[str]:
        """The tables the database holds: a history an older version wrote, opened read-only, lacks the newer ones."""
        with self.connect() as connection:
            return set(inspect(connection).get_table_names())

    @outlasting_outages
    def _kept(self, objective: str, key: str) -> dict[str, Any]:
        """Per plan hash, the user attribute ``key`` of the last trial of ``objective``'s studies that keeps one (the
        newest study first, then the last trial: a configuration is measured again only to replace its result, by a
        longer time limit or :func:`tuner.service.remeasure_failures`, and the cache holds the last measurement): one
        query, not Optuna's reading of every trial of every study."""
        kept, hashed = _ATTRS.alias(), _ATTRS.alias()
        query = (select(hashed.c.value_json, kept.c.value_json)
                 .join_from(_TRIALS, kept, and_(kept.c.trial_id == _TRIALS.c.trial_id, kept.c.key == key))
                 .join(hashed, and_(hashed.c.trial_id == _TRIALS.c.trial_id, hashed.c.key == "plan_hash"))
                 .join(_STUDIES, _STUDIES.c.study_id == _TRIALS.c.study_id)
                 .where(_STUDIES.c.study_name.endswith(f"@{objective}", autoescape=True))
                 .order_by(_STUDIES.c.study_id.desc(), _TRIALS.c.number.desc()))
        found: dict[str, Any] = {}
        with self.connect() as connection:
            for plan, value in connection.execute(query):
                found.setdefault(json.loads(plan), json.loads(value))
        return found

    @outlasting_outages
    def outcomes(self, name: str) -> list[tuple[str, float | None]]:
        """``(plan_hash, value)`` of every evaluation study ``name`` saw, in order; ``None`` where infeasible or
        incorrect (one query). Complete even where the study's Optuna trials are thinned for the dashboard."""
        query = select(MEMBERS.c.plan_hash, MEMBERS.c.value).where(MEMBERS.c.study_name == name).order_by(MEMBERS.c.seq)
        with self.connect() as connection:
            return [(h, v) for h, v in connection.execute(query)]

    @outlasting_outages
    def members(self, name: str, objective: str, mode: str, after: int = -1) -> list[tuple[int, Row, float | None]]:
        """``(seq, row, value)`` of the evaluations study ``name`` saw after member ``after``, in order, with their
        cached rows of ``objective`` in ``mode`` (one query): how a worker learns what the others scored."""
        query = (select(MEMBERS.c.seq, MEMBERS.c.value, EVALUATIONS)
                 .join_from(MEMBERS, EVALUATIONS, and_(EVALUATIONS.c.plan_hash == MEMBERS.c.plan_hash,
                                                       EVALUATIONS.c.objective == objective, EVALUATIONS.c.mode == mode))
                 .where(MEMBERS.c.study_name == name, MEMBERS.c.seq > after).order_by(MEMBERS.c.seq))
        with self.connect() as connection:
            return [(r.seq, _row(r), r.value) for r in connection.execute(query)]

    @outlasting_outages
    def study_tops(self, objective: str, per_study: int) -> dict[str, tuple[int, list[str]]]:
        """For every study of ``objective`` (oldest first): its number of scored evaluations and the plan hashes
        of its ``per_study`` best (lowest value, ties by hash). One query with window functions, however many."""
        ranked = (select(_STUDIES.c.study_id, MEMBERS.c.study_name, MEMBERS.c.plan_hash,
                         func.row_number().over(partition_by=MEMBERS.c.study_name, order_by=(MEMBERS.c.value, MEMBERS.c.plan_hash))
                         .label("rank"),
                         func.count().over(partition_by=MEMBERS.c.study_name).label("scored"))
                  .select_from(MEMBERS.join(_STUDIES, _STUDIES.c.study_name == MEMBERS.c.study_name))
                  .where(MEMBERS.c.study_name.endswith(objective, autoescape=True), MEMBERS.c.value.is_not(None))).subquery()
        query = select(ranked).where(ranked.c.rank <= per_study).order_by(ranked.c.study_id, ranked.c.rank)
        tops: dict[str, tuple[int, list[str]]] = {}
        with self.connect() as connection:
            for row in connection.execute(query):
                tops.setdefault(row.study_name, (row.scored, []))[1].append(row.plan_hash)
        return tops

    @outlasting_outages
    def sweep(self, name: str) -> dict[str, Any] | None:
        """The progress record of search ``name``, or ``None``."""
        with self.connect() as connection:
            row = connection.execute(select(SWEEPS).where(SWEEPS.c.study_name == name)).first()
        if row is None:
            return None
        return {**row._mapping, "progress": json.loads(row.progress)}

    @outlasting_outages
    def sweeps(self) -> list[dict[str, Any]]:
        with self.connect() as connection:
            rows = connection.execute(select(SWEEPS).order_by(SWEEPS.c.study_name)).all()
        return [{**r._mapping, "progress": json.loads(r.progress)} for r in rows]

    # --- the one write path -----------------------------------------------------------------

    @outlasting_outages
    def write(self, objective: str, mode: str, rows: list[Row], study_id: int | None = None,
              trials: list[TrialRecord] = (), sweep: dict[str, Any] | None = None,  # type: ignore[assignment]
              space: Space | None = None, members: list[tuple[str, float | None]] = (),  # type: ignore[assignment]
              replaced: Iterable[str] = ()) -> None:
        """Store evaluations, trials (of configurations of ``space``), the study's new ``members`` (``(plan_hash,
        value)`` of every evaluation it saw) and a sweep record in one transaction. The evaluations of ``replaced``
        (runs killed at a shorter time limit, or failures measured again) take the place of the earlier ones."""
        if self.read_only:
            raise HistoryError("this history is opened read-only (the tool declares no history writes)")
        with self.begin() as connection:
            self._replace(connection, objective, mode, replaced)
            self._write(connection, objective, mode, rows, study_id, list(trials), sweep, space, list(members))

    @staticmethod
    def _replace(connection: Any, objective: str, mode: str, hashes: Iterable[str]) -> None:
        """Delete what the history holds of ``objective``'s evaluations of ``hashes`` in ``mode``, timeouts and reasons too."""
        for table in (EVALUATIONS, TIMEOUTS, REASONS):
            for condition in in_chunks(table.c.plan_hash, sorted(hashes)):
                connection.execute(table.delete().where(table.c.objective == objective, table.c.mode == mode, condition))

    def _write(self, connection: Any, objective: str, mode: str, rows: list[Row], study_id: int | None,
               trials: list[TrialRecord], sweep: dict[str, Any] | None, space: Space | None,
               members: list[tuple[str, float | None]]) -> None:
        if study_id is not None:                   # one writer per study at a time: contiguous numbers, one sweep record
            name = connection.execute(select(_STUDIES.c.study_name).where(_STUDIES.c.study_id == study_id).with_for_update()).scalar_one()
            items = sorted({f"plan:{h}" for h, _ in members})   # their claims are done, with the results in this transaction
            if recorded := self._recorded(connection, name, items):
                members = [m for m in members if m[0] not in recorded]
                trials = [t for t in trials if space is None or space.hash_idx(t.idx) not in recorded]
            if members:
                last = connection.execute(select(func.max(MEMBERS.c.seq)).where(MEMBERS.c.study_name == name)).scalar_one()
                start = 0 if last is None else last + 1          # the primary key's last entry: no count of the whole study
                connection.execute(insert(MEMBERS), [{"study_name": name, "seq": start + i, "plan_hash": h, "value": v}
                                                     for i, (h, v) in enumerate(members)])
                for condition in in_chunks(CLAIMS.c.item, items):
                    connection.execute(CLAIMS.update().where(CLAIMS.c.study_name == name, condition).values(state="done"))
        if rows:
            values = [{"objective": objective, "mode": mode, "plan_hash": r.plan_hash, "best_cycles": r.cycles,
                       "correct": int(r.correct), "max_abs": r.max_abs, "plan": json.dumps([int(i) for i in r.idx])}
                      for r in rows]
            dialect_insert = sqlite_insert if self.sqlite else postgresql_insert
            connection.execute(dialect_insert(EVALUATIONS).on_conflict_do_nothing(), values)     # idempotent on both
            killed = [{"objective": objective, "mode": mode, "plan_hash": r.plan_hash, "limit_s": r.timed_out_s}
                      for r in rows if r.timed_out_s is not None]
            reasons = [{"objective": objective, "mode": mode, "plan_hash": r.plan_hash,
                        "reason": r.reason.replace("\0", "\\0")}                    # PostgreSQL's text holds no NUL
                       for r in rows if r.reason is not None]
            for table, extra in ((TIMEOUTS, killed), (REASONS, reasons)):
                if extra:
                    connection.execute(dialect_insert(table).on_conflict_do_nothing(), extra)
        if trials and study_id is not None and space is not None:
            self._insert_trials(connection, study_id, trials, space)
        if sweep is not None:
            put_sweep(connection, sweep)

    @staticmethod
    def _recorded(connection: Any, name: str, items: list[str]) -> set[str]:
        """The plans of claim ``items`` (``plan:HASH``) that study ``name`` has recorded already: their claims are done.
        A worker that was stopped (suspended, paused) past the heartbeat timeout finds on waking that another redid its
        plans, and each is recorded once."""
        return {item.removeprefix("plan:") for condition in in_chunks(CLAIMS.c.item, items)
                for item in connection.execute(select(CLAIMS.c.item).where(CLAIMS.c.study_name == name, CLAIMS.c.state == "done",
                                                                            condition)).scalars()}

    def study_lock(self, connection: Any, name: str) -> bool:
        """Lock study ``name``'s row until the transaction ends (PostgreSQL; SQLite's writes are serial anyway);
        False when the study does not exist."""
        if self.sqlite:
            return True
        return connection.execute(select(_STUDIES.c.study_id).where(_STUDIES.c.study_name == name).with_for_update()).first() is not None

    def now(self, connection: Any) -> float:
        """The database server's clock in seconds since the epoch: one clock for workers on every host."""
        query = ("SELECT (julianday('now') - 2440587.5) * 86400.0" if self.sqlite else "SELECT extract(epoch from clock_timestamp())")
        return float(connection.execute(text(query)).scalar_one())

    @staticmethod
    def _insert_trials(connection: Any, study_id: int, trials: list[TrialRecord], space: Space) -> None:
        trials_t, values_t = models.TrialModel.__table__, models.TrialValueModel.__table__
        params_t, attrs_t = models.TrialParamModel.__table__, models.TrialUserAttributeModel.__table__
        count = connection.execute(select(func.count()).select_from(trials_t).where(trials_t.c.study_id == study_id)).scalar_one()
        now = _now()
        ids = []
        for number, record in enumerate(trials, start=count):
            state = TrialState.COMPLETE if record.value is not None else TrialState.FAIL     # infeasible, incorrect, not measured
            result = connection.execute(insert(trials_t).values(number=number, study_id=study_id, state=state,
                                                                datetime_start=now, datetime_complete=now))
            ids.append(result.inserted_primary_key[0])
        values, params, attrs = [], [], []
        distributions = {name: distribution_to_json(d) for name, d in space.shown_distributions.items()}
        for trial_id, record in zip(ids, trials, strict=True):
            if record.value is not None:
                stored, kind = models.TrialValueModel.value_to_stored_repr(record.value)
                values.append({"trial_id": trial_id, "objective": 0, "value": stored, "value_type": kind})
            for name, value in space.shown_internal(record.idx).items():    # real values, as a person reads them
                params.append({"trial_id": trial_id, "param_name": name, "param_value": value, "distribution_json": distributions[name]})
            for key, value in {"plan_hash": space.hash_idx(record.idx), **record.attrs}.items():
                attrs.append({"trial_id": trial_id, "key": key, "value_json": json.dumps(value)})
        if values:
            connection.execute(insert(values_t), values)
        connection.execute(insert(params_t), params)
        connection.execute(insert(attrs_t), attrs)
