"""Cooperating workers: processes on any hosts that share one study through its history.

Every unit of a study's work is claimed in the history before it is scored, in one transaction under
the study's lock: a plan (``plan:HASH``) or a range of an exhaustive profile (``range:START``). A
claim is granted when nobody holds it, when its holder is no longer alive, or when it fits the
study's evaluation budget (the sweep record's ``evaluations``, which only claims raise). So no plan
is scored twice, the budget is the study's whatever the number of workers, and a worker's results
become ``done`` in the same transaction that stores them.

A worker is alive while its heartbeat (a thread writing the database's clock every ``HEARTBEAT_S``)
is younger than :func:`stale_s` (twice the history's outage window); on the worker's own machine, a process
that no longer exists is dead at once. A dead worker's claims go to whoever asks for them next, as Optuna's
``heartbeat_interval`` and ``fail_stale_trials`` do for trials.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, and_, select

from tuner.history import CLAIMS, MEMBERS, OUTAGE_S, SWEEPS, WORKERS, History, in_chunks, outlasting_outages, put_sweep

HEARTBEAT_S = 10.0                  # how often a worker says it is alive


def stale_s(history: History) -> float:
    """How long a worker of ``history`` may be silent before it is dead (its claims are free): twice the history's
    ``outage_s``, so that one that waited out a failing database is not taken for dead, and never less than twice the
    default ``OUTAGE_S`` (a shorter window is no reason to take a worker between two heartbeats for dead)."""
    return 2 * max(history.outage_s, OUTAGE_S)


def _local_key() -> str:
    """This machine's boot and this process's pid namespace: processes with the same key can check each other's pids."""
    parts = []
    for path in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/pid"):
        try:
            parts.append(os.readlink(path) if path.endswith("/pid") else Path(path).read_text().strip())
        except OSError:
            parts.append("?")
    return ":".join(parts)[:128]


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs: it exists and is not a zombie (killed, its parent not having waited for it yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def _alive(row: Any, now: float, stale_s: float, local: str, me: str | None = None) -> bool:
    """Whether the worker of a ``tuner_workers`` row is alive at ``now``: its heartbeat is fresh and, on this machine
    (``local``), its process runs (``me`` is the asking worker, alive by definition)."""
    return row.heartbeat >= now - stale_s and (row.local != local or row.worker == me or _pid_alive(row.pid))


def studies_at_work(history: History) -> set[str]:
    """The studies that a live worker is on now. A search recorded as running that none is on has lost its processes
    (killed, or its machine went down) without saving its state."""
    with history.connect() as connection:
        now = history.now(connection)
        rows = connection.execute(select(WORKERS)).all()
    local = _local_key()
    return {row.study_name for row in rows if _alive(row, now, stale_s(history), local)}


@dataclass
class Claimed:
    """The answer to a claim: items granted to this worker, held by live others, and done (by anyone)."""

    granted: list[str] = field(default_factory=list)
    elsewhere: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)


