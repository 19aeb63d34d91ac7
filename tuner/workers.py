"""``--workers N``: one search run by N local worker processes on one study, for example one per GPU.

Each worker is the same command (``python -m tuner ... --workers 1 --json``) with its own environment
(``--worker-env NAME=VALUE``, where ``{slot}`` becomes the worker's number, 0 to N-1): the workers
share the study through the history (:mod:`tuner.claims`), exactly as processes started by hand on
several hosts do. The result sums the workers' new evaluations and merges their best plans.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
from collections import Counter
from typing import Any

from tuner.search import REASONS_SHOWN, of_optimum
from tuner.stopping import Terminated

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
COORDINATED = "TUNER_WORKER_STDIN_IS_COORDINATOR"     # set for the workers ``run`` starts: their stdin is its pipe
SLOT = "TUNER_WORKER_SLOT"                            # and their number, 0 to N-1
COORDINATED_WORKER = threading.Event()                # set in a worker that ``run`` started
ORPHANED = threading.Event()                          # set in a worker whose coordinator is gone


class WorkersError(ValueError):
    """A bad ``--worker-env``, or a problem's file that only one process can read."""


class WorkerFailed(RuntimeError):
    """A worker of one of the main job's searches ended with an error of its own (not a signal)."""


def slot_environments(count: int, assignments: list[str]) -> list[dict[str, str]]:
    """The environment of each of ``count`` workers: this one's, with ``NAME=VALUE`` assignments (``{slot}`` in
    VALUE becomes the worker's number)."""
    pairs = []
    for text in assignments:
        name, sep, value = text.partition("=")
        if not sep or not ENV_NAME.fullmatch(name):
            raise WorkersError(f"--worker-env {text[:80]!r} is not NAME=VALUE (NAME: letters, digits and '_', not starting with a digit)")
        pairs.append((name, value))
    return [{**os.environ, **{name: value.replace("{slot}", str(slot)) for name, value in pairs}} for slot in range(count)]


def check_readable_again(objective: str, space: str | None) -> None:
    """:class:`WorkersError` where a file of the problem (the cache of ``cache:PATH``, the ``space`` file) is a pipe or a
    device: each worker reads it again, and a pipe (``cache:/dev/stdin``, a shell's ``<(...)``) gives what it holds to
    its first reader only."""
    files = {"cache file": objective.removeprefix("cache:")} if objective.startswith("cache:") else {}
    for what, path in (files | ({"space file": space} if space else {})).items():
        with contextlib.suppress(OSError):                  # one that cannot be read at all: the command says why
            if stat.S_ISFIFO(mode := os.stat(path).st_mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode):
                raise WorkersError(f"{what} {path[:200]!r} is a pipe or a device, which only one process can read, and every "
                                   "worker of --workers reads it: save it to a file")


def run(argv: list[str], count: int, assignments: list[str], mode: str) -> tuple[dict[str, Any], int]:
    """Run ``python -m tuner ARGV`` in ``count`` worker processes and wait for all of them (a stop signal, Ctrl-C included,
    is passed on: each saves its work). The combined result, ranked in ``mode``, and the exit status (:func:`exit_status`)."""
    environments = slot_environments(count, assignments)
    command = [sys.executable, "-m", "tuner", *argv, "--workers", "1", "--json"]
    # stdin: a pipe this process never writes to, closed when it ends (stop_with_coordinator)
    processes = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**env, COORDINATED: "1", SLOT: str(slot)},
                                  text=True) for slot, env in enumerate(environments)]
    outputs = []
    try:
        for process in processes:
            outputs.append(process.stdout.read())
            process.wait()
    except KeyboardInterrupt as exc:                  # a `kill -INT` of this process alone reaches no worker; one that a
        signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT    # terminal's Ctrl-C reached ignores this
        for process in processes:
            if process.poll() is None:
                process.send_signal(signum)
        for process in processes:
            process.wait()
        raise
    finally:
        for process in processes:
            process.stdin.close()
            process.stdout.close()
    codes = [p.returncode for p in processes]
    results = []
    for out in outputs:
        try:
            results.append(json.loads(out))
        except json.JSONDecodeError:
            results.append(None)
    combined = combine(results, codes, mode)
    return combined, exit_status(codes, results, combined["best"] is not None)


