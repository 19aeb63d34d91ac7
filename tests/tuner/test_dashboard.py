"""optuna-dashboard, started for real on 127.0.0.1, shows the studies and trials the tuner wrote."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tuner import service


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def test_dashboard_lists_the_tuner_studies_and_trials(ctx, workspace):
    service.local_neighborhood_search(ctx, fixture="tensor_plan_attempt1_best", max_evals=60)
    service.bounded_exhaustive_search(ctx, "iteration3_dev_core", max_evals=262_144, include_final=False)
    executable = shutil.which("optuna-dashboard") or str(Path(sys.executable).parent / "optuna-dashboard")
    if not Path(executable).exists():
        pytest.fail("optuna-dashboard is not installed (it is in the test extra)")
    port = _free_port()
    db = workspace / "studies" / "history.db"
    proc = subprocess.Popen([executable, f"sqlite:///{db}", "--host", "127.0.0.1", "--port", str(port), "--server", "wsgiref"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                summaries = _get(f"http://127.0.0.1:{port}/api/studies")["study_summaries"]
                break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("optuna-dashboard did not answer within 60 s")
        names = {s["study_name"]: s["study_id"] for s in summaries}
        assert any(n.startswith("checkpoint:fixture:tensor_plan_attempt1_best") for n in names)
        assert any(n.startswith("exhaustive:profile:iteration3_dev_core") for n in names)
        checkpoint = next(i for n, i in names.items() if n.startswith("checkpoint"))
        detail = _get(f"http://127.0.0.1:{port}/api/studies/{checkpoint}")
        trials = detail["trials"]
        assert len(trials) >= 60
        complete = [t for t in trials if t["state"] == "Complete"]
        assert complete and all(t["values"] for t in complete)
        assert {p["name"] for p in complete[0]["params"]} >= {"block_m", "swizzle", "num_warps"}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