class Worker:
    """This process, working on study ``study_name`` of ``history``. ``sweep`` is the study's sweep record
    (strategy, objective, mode, target), created by the first claim. :meth:`leave` ends the work."""

    def __init__(self, history: History, study_name: str, sweep: dict[str, Any], heartbeat_s: float = HEARTBEAT_S) -> None:
        self.history, self.study_name, self.sweep = history, study_name, sweep
        self.heartbeat_s, self.stale_s = heartbeat_s, stale_s(history)
        self.host, self.local, self.pid = socket.gethostname()[:64], _local_key(), os.getpid()
        self.id = f"{self.host}:{self.pid}:{uuid.uuid4().hex[:8]}"
        self.evaluations = 0                                # the study's evaluations, as of this worker's join or last claim
        self.slot = self._join()
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name=f"heartbeat {self.id}", daemon=True)
        self._beat.start()

    # --- membership -------------------------------------------------------------------------

    def _live(self, connection: Connection, workers: Iterable[str]) -> set[str]:
        """Which of ``workers`` are alive now (on the database's clock)."""
        wanted = sorted(set(workers))
        if not wanted:
            return set()
        now = self.history.now(connection)
        rows = [row for condition in in_chunks(WORKERS.c.worker, wanted) for row in connection.execute(select(WORKERS).where(condition))]
        return {row.worker for row in rows if _alive(row, now, self.stale_s, self.local, self.id)}

    @outlasting_outages
    def _join(self) -> int:
        """Register on the study; the slot is the lowest one no live worker of the study holds."""
        with self.history.begin() as connection:
            self.history.study_lock(connection, self.study_name)
            rows = connection.execute(select(WORKERS.c.worker, WORKERS.c.slot).where(WORKERS.c.study_name == self.study_name)).all()
            live = self._live(connection, [w for w, _ in rows])
            taken = {slot for w, slot in rows if w in live}
            slot = next(s for s in range(len(taken) + 1) if s not in taken)
            dead = [w for w, _ in rows if w not in live]
            if dead:
                connection.execute(WORKERS.delete().where(WORKERS.c.worker.in_(dead)))
            self._register(connection, slot)
            self._count(connection)
        return slot

    def _register(self, connection: Connection, slot: int) -> None:
        connection.execute(WORKERS.insert().values(worker=self.id, study_name=self.study_name, slot=slot, host=self.host,
                                                   local=self.local, pid=self.pid, heartbeat=self.history.now(connection)))

    def _heartbeat(self) -> None:
        """Every ``heartbeat_s``: the database's clock as this worker's heartbeat. A worker stopped past the timeout (a
        suspended job) may have been removed meanwhile by one that joined; woken, it registers again, in its slot."""
        while not self._stop.wait(self.heartbeat_s):
            try:
                with self.history.begin() as connection:
                    beat = connection.execute(WORKERS.update().where(WORKERS.c.worker == self.id)
                                              .values(heartbeat=self.history.now(connection)))
                    if not beat.rowcount:
                        self._register(connection, self.slot)
            except Exception:                   # a database that is briefly away: the next beat tries again
                continue

    def leave(self) -> None:
        """Stop the heartbeat and deregister: whatever this worker still holds is free for the others."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._beat.join()
        with self.history.begin() as connection:
            connection.execute(WORKERS.delete().where(WORKERS.c.worker == self.id))

    # --- claims -----------------------------------------------------------------------------

    def _count(self, connection: Connection) -> None:
        """Read the study's evaluations from its sweep record."""
        current = connection.execute(select(SWEEPS.c.evaluations).where(SWEEPS.c.study_name == self.study_name)).scalar()
        self.evaluations = current or 0

    def _add(self, connection: Connection, added: int) -> None:
        """Raise the study's evaluations by ``added`` (the sweep record is created with the first claim)."""
        self.evaluations += added
        if added:
            put_sweep(connection, {**self.sweep, "study_name": self.study_name, "evaluations": self.evaluations})

    @outlasting_outages
    def claim(self, items: list[tuple[str, int, list[int] | None]], budget: int) -> Claimed:
        """Claim ``(item, size, plan)`` in order (each item once). A new item is granted while the study's evaluations plus its
        ``size`` stay within ``budget``; one held by a dead worker is taken over (it was counted when first claimed)."""
        out = Claimed()
        with self.history.begin() as connection:
            self.history.study_lock(connection, self.study_name)
            names = sorted({item for item, _, _ in items})
            existing = {}
            for condition in in_chunks(CLAIMS.c.item, names):
                existing |= {row.item: row for row in connection.execute(select(CLAIMS).where(CLAIMS.c.study_name == self.study_name,
                                                                                               condition))}
            live = self._live(connection, [r.worker for r in existing.values() if r.state != "done"])
            self._count(connection)
            added, new, taken = 0, [], []
            for item, size, plan in items:
                row = existing.get(item)
                if row is not None and row.state == "done":
                    out.done.append(item)
                elif row is not None and row.worker != self.id and row.worker in live:
                    out.elsewhere.append(item)
                elif row is not None:
                    taken.append(item)
                    out.granted.append(item)
                elif self.evaluations + added + size <= budget:
                    added += size
                    new.append({"study_name": self.study_name, "item": item, "size": size, "worker": self.id, "state": "claimed",
                                "plan": None if plan is None else json.dumps(plan)})
                    out.granted.append(item)
            if new:
                connection.execute(CLAIMS.insert(), new)
            for condition in in_chunks(CLAIMS.c.item, taken):
                connection.execute(CLAIMS.update().where(CLAIMS.c.study_name == self.study_name, condition).values(worker=self.id))
            self._add(connection, added)
        return out

    @outlasting_outages
    def unfinished(self) -> tuple[list[list[int]], int]:
        """Plan claims of the study not done: the plans of those whose workers are dead (to redo), and how many
        live workers are still scoring."""
        with self.history.connect() as connection:
            rows = connection.execute(select(CLAIMS.c.worker, CLAIMS.c.plan).where(
                CLAIMS.c.study_name == self.study_name, CLAIMS.c.state == "claimed", CLAIMS.c.item.startswith("plan:"))
                .order_by(CLAIMS.c.item)).all()
            live = self._live(connection, [w for w, _ in rows])
        return [json.loads(p) for w, p in rows if w not in live and p is not None], sum(w in live for w, _ in rows)

    # --- ranges of a profile (exhaustive) ---------------------------------------------------

    @outlasting_outages
    def claim_range(self, total: int, size: int) -> tuple[int, int] | bool | None:
        """The next range of plans ``[start, stop)`` of a profile of ``total`` for this worker: a dead worker's
        first, else ``size`` more from the end of the claimed ones. ``None``: every range is claimed and done;
        ``False``: the rest are being scored by live workers."""
        with self.history.begin() as connection:
            self.history.study_lock(connection, self.study_name)
            held = connection.execute(select(CLAIMS.c.item, CLAIMS.c.size, CLAIMS.c.worker).where(
                CLAIMS.c.study_name == self.study_name, CLAIMS.c.item.startswith("range:"), CLAIMS.c.state == "claimed")
                .order_by(CLAIMS.c.item)).all()
            live = self._live(connection, [w for _, _, w in held])
            self._count(connection)
            for item, n, worker in held:
                if worker not in live or worker == self.id:      # this worker's own: a claim whose commit it did not hear of
                    connection.execute(CLAIMS.update().where(CLAIMS.c.study_name == self.study_name, CLAIMS.c.item == item)
                                       .values(worker=self.id))
                    start = int(item.removeprefix("range:"))
                    return start, start + n
            last = connection.execute(select(CLAIMS.c.item, CLAIMS.c.size).where(
                CLAIMS.c.study_name == self.study_name, CLAIMS.c.item.startswith("range:")).order_by(CLAIMS.c.item.desc()).limit(1)).first()
            start = 0 if last is None else int(last.item.removeprefix("range:")) + last.size
            if start >= total:
                return False if held else None
            stop = min(start + size, total)
            connection.execute(CLAIMS.insert().values(study_name=self.study_name, item=_range(start), size=stop - start, worker=self.id,
                                                      state="claimed"))
            self._add(connection, stop - start)
        return start, stop

    @outlasting_outages
    def complete_range(self, start: int, best: list[dict[str, Any]]) -> None:
        """Range ``start`` is scored: its best plans are its result, unless another worker's already are (this one was
        stopped past the heartbeat timeout, and its range redone)."""
        with self.history.begin() as connection:
            connection.execute(CLAIMS.update().where(and_(CLAIMS.c.study_name == self.study_name, CLAIMS.c.item == _range(start),
                                                          CLAIMS.c.state == "claimed"))
                               .values(state="done", result=json.dumps(best)))

    @outlasting_outages
    def range_results(self) -> list[dict[str, Any]]:
        """The best plans of every done range of the study, in profile order."""
        with self.history.connect() as connection:
            results = connection.execute(select(CLAIMS.c.result).where(
                CLAIMS.c.study_name == self.study_name, CLAIMS.c.item.startswith("range:"), CLAIMS.c.state == "done")
                .order_by(CLAIMS.c.item)).scalars()
            return [entry for text in results for entry in json.loads(text)]