def exit_status(codes: list[int], results: list[dict[str, Any] | None], found: bool) -> int:
    """The workers' exit status from each one's (``returncode``: -N where signal N killed it) and result (``None`` where
    it printed none): the first failing one's (128 + N for a worker killed by signal N, as a shell says); else 1 when no
    worker ``found`` a configuration with a value, else 0. A worker that exited 1 with a result that has no best ran
    nothing: that is no failure of its own (the study's best decides)."""
    failing = [code if code > 0 else 128 - code for code, result in zip(codes, results, strict=True)
               if code and not (code == 1 and result is not None and result.get("best") is None)]
    return failing[0] if failing else int(not found)


def stop_with_coordinator() -> int | None:
    """In a worker that :func:`run` started: stop as on SIGTERM (saving the progress) once the process that started it
    is gone, even killed by SIGKILL, when its end of this worker's stdin closes; so that no worker measures on for nobody.
    This worker's number (``None`` in any other process)."""
    slot = os.environ.pop(SLOT, None)
    if os.environ.pop(COORDINATED, None) is not None:
        COORDINATED_WORKER.set()
        threading.Thread(target=_terminate_at_end_of, args=(sys.stdin.fileno(),), daemon=True).start()
    return int(slot) if slot is not None and slot.isdigit() else None


def _terminate_at_end_of(pipe: int) -> None:
    while os.read(pipe, 4096):                     # the coordinator writes nothing: this ends once it is gone (the raw
        pass                                       # descriptor: a buffered read would hold a lock the exit needs)
    ORPHANED.set()
    os.kill(os.getpid(), signal.SIGTERM)


def combine(results: list[dict[str, Any] | None], codes: list[int], mode: str) -> dict[str, Any]:
    """One result from the workers' results (``None`` for a worker that printed none): the study's evaluations,
    the sum of new ones, of those found in the history and of failed ones with their most common reasons, the longest
    worker's seconds, why the workers stopped (each reason once), on a replayed cache the fraction of its optimum reached,
    and the best plans any worker saw (correct in every mode checked first, then those not checked in another mode, then
    ``mode``'s value)."""
    done = [r for r in results if r is not None]
    top = {entry["plan_hash"]: entry for r in done for entry in r.get("top", [])}
    ranked = sorted(top.values(), key=lambda e: (not all(v for k, v in e.items() if k == "correct" or k.endswith("_correct")),
                                                  not any(k.endswith("_correct") for k in e),    # unchecked after checked, as
                                                  e[mode] if e[mode] is not None else float("inf"), e["plan_hash"]))  # a search ranks
    first = done[0] if done else {}
    reasons = sum((Counter(r["failure_reasons"]) for r in done), Counter())
    stops = dict.fromkeys(r["stopped"] for r in done)
    best = ranked[0] if ranked else None
    combined = {"study": first.get("study"), "strategy": first.get("strategy"), "target": first.get("target"), "mode": mode,
                "workers": len(results), "evaluations": max((r["evaluations"] for r in done), default=0),
                "new_evaluations": sum(r["new_evaluations"] for r in done), "cached": sum(r["cached"] for r in done),
                "seconds": max((r["seconds"] for r in done), default=0.0),
                "failed": sum(r["failed"] for r in done), "failure_reasons": dict(reasons.most_common(REASONS_SHOWN)),
                "cached_failed": sum(r["cached_failed"] for r in done), "stopped": "; ".join(stops) if stops else None,
                "per_worker": [{"slot": slot, "exit": code, "new_evaluations": r["new_evaluations"] if r else None,
                                "stopped": r["stopped"] if r else None} for slot, (r, code) in enumerate(zip(results, codes, strict=True))],
                "best": best}
    if "optimum" in first:                                  # a replayed cache: the fraction of its best the workers reached
        combined |= {"optimum": first["optimum"], "of_optimum": of_optimum(first["optimum"], best[mode] if best else None)}
    return combined | {"top": ranked[:5]}
