"""The command objectives: a benchmark program of a workspace, run in an isolated temporary copy of it.

``command`` (:class:`CommandObjective`) is the tensor plan's own ``benchmark.py``: the candidate is
written as the copy's ``kernel_plan.json``, so the workspace's own plan is never touched.
``command:PROGRAM`` (:class:`ProgramObjective`) is any program of the workspace over any space (a
T1 file): it reads one configuration as JSON on stdin and prints the time it measured. Either way
the arguments are a fixed list (no shell), so no configuration value reaches a shell.

Real benchmarks misbehave. Each run is its own process group: one that outlives ``timeout_s`` is
killed with the whole group, and the group is killed after every run too, so nothing it started is
left behind. In a search, a run that hangs, crashes or prints no result makes that configuration a
failed evaluation whose reason (with the stderr tail) is kept in the trial, and the search goes on.
With ``repeats`` > 1 every configuration is run that many times and valued by the median; the
samples go into the trial (noisy timings).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

import numpy as np

from tuner.objectives.base import TIME, Evaluations, ObjectiveError, TimedOut, as_float, ruled_out, value_key
from tuner.plan import SPACE, decode, plan_json
from tuner.space import Config, Space
from tuner.task.suites import MODES
from tuner.workspace import loads

OUTPUT_KEPT = 1 << 20                   # bytes kept of a run's stdout and of its stderr (their ends): no run can fill memory
CLOSE_GRACE_S = 1.0                     # seconds to wait for a run's pipes to close once it has ended and its group is killed
MEDIAN_OF = ":median"                   # a command objective's name ends so when its values are medians of repeated runs
REAPER = Path(__file__).with_name("reaper.py")     # kills the runs a tuner killed outright leaves behind
_IGNORE = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.db", "*.db-*", "studies", ".pytest_cache")


def repeats_of(objective: str) -> tuple[str, int]:
    """An objective's name without the runs its values are the median of, and how many (1: single runs)."""
    base, _, repeats = objective.partition(MEDIAN_OF)
    return base, int(repeats) if repeats.isdigit() else 1


def program_time(program: str, stdout: str, stderr: str) -> float:
    """The time (ms, positive and finite) that the last line of a run's ``stdout`` reports, as a number or
    ``{"time": T}``; :class:`ObjectiveError` with the reason otherwise: the ``error`` of ``{"error": "why"}``, or what
    the line was, with the end of ``stderr``. An ``error`` that is null, false or empty is none (a program that always
    prints the key)."""
    lines = stdout.strip().splitlines()
    try:
        result = loads(lines[-1]) if lines else None
    except ValueError:
        result = None
    if isinstance(result, dict) and result.get("error") not in (None, False, ""):
        raise ObjectiveError(str(result["error"])[:500])
    value = as_float(result.get("time") if isinstance(result, dict) else result)
    if not math.isfinite(value) or value <= 0:
        last = lines[-1][:100] if lines else ""
        raise ObjectiveError(f"{program} printed {last!r} as its last line, not a time (a positive number or "
                             f"{{\"time\": T}}){_tail(stderr, '; stderr: ', 300)}")
    return value


def _tail(stderr: str, lead: str, limit: int) -> str:
    """The last ``limit`` characters of a run's stderr after ``lead``, to end a reason; empty when it printed nothing."""
    tail = stderr.strip()[-limit:]
    return f"{lead}{tail}" if tail else ""


def _why_not_started(program: Path, exc: OSError) -> str:
    """Why ``program`` did not start, in the operator's terms: the system's reason, and for a script that exists,
    what in its first line the system could not run (an interpreter that is not there or is no program, a Windows line
    end) or that it lacks one."""
    try:
        with program.open("rb") as file:                  # a compiled benchmark may be large: its first line is enough
            first = file.read(200).partition(b"\n")[0]
    except OSError:
        first = b""
    interpreter = first[2:].strip(b" ").decode("utf-8", "replace") if first.startswith(b"#!") else None
    if interpreter is not None and exc.errno in (errno.ENOENT, errno.ENOEXEC):
        why = "does not exist" if exc.errno == errno.ENOENT else f"is not a program the system can run ({exc.strerror})"
        return f"the interpreter its first line names, {interpreter!r}, {why}"
    if exc.errno == errno.ENOEXEC:
        return f"{exc.strerror} (an executable script needs a first line such as #!/bin/sh)"
    return str(exc.strerror or exc)