def _range(start: int) -> str:
    return f"range:{start:015d}"                       # zero-padded: text order is profile order


def audit(history: History, study_name: str) -> dict[str, int]:
    """What the history says about a study's shared work. Consistent means: ``unfinished`` 0 once every worker is
    done; ``plan_claims`` == ``members`` == ``distinct_members`` (each claimed plan recorded once, none twice);
    ``claimed`` == ``counted`` (the sweep's evaluations); ``range_gaps`` 0 (a profile's ranges tile it once). ``done``:
    the evaluations whose results are recorded."""
    with history.connect() as connection:
        claims = connection.execute(select(CLAIMS.c.item, CLAIMS.c.size, CLAIMS.c.state).where(CLAIMS.c.study_name == study_name)).all()
        members = connection.execute(select(MEMBERS.c.plan_hash).where(MEMBERS.c.study_name == study_name)).scalars().all()
        counted = connection.execute(select(SWEEPS.c.evaluations).where(SWEEPS.c.study_name == study_name)).scalar() or 0
    ranges = sorted((int(item.removeprefix("range:")), size) for item, size, _ in claims if item.startswith("range:"))
    ends = [0, *(start + size for start, size in ranges)]
    return {"unfinished": sum(state != "done" for _, _, state in claims),
            "plan_claims": sum(item.startswith("plan:") for item, _, _ in claims),
            "members": len(members), "distinct_members": len(set(members)),
            "claimed": sum(size for _, size, _ in claims), "counted": counted,
            "done": sum(size for _, size, state in claims if state == "done"),
            "range_plans": sum(size for _, size in ranges),
            "range_gaps": sum(start != end for (start, _), end in zip(ranges, ends, strict=False))}
