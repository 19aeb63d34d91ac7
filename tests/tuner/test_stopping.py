"""A stop signal (Ctrl-C, SIGTERM) at any line of the history's database work: the stop reaches the caller, the work is
whole or absent, and nothing is left locked.

Raised inside SQLAlchemy's own cleanup, a Ctrl-C once left a transaction open, or a lock of the connection pool taken,
and the saving that follows waited on it (for 60 s a try) or for ever: a search did not stop. The sweep runs in a
child process (this file, run as a script), so that such a hang fails the test at its time limit instead of hanging it.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

OPERATIONS = ("write", "study", "trials")
CONNECTION_CODE = tuple(f"sqlalchemy/{name}.py" for name in ("pool/base", "pool/impl", "engine/base"))


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_stop_signal_at_any_line_of_database_work_stops_it_whole_and_leaves_nothing_locked(operation, tmp_path):
    run = subprocess.run([sys.executable, __file__, operation, str(tmp_path / "history.db")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    sweep = json.loads(run.stdout)
    assert sweep["lines"] > 100 and sweep["signalled"] >= 0.9 * sweep["lines"], sweep    # it reached every line
    assert sweep["stopped"] == sweep["signalled"], sweep          # no stop was lost
    assert sweep["locked"] == [] and sweep["partial"] == [], sweep


def test_a_stop_waits_for_the_database_work_and_a_second_signal_joins_it(monkeypatch):
    from tuner import stopping

    monkeypatch.setattr(stopping, "ESCAPE_S", 1e9)
    reached = []
    with pytest.raises(KeyboardInterrupt) as raised, stopping.on(), stopping.held():      # database work
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)         # Ctrl-C pressed twice, or a kill after it: one stop
        reached.append("the work ends")
    assert reached == ["the work ends"] and not isinstance(raised.value, stopping.Terminated)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler       # as before


def test_a_signal_after_a_long_wait_stops_at_once_and_a_further_one_does_not_cut_the_saving_short(monkeypatch):
    from tuner import stopping

    monkeypatch.setattr(stopping, "ESCAPE_S", 0.0)  # the first stop has waited long enough: the work hangs
    reached = []
    with pytest.raises(stopping.Terminated), stopping.on():
        try:
            with stopping.held():
                signal.raise_signal(signal.SIGINT)
                reached.append("after the first")
                signal.raise_signal(signal.SIGTERM)
                reached.append("after the second")
        finally:
            with stopping.held():                   # the saving
                signal.raise_signal(signal.SIGINT)
                reached.append("saved")
    assert reached == ["after the first", "saved"]


def test_a_stop_that_a_finalizer_swallowed_is_raised_again_between_evaluations_and_not_reported(tmp_path, capsys):
    """Python only reports an exception raised in a finalizer or a weak reference's callback, and goes on: a Ctrl-C
    that came there was lost, the search went on, and the handlers by then ignored a second one."""
    import weakref

    from conftest import toy_cache

    from tuner import stopping
    from tuner.history import History
    from tuner.objectives.cache import CacheObjective
    from tuner.search import Search, Spec
    from tuner.strategies import STRATEGIES

    knobs = {"bx": [16 * i for i in range(1, 9)], "tile": list(range(1, 9))}
    cache = CacheObjective(toy_cache(tmp_path, {(bx, tile): bx / 16 + tile for bx in knobs["bx"] for tile in knobs["tile"]},
                                     tune_params=knobs))
    evaluate, calls = cache.evaluate, []

    def swallowing(idx, mode):                      # the signal comes while a callback runs
        calls.append(len(idx))
        if len(calls) == 2:
            class Owner:
                pass
            owner = Owner()
            ref = weakref.ref(owner, lambda _: signal.raise_signal(signal.SIGINT))
            del owner
            assert ref() is None
        return evaluate(idx, mode)

    cache.evaluate = swallowing
    search = Search(History(f"sqlite:///{tmp_path / 'h.db'}"), cache, Spec(strategy="quick", mode="time", max_evals=40, seed=0))
    with pytest.raises(KeyboardInterrupt), stopping.on():
        STRATEGIES["quick"](search)
    search.close()
    assert len(calls) == 2 and len(search.seen) < 40                        # it stopped at the next evaluation
    assert "Exception ignored" not in capsys.readouterr().err


def test_other_exceptions_of_finalizers_are_still_reported(monkeypatch):
    import weakref

    from tuner import stopping

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)

    class Owner:
        pass

    with stopping.on():
        owner = Owner()
        ref = weakref.ref(owner, lambda _: 1 / 0)
        del owner
    assert ref() is None and [type(r.exc_value) for r in reported] == [ZeroDivisionError]
    assert sys.unraisablehook == reported.append                                # as before


def _sweep(operation: str, database: Path) -> dict[str, object]:
    """For each line K of one ``operation`` (as it runs once warm), run it with SIGINT raised at its K-th line."""
    import numpy as np

    from tuner import stopping
    from tuner.history import History, Row

    history = History(f"sqlite:///{database}")
    history.study("study")
    done = 0

    def once(at: int) -> tuple[int, bool]:
        """Run the operation with a stop at its line ``at``: (lines it ran, whether the stop reached here)."""
        nonlocal done
        done += 1
        rows = [Row(f"{done}-{i}", float(done), True, 0.0, np.array([done, i], dtype=np.int16)) for i in range(2)]
        lines = 0

        def trace(frame: Any, event: str, arg: object) -> object:
            nonlocal lines
            if event == "line" and frame.f_code.co_filename.endswith(CONNECTION_CODE):
                lines += 1
                if lines == at:
                    signal.raise_signal(signal.SIGINT)
            return trace

        try:
            with stopping.on():
                sys.settrace(trace)
                try:
                    {"write": lambda: history.write("objective", "dev", rows),
                     "study": lambda: history.study(f"study-{done}"),
                     "trials": lambda: history.trials("study")}[operation]()
                finally:
                    sys.settrace(None)
        except KeyboardInterrupt:
            return lines, True
        return lines, False

    def locked() -> bool:
        probe = sqlite3.connect(database, timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            probe.close()

    once(0)
    lines, _ = once(0)                              # warm: statements compiled, tables known
    out: dict[str, list[int] | int] = {"lines": lines, "signalled": 0, "stopped": 0, "locked": [], "partial": []}
    for at in range(1, lines + 1):
        ran, stopped = once(at)
        out["signalled"] += ran >= at
        out["stopped"] += stopped
        if locked():
            out["locked"].append(at)
        if operation == "write":
            with sqlite3.connect(database) as connection:
                stored = connection.execute("SELECT count(*) FROM tuner_evaluations WHERE plan_hash LIKE ?", (f"{done}-%",)).fetchone()[0]
            if stored not in (0, 2):
                out["partial"].append(at)
    history.close()
    return out


if __name__ == "__main__":
    print(json.dumps(_sweep(sys.argv[1], Path(sys.argv[2]))))