def _keep_end(pipe: IO[bytes], kept: bytearray) -> None:
    """Read ``pipe`` to its end, keeping its last ``OUTPUT_KEPT`` bytes in ``kept`` (what a run's result and reason
    are read from: the last line of its stdout, the end of its stderr)."""
    with pipe:
        for chunk in iter(lambda: pipe.read1(1 << 16), b""):
            kept += chunk
            if len(kept) > 2 * OUTPUT_KEPT:
                del kept[:-OUTPUT_KEPT]
    del kept[:-OUTPUT_KEPT]


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class _Benchmark:
    """What the command objectives share: a private copy of the workspace, each run its own process group (killed past
    ``timeout_s`` and after the run), and ``repeats`` runs per configuration valued by their median. A subclass
    says how one run scores a configuration (:meth:`_once`)."""

    space: Space
    modes: tuple[str, ...]
    optimum = None                                     # a program's best is not known before it is run
    measures: str | None = None                        # the tensor plan's benchmark.py: one space

    def __init__(self, workspace: str | Path, entry: str, timeout_s: float, repeats: int) -> None:
        self._copy: Path | None = None
        self._reaper: tuple[subprocess.Popen[str], IO[str]] | None = None      # the reaper and the pipe to it
        self.workspace = Path(workspace).resolve()
        self.entry = entry                                 # the workspace's file that every run needs (the program)
        self.timeout_s, self.repeats = timeout_s, repeats

    def _named(self, scorer: bytes) -> str:
        """The objective's name in the history: ``command:`` and a digest of what scores (it changes when that does),
        with the repeats a value is the median of."""
        return "command:" + hashlib.sha256(scorer).hexdigest()[:12] + (f"{MEDIAN_OF}{self.repeats}" if self.repeats > 1 else "")

    def _sandbox(self) -> Path:
        """The private copy of the workspace, made again when the program is gone from it (a run that removed its
        folder, a cleaner of old temporary files): otherwise every later run would fail, and be kept as failed."""
        if self._copy is None or not (self._copy / self.entry).is_file():
            self._remove_copy()
            root = Path(tempfile.mkdtemp(prefix="tuner-objective-"))
            self._tell_reaper(f"copy {root}")
            self._copy = root / "workspace"
            shutil.copytree(self.workspace, self._copy, ignore=_IGNORE, symlinks=True)
        return self._copy

    def _remove_copy(self) -> None:
        if self._copy is not None:
            shutil.rmtree(self._copy.parent, ignore_errors=True)
            self._copy = None

    def close(self) -> None:
        """Remove the private copy and let the reaper go."""
        self._remove_copy()
        if self._reaper is not None:
            process, pipe = self._reaper
            with contextlib.suppress(OSError):
                pipe.close()
            process.wait()
            self._reaper = None

    def _tell_reaper(self, line: str) -> None:
        """Tell the reaper (:mod:`.reaper`, started with the first copy) of a run or a copy; one that is gone is let be."""
        if self._reaper is None:
            process = subprocess.Popen([sys.executable, "-I", str(REAPER)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, start_new_session=True, text=True)
            self._reaper = (process, process.stdin)
        with contextlib.suppress(OSError):
            self._reaper[1].write(line + "\n")
            self._reaper[1].flush()

    def _execute(self, argv: list[str], what: str, stdin: str | None = None) -> tuple[str, str]:
        """The standard output and error of one run of ``argv`` in the private copy (each its last ``OUTPUT_KEPT``
        bytes); :class:`ObjectiveError` saying why when it cannot start, outlives the timeout (it is killed with
        everything it started) or exits non-zero."""
        sandbox = self._sandbox()
        given = sandbox.parent / "stdin"                  # a file, so that a run that never reads its input cannot block the tuner
        given.write_text(stdin or "", encoding="utf-8")
        with given.open("rb") as source:
            try:
                process = subprocess.Popen(argv, cwd=sandbox, stdin=source, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           start_new_session=True)
            except OSError as exc:
                raise ObjectiveError(f"{what} cannot be started: {_why_not_started(sandbox / argv[0], exc)}") from None
        self._tell_reaper(f"run {process.pid}")
        kept = (bytearray(), bytearray())
        readers = [threading.Thread(target=_keep_end, args=(pipe, end), daemon=True)
                   for pipe, end in zip((process.stdout, process.stderr), kept, strict=True)]
        waiter = threading.Thread(target=process.wait, daemon=True)      # a blocking wait: no polling
        for thread in (*readers, waiter):
            thread.start()
        try:
            waiter.join(self.timeout_s)
            if waiter.is_alive():
                raise TimedOut(f"{what} took over {self.timeout_s:g} s and was killed", self.timeout_s)
        finally:
            _kill_group(process.pid)                  # whatever it started goes with it, and its pipes close
            self._tell_reaper(f"done {process.pid}")  # before the wait: until then no other group can take its number
            process.wait()
            closed = time.monotonic() + CLOSE_GRACE_S
            for reader in readers:                    # a process that left the group may hold a pipe open: what came is kept
                reader.join(max(0.0, closed - time.monotonic()))
        stdout, stderr = (bytes(end).decode("utf-8", "replace") for end in kept)
        if process.returncode != 0:
            ended = (f"was killed by {signal.Signals(-process.returncode).name}" if -process.returncode in signal.valid_signals()
                     else f"exited {process.returncode}")
            raise ObjectiveError(f"{what} {ended}{_tail(stderr, ': ', 500)}")
        return stdout, stderr

    def _once(self, row: np.ndarray, mode: str) -> tuple[float, bool, float]:
        """One run's value (lower is better), whether it is correct and its numeric error (NaN: unknown);
        :class:`ObjectiveError` with the reason when the configuration has no value."""
        raise NotImplementedError

    def feasible(self, idx: np.ndarray) -> np.ndarray:
        return self.space.allowed(idx)

    @property
    def linked(self) -> tuple[tuple[int, ...], ...]:
        return self.space.linked

    def cycles(self, idx: np.ndarray, mode: str) -> np.ndarray:
        return self.evaluate(idx, mode).cycles

    def evaluate(self, idx: np.ndarray, mode: str) -> Evaluations:
        """``repeats`` runs per configuration, valued by their median (every sample kept); a run that fails
        (hangs, crashes, prints no result) makes a failed evaluation with its reason, and the batch goes on."""
        n = len(idx)
        cycles, correct, max_abs = np.full(n, np.inf), np.zeros(n, dtype=bool), np.full(n, np.nan)
        reasons: list[str | None] = [None] * n
        timed_out: list[float | None] = [None] * n
        samples: list[list[float]] = [[] for _ in range(n)]
        allowed = self.feasible(np.asarray(idx))
        for i, row in enumerate(np.asarray(idx)):
            if not allowed[i]:
                reasons[i] = ruled_out(self.space, row)
                continue
            runs = []
            try:
                for _ in range(self.repeats):
                    runs.append(self._once(row, mode))
            except ObjectiveError as exc:
                reasons[i] = str(exc)
                timed_out[i] = exc.limit_s if isinstance(exc, TimedOut) else None
                continue
            samples[i] = [value for value, _, _ in runs]
            cycles[i] = float(np.median(samples[i]))
            correct[i] = all(ok for _, ok, _ in runs)
            errors = [error for _, _, error in runs if not math.isnan(error)]
            max_abs[i] = max(errors) if errors else math.nan
        return Evaluations(cycles=cycles, correct=correct, max_abs=max_abs, reasons=reasons,
                           samples=samples if self.repeats > 1 else [],
                           timed_out=timed_out if any(limit is not None for limit in timed_out) else [])

    def __del__(self) -> None:
        try:                                        # noqa: SIM105 (contextlib.suppress itself may be gone by then)
            self.close()
        except Exception:                           # at the interpreter's exit the modules it needs (contextlib, shutil)
            pass                                    # may be gone: the reaper removes the copy then


class CommandObjective(_Benchmark):
    """Scores plans by running ``python benchmark.py --json --mode M`` of ``workspace``."""

    space = SPACE
    modes = MODES
    unit = "cycles"
    linked = ()                                       # its check rules nothing out

    def __init__(self, workspace: str | Path, python: str = sys.executable, timeout_s: float = 120.0, repeats: int = 1) -> None:
        super().__init__(workspace, "benchmark.py", timeout_s, repeats)
        script = self.workspace / "benchmark.py"
        if not script.is_file():
            raise ObjectiveError(f"no benchmark.py in workspace {str(self.workspace)!r}")
        self.python = python
        self.name = self._named(script.read_bytes())
        self.label = "the tensor plan (the workspace's benchmark.py)"

    def feasible(self, idx: np.ndarray) -> np.ndarray:
        return np.ones(len(idx), dtype=bool)          # the benchmark itself says which plans cannot run

    def _run(self, plan_text: str, mode: str) -> dict[str, Any]:
        (self._sandbox() / "kernel_plan.json").write_text(plan_text, encoding="utf-8")
        what = f"benchmark.py --mode {mode}"
        stdout, stderr = self._execute([self.python, "benchmark.py", "--json", "--mode", mode], what)
        if not isinstance(report := _report(stdout), dict):
            raise ObjectiveError(f"{what} printed no JSON object: {stdout[:200]!r}{_tail(stderr, '; stderr: ', 300)}")
        return report

    def report(self, plan: dict[str, Any], mode: str) -> dict[str, Any]:
        return self._run(plan_json(plan), mode)

    def _once(self, row: np.ndarray, mode: str) -> tuple[float, bool, float]:
        report = self._run(plan_json(decode(row)), mode)
        return _best_cycles(report), report.get("correct") is True, as_float(report.get("max_abs"))


class ProgramObjective(_Benchmark):
    """Scores configurations of ``space`` by running ``argv`` (a program of the workspace and its arguments; a
    ``.py`` file runs with this Python) once per configuration, in a private copy of the workspace.

    The program reads the configuration as a JSON object (knob name to value) on stdin. The last line it
    prints is the result: the measured time (ms, lower is better) as a JSON number or ``{"time": T}``, or
    ``{"error": "why"}`` for a configuration that cannot run. Exiting non-zero, outliving the timeout or
    printing no positive time makes a failed evaluation with that reason. The one mode is ``time``.
    """

    modes = (TIME,)
    unit = "ms"

    def __init__(self, workspace: str | Path, argv: list[str], space: Space, timeout_s: float = 120.0, repeats: int = 1) -> None:
        super().__init__(workspace, argv[0], timeout_s, repeats)
        program = self.workspace / argv[0]
        if not program.is_file():
            raise ObjectiveError(f"no program {argv[0]!r} in workspace {str(self.workspace)!r}")
        self.space, self.program = space, argv[0]
        self._argv = [sys.executable, *argv] if argv[0].endswith(".py") else [os.path.join(".", *Path(argv[0]).parts), *argv[1:]]
        code = program.read_bytes()
        self.name = self._named(code + "\0".join(["", *argv[1:], space.fingerprint]).encode())
        self.measures = self._named(code + "\0".join(["", *argv[1:], *sorted(space.names)]).encode())   # whatever the values
        self.label = "program " + " ".join(argv)[:200]

    def _once(self, row: np.ndarray, mode: str) -> tuple[float, bool, float]:
        stdout, stderr = self._execute(self._argv, self.program, json.dumps(self.space.decode(row)))
        return program_time(self.program, stdout, stderr), True, math.nan

    def report(self, plan: Config, mode: str = TIME) -> dict[str, Any]:
        result = self.evaluate(self.space.encode(plan)[None], mode)
        feasible = bool(result.feasible[0])
        out: dict[str, Any] = {"mode": TIME, "program": self.program, "configuration": plan, "feasible": feasible,
                               value_key(TIME, self.unit): float(result.cycles[0]) if feasible else None, "correct": feasible}
        if not feasible:
            out["reason"] = result.reasons[0]
        if result.samples:
            out["samples"] = result.samples[0]
        return out


def _report(stdout: str) -> Any:
    """The JSON value that a benchmark's ``stdout`` ends with, starting a line: lines printed before it (a warning, a
    banner) are passed over, as a program's are before its last line. ``None`` where there is none."""
    for start in [0, *(m.start() for m in re.finditer(r"\n\{", stdout))]:
        try:
            return loads(stdout[start:])
        except ValueError:
            continue
    return None


def _best_cycles(report: dict[str, Any]) -> float:
    """A run's ``best_cycles`` (lower is better); :class:`ObjectiveError` with the reason when the plan is infeasible
    or the report's value is not a finite positive number (a benchmark that lies is a failed evaluation)."""
    if not report.get("feasible", True) or report.get("best_cycles") is None:
        raise ObjectiveError(str(report.get("reason") or "infeasible")[:500])
    value = as_float(report["best_cycles"])
    if not math.isfinite(value) or value <= 0:
        raise ObjectiveError(f"benchmark.py printed best_cycles {str(report['best_cycles'])[:40]!r}, not a positive number")
    return value
