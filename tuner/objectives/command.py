"""The command objective: a workspace's own ``benchmark.py``, run in an isolated temporary copy.

The candidate is written as the copy's ``kernel_plan.json``; the workspace's own plan is never
touched. The arguments are a fixed list (no shell), so no plan value reaches a shell.

Real benchmarks misbehave. Each run is its own process group: one that outlives ``timeout_s`` is
killed with the whole group, and the group is killed after every run too, so nothing it started is
left behind. In a search, a run that hangs, crashes or prints no JSON makes that plan a failed
evaluation whose reason (with the stderr tail) is kept in the trial, and the search goes on; a single
report (``run_objective``...) raises :class:`ObjectiveError` with the same reason. With ``repeats`` > 1 every
plan is run that many times and valued by the median; the samples go into the trial (noisy timings).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from tuner.objectives.base import Evaluations, ObjectiveError
from tuner.plan import SPACE, decode, plan_json
from tuner.task.suites import MODES

_IGNORE = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.db", "*.db-*", "studies", ".pytest_cache")


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class CommandObjective:
    """Scores plans by running ``python benchmark.py --json --mode M`` of ``workspace``."""

    space = SPACE
    modes = MODES

    def __init__(self, workspace: str | Path, python: str = sys.executable, timeout_s: float = 120.0, repeats: int = 1) -> None:
        self._copy: Path | None = None
        self.workspace = Path(workspace).resolve()
        script = self.workspace / "benchmark.py"
        if not script.is_file():
            raise ObjectiveError(f"no benchmark.py in workspace {str(self.workspace)!r}")
        self.python, self.timeout_s, self.repeats = python, timeout_s, repeats
        self.name = "command:" + hashlib.sha256(script.read_bytes()).hexdigest()[:12] + (f":median{repeats}" if repeats > 1 else "")

    def _sandbox(self) -> Path:
        if self._copy is None:
            root = Path(tempfile.mkdtemp(prefix="tuner-objective-"))
            self._copy = root / "workspace"
            shutil.copytree(self.workspace, self._copy, ignore=_IGNORE, symlinks=True)
        return self._copy

    def close(self) -> None:
        """Remove the private copy."""
        if self._copy is not None:
            shutil.rmtree(self._copy.parent, ignore_errors=True)
            self._copy = None

    def feasible(self, idx: np.ndarray) -> np.ndarray:
        return np.ones(len(idx), dtype=bool)

    def cycles(self, idx: np.ndarray, mode: str) -> np.ndarray:
        return self.evaluate(idx, mode).cycles

    def _run(self, plan_text: str, mode: str) -> dict[str, Any]:
        copy = self._sandbox()
        (copy / "kernel_plan.json").write_text(plan_text, encoding="utf-8")
        process = subprocess.Popen([self.python, "benchmark.py", "--json", "--mode", mode], cwd=copy, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process.pid)
            process.communicate()
            raise ObjectiveError(f"benchmark.py --mode {mode} took over {self.timeout_s:g} s and was killed") from None
        finally:
            _kill_group(process.pid)                  # whatever it left running goes with it
        if process.returncode != 0:
            raise ObjectiveError(f"benchmark.py --mode {mode} exited {process.returncode}: {stderr.strip()[-500:]}")
        try:
            report = json.loads(stdout)
        except json.JSONDecodeError:
            report = None
        if not isinstance(report, dict):
            raise ObjectiveError(f"benchmark.py --mode {mode} printed no JSON object: {stdout[:200]!r}; stderr: {stderr.strip()[-300:]}")
        return report

    def report(self, plan: dict[str, Any], mode: str) -> dict[str, Any]:
        return self._run(plan_json(plan), mode)

    def evaluate(self, idx: np.ndarray, mode: str) -> Evaluations:
        """``repeats`` runs per configuration, valued by their median (every sample kept); a run that fails
        (hangs, crashes, prints no JSON) makes a failed evaluation with its reason, and the batch goes on."""
        n = len(idx)
        cycles, correct, max_abs = np.full(n, np.inf), np.zeros(n, dtype=bool), np.full(n, np.nan)
        reasons: list[str | None] = [None] * n
        samples: list[list[float]] = [[] for _ in range(n)]
        for i, row in enumerate(np.asarray(idx)):
            reports = []
            try:
                for _ in range(self.repeats):
                    reports.append(self._run(plan_json(decode(row)), mode))
                    samples[i].append(_best_cycles(reports[-1]))
            except ObjectiveError as exc:
                reasons[i], samples[i] = str(exc), []
                continue
            cycles[i] = float(np.median(samples[i]))
            correct[i] = all(r.get("correct") is True for r in reports)
            max_abs[i] = max(_number(r.get("max_abs")) for r in reports)
        return Evaluations(cycles=cycles, correct=correct, max_abs=max_abs, reasons=reasons,
                           samples=samples if self.repeats > 1 else [])

    def __del__(self) -> None:
        self.close()


def _number(value: Any) -> float:
    """``value`` as a float when it is a number; NaN otherwise."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def _best_cycles(report: dict[str, Any]) -> float:
    """A run's ``best_cycles`` (lower is better); :class:`ObjectiveError` with the reason when the plan is infeasible
    or the report's value is not a finite positive number (a benchmark that lies is a failed evaluation)."""
    if not report.get("feasible", True) or report.get("best_cycles") is None:
        raise ObjectiveError(str(report.get("reason") or "infeasible")[:500])
    value = _number(report["best_cycles"])
    if not math.isfinite(value) or value <= 0:
        raise ObjectiveError(f"benchmark.py printed best_cycles {str(report['best_cycles'])[:40]!r}, not a positive number")
    return value
