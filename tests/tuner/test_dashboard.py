"""optuna-dashboard, started for real on 127.0.0.1, shows the tuner's studies with the real knob values."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tuner import service
from tuner.plan import SPACE


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def test_dashboard_shows_the_studies_with_real_knob_values(ctx, workspace):
    service.local_neighborhood_search(ctx, fixture="tensor_plan_attempt1_best", max_evals=60)
    service.bounded_exhaustive_search(ctx, "iteration3_dev_core", max_evals=262_144, include_final=False)
    ctx.close()
    modes = ["a", 1, True, 1.0, False]                   # 1, True and 1.0 are equal to Python: keyed by position here
    times = {(i, b): 1.0 + i + b / 100 for i in range(len(modes)) for b in (16, 32)}     # one time per configuration
    tune_params = {"mode": modes, "bx": [16, 32]}
    cache = {f"{modes[i]},{b}": {"mode": modes[i], "bx": b, "time": t} for (i, b), t in times.items()}
    (workspace / "mixed.json").write_text(json.dumps({"tune_params_keys": ["mode", "bx"], "tune_params": tune_params, "cache": cache}))
    mixed = service.Context.create(workspace, objective=f"cache:{workspace / 'mixed.json'}")
    service.bounded_exhaustive_search(mixed, "all")
    mixed.close()
    executable = shutil.which("optuna-dashboard") or str(Path(sys.executable).parent / "optuna-dashboard")
    if not Path(executable).exists():
        pytest.fail("optuna-dashboard is not installed (it is in the test extra)")
    port = _free_port()
    db = workspace / "studies" / "history.db"
    proc = subprocess.Popen([executable, f"sqlite:///{db}", "--host", "127.0.0.1", "--port", str(port), "--server", "wsgiref"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while (line := proc.stderr.readline()) and "Listening on" not in line:   # it says so as it starts to serve
            pass
        assert line, "optuna-dashboard exited before listening"
        while proc.poll() is None:                          # the socket accepts a moment after the line: wait for that state
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=0.05)
        summaries = _get(f"http://127.0.0.1:{port}/api/studies")["study_summaries"]
        names = {s["study_name"]: s["study_id"] for s in summaries}
        assert any(n.startswith("checkpoint:fixture:tensor_plan_attempt1_best") for n in names)
        assert any(n.startswith("exhaustive:profile:iteration3_dev_core") for n in names)
        checkpoint = next(i for n, i in names.items() if n.startswith("checkpoint"))
        detail = _get(f"http://127.0.0.1:{port}/api/studies/{checkpoint}")
        assert detail["objective_names"] == ["dev (cycles)"]             # the values' heading, not "Objective 0"
        trials = detail["trials"]
        assert len(trials) >= 60
        complete = [t for t in trials if t["state"] == "Complete"]
        assert complete and all(t["values"] for t in complete)
        for trial in complete:
            shown = {p["name"]: p["param_external_value"] for p in trial["params"]}
            assert set(shown) == set(SPACE.names)
            for knob in SPACE.knobs:                     # every value is the knob's own, numbers as numbers
                assert str(shown[knob.name]) in {str(c) for c in knob.choices}, (knob.name, shown[knob.name])
        block_m = {int(p["param_external_value"]) for t in complete for p in t["params"] if p["name"] == "block_m"}
        assert block_m <= {16, 32, 48, 64, 80, 96, 128} and 48 in block_m     # attempt-1's 48, not an index
        cache_study = next(i for n, i in names.items() if n.startswith("exhaustive:profile:all"))
        shown = {}                                         # each configuration as the dashboard shows it, with its time
        detail = _get(f"http://127.0.0.1:{port}/api/studies/{cache_study}")
        assert detail["objective_names"] == ["time (ms)"]
        for trial in detail["trials"]:
            params = {p["name"]: (p["param_external_value"], p["param_external_pytyp"]) for p in trial["params"]}
            shown[params["mode"], params["bx"][0]] = trial["values"][0]
        assert shown == {((str(modes[i]), str(type(modes[i]))), str(b)): t for (i, b), t in times.items()}   # True is not shown as 1
    finally:
        proc.terminate()
        proc.wait(timeout=10)
