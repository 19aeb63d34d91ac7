"""``command:PROGRAM``: a program of the workspace measures the configurations of a T1 space (real subprocesses)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
import tempfile
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import misbehaviours, running, toy_cache, until

from tuner import service
from tuner.history import History, Row
from tuner.objectives import Evaluations
from tuner.objectives.base import RULED_OUT
from tuner.objectives.command import REAPER, ProgramObjective
from tuner.search import Search, Spec
from tuner.space import space_from_t1

KNOBS = {"bx": [32, 64, 96, 128, 160], "tile": [1, 2, 4, 8], "layout": ["row", "col"]}
T1 = {"ConfigurationSpace": {"TuningParameters": [{"Name": k, "Values": v} for k, v in KNOBS.items()],
                             "Conditions": [{"Expression": "bx * tile <= 640"}]}}
CONFIG = {"bx": 64, "tile": 2, "layout": "col"}                    # one configuration the tests measure alone
BENCH = """import json, sys
c = json.load(sys.stdin)
print("compiling", c)                                          # log lines come before the result
if c["bx"] * c["tile"] > 400:
    print(json.dumps({"error": "too many registers"}))
else:
    print(json.dumps({"time": abs(c["bx"] - 96) / 32 + abs(c["tile"] - 4) + 1.0 + (0.5 if c["layout"] == "row" else 0)}))
"""


LOGGED = """import json, sys
c = json.load(sys.stdin)
open({log!r}, "a").write(json.dumps(c) + "\\n")
print(c["bx"] / 32 + c["tile"] + (c["layout"] == "col") / 2)
"""                                                                 # a program that logs each configuration it runs


def _time(c: dict) -> float:
    return abs(c["bx"] - 96) / 32 + abs(c["tile"] - 4) + 1.0 + (0.5 if c["layout"] == "row" else 0)


@pytest.fixture()
def kernel(tmp_path: Path) -> Path:
    """A workspace holding a kernel's space and the program that measures it."""
    ws = tmp_path / "kernel"
    ws.mkdir()
    (ws / "space.t1.json").write_text(json.dumps(T1))
    (ws / "bench.py").write_text(BENCH)
    return ws


def _tuner(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_a_program_measures_every_configuration_and_the_searches_find_its_best(kernel):
    allowed = [dict(zip(KNOBS, v, strict=True)) for v in product(*KNOBS.values()) if v[0] * v[1] <= 640]
    runs = [c for c in allowed if c["bx"] * c["tile"] <= 400]
    best = min(runs, key=_time)
    common = ("--objective", "command:bench.py", "--space", "space.t1.json", "--json")
    out = _tuner(kernel, *common, "bounded_exhaustive_search", "--profile", "all")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["stopped"] == "exhausted" and result["best"]["plan"] == best and result["best"]["time"] == _time(best)
    assert "optimum" not in result                   # a program's best is not known before it runs
    reasons = result["failure_reasons"]              # a program measured below 100 a second keeps its reasons (a dear range)
    assert result["failed"] == 40 - len(runs) == sum(reasons.values()) and reasons[RULED_OUT] == 40 - len(allowed)
    assert set(reasons) - {RULED_OUT} <= {"too many registers"}
    out = _tuner(kernel.parent, "--workspace", "kernel", "--objective", "command:kernel/bench.py", "--space", "kernel/space.t1.json",
                 "--json", "search_plans", "--strategy", "quick", "--seed", "1", "--max-evals", "25")
    assert out.returncode == 0, out.stderr
    top = json.loads(out.stdout)["top"]
    assert [row["time"] for row in top] == [_time(row["plan"]) for row in top]        # each value is what the program printed
    assert top[0]["time"] == min(row["time"] for row in top)
    failed = kernel / "failed.json"
    failed.write_text(json.dumps({"bx": 160, "tile": 4, "layout": "col"}))
    out = _tuner(kernel, *common, "run_objective", "--plan", "failed.json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["feasible"] is False and report["reason"] == "too many registers" and report["program"] == "bench.py"
    assert sorted(p.name for p in kernel.iterdir()) == ["bench.py", "failed.json", "space.t1.json", "studies"]


def test_a_configuration_the_restrictions_rule_out_is_reported_so_with_the_ones_it_fails_and_never_run(kernel):
    """Scoring or validating a configuration the space rules out names the restrictions it fails, among several, and
    runs nothing; validate_plan checks a configuration of any space, exit status 1 only where it is invalid."""
    (kernel / "logged.py").write_text(LOGGED.format(log=str(kernel / "runs.log")))
    (kernel / "two.t1.json").write_text(json.dumps({"ConfigurationSpace": dict(
        T1["ConfigurationSpace"], Conditions=[*T1["ConfigurationSpace"]["Conditions"], {"Expression": "layout == 'col' or tile < 8"},
                                              {"Expression": "bx >= 64"}])}))
    (kernel / "wide.json").write_text(json.dumps({"bx": 160, "tile": 8, "layout": "row"}))       # 1280 > 640, row with 8
    problem = ("--objective", "command:logged.py", "--space", "two.t1.json", "--json")
    out = _tuner(kernel, *problem, "run_objective", "--plan", "wide.json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    failed = f"{RULED_OUT}: 'bx * tile <= 640', \"layout == 'col' or tile < 8\""
    assert report["feasible"] is False and report["reason"] == failed and report["time_ms"] is None
    out = _tuner(kernel, *problem, "candidate_diff", "--candidate", "wide.json")
    assert out.returncode == 0 and json.loads(out.stdout)["metrics"]["time"]["candidate_reason"] == failed, out
    out = _tuner(kernel, *problem, "validate_plan", "--plan", "wide.json")
    result = json.loads(out.stdout)
    assert out.returncode == 0 and len(result.pop("plan_hash")) == 16 and result == {
        "valid": True, "plan_source": "wide.json", "plan": {"bx": 160, "tile": 8, "layout": "row"}, "feasible": {"time": False},
        "reasons": {"time": failed}}, out.stdout
    out = _tuner(kernel, *problem, "validate_plan", "--plan", json.dumps(CONFIG))
    assert out.returncode == 0 and json.loads(out.stdout)["feasible"] == {"time": True} and json.loads(out.stdout)["reasons"] == {}
    (kernel / "typo.json").write_text(json.dumps({"bx": 160, "tile": 8, "layot": "row"}))
    for plan, error in (('{"bx": 160, "tile": 3, "layout": "row"}', "knob 'tile': value 3 is not allowed"),
                        ("typo.json", "configuration file 'typo.json': unknown knob 'layot'")):
        out = _tuner(kernel, *problem, "validate_plan", "--plan", plan)
        result = json.loads(out.stdout)
        assert out.returncode == 1 and out.stderr == "" and result["valid"] is False and error in result["error"], out
    (kernel / "saved-by-notepad.json").write_text("\ufeff" + json.dumps(CONFIG), encoding="utf-8")    # a byte-order mark
    out = _tuner(kernel, *problem, "validate_plan", "--plan", "saved-by-notepad.json")     # read as the T1 file would be
    assert out.returncode == 0 and json.loads(out.stdout)["plan"] == CONFIG, out
    assert not (kernel / "runs.log").exists()


MISBEHAVING = """import json, os, subprocess, sys, time
c = json.load(sys.stdin)
open("ran-here", "w").write("the private copy")             # the program's own files stay in the copy
{misbehaviours}if c["bx"] == 224:                                         # a launch that crashes the process
    print("illegal memory access", file=sys.stderr, flush=True)
    os.abort()
if c["bx"] == 256:
    sys.stdout.buffer.write(b"\\xff\\xfe a log line that is not UTF-8\\n2.5\\n")
elif c["bx"] == 416:                                          # a silent crash: nothing on stderr
    os._exit(4)
else:
    print({{96: "garbage, not JSON", 128: json.dumps({{"time": -5}}), 160: "true", 192: json.dumps({{"time": "fast"}}), 288: "",
           320: "1" + "0" * 400, 352: "1" * 5000, 384: "[" * 100000, 448: "0"}}[c["bx"]])    # past a float, int parsing, recursion
"""


def test_a_misbehaving_program_is_a_failed_evaluation_and_leaves_no_process(kernel, tmp_path):
    (kernel / "bench.py").write_text(MISBEHAVING.format(misbehaviours=misbehaviours(tmp_path, 'c["bx"]', 32, 64)))
    t1 = {"ConfigurationSpace": {"TuningParameters": [{"Name": "bx", "Values": "[32 * i for i in range(1, 15)]"}]}}
    objective = ProgramObjective(kernel, ["bench.py"], space_from_t1(t1), timeout_s=2)
    try:
        result = objective.evaluate(np.arange(14, dtype=np.int16)[:, None], "time")
    finally:
        objective.close()
    assert np.isinf(result.cycles[:7]).all() and not result.correct[:7].any() and result.cycles[7] == 2.5 and result.correct[7]
    assert result.reasons[0] == "bench.py took over 2 s and was killed" and result.reasons[1] == "bench.py exited 3: boom"
    assert all(r.startswith("bench.py printed ") and "not a time" in r for r in result.reasons[2:6] + result.reasons[8:12])
    assert result.reasons[7] is None and np.isinf(result.cycles[8:]).all() and len(result.reasons) == 14
    assert result.reasons[13].startswith("bench.py printed '0' as its last line, not a time (a positive number")
    assert result.reasons[12] == "bench.py exited 4" and result.reasons[2].endswith('{"time": T})')   # no empty stderr part
    assert result.reasons[6] == "bench.py was killed by SIGABRT: illegal memory access"
    assert "'garbage, not JSON'" in result.reasons[2] and "'true'" in result.reasons[4]
    assert not running(int((tmp_path / "child").read_text()))       # killed with its process group
    assert not (kernel / "ran-here").exists()


def test_a_run_that_removes_its_private_copy_fails_no_run_after_it(kernel):
    """A program may remove its working folder (a clean step gone wrong), and so may a cleaner of old temporary files
    during a search of days: the copy is made again, and no later configuration is recorded as failed for that."""
    (kernel / "bench.py").write_text("import json, os, shutil, sys\nc = json.load(sys.stdin)\n"
                                     "if c['bx'] == 64:\n    shutil.rmtree(os.getcwd())\nprint(c['bx'] / 32)\n")
    t1 = {"ConfigurationSpace": {"TuningParameters": [{"Name": "bx", "Values": "[32 * i for i in range(1, 5)]"}]}}
    copies = set(Path(tempfile.gettempdir()).glob("tuner-objective-*"))
    objective = ProgramObjective(kernel, ["bench.py"], space_from_t1(t1))
    try:
        result = objective.evaluate(np.arange(4, dtype=np.int16)[:, None], "time")
    finally:
        objective.close()
    assert result.reasons == [None] * 4 and result.cycles.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert set(Path(tempfile.gettempdir()).glob("tuner-objective-*")) == copies         # the first copy's remains too


ENDLESS = """import sys
line = b"x" * 1023 + b"\\n"
for _ in range(300 * 1024):                                   # 300 MiB of log lines, then the time
    sys.stdout.buffer.write(line)
print(2.5)
"""
PROBE = """import json, resource
from tuner.objectives import Evaluations
from tuner.objectives.command import ProgramObjective
from tuner.space import space_from_t1
objective = ProgramObjective({ws!r}, ["bench.py"], space_from_t1({t1!r}))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = objective.evaluate(objective.space.encode({config!r})[None], "time")
print(json.dumps([float(result.cycles[0]), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before]))
objective.close()
"""


def test_a_program_that_prints_without_end_cannot_fill_the_tuners_memory(kernel):
    (kernel / "bench.py").write_text(ENDLESS)
    probe = PROBE.format(ws=str(kernel), t1=T1, config=CONFIG)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    value, grown_kib = json.loads(out.stdout)
    assert value == 2.5 and grown_kib < 64 * 1024                # the tuner kept the output's last MiB, not its 300


ESCAPING = """import subprocess, sys
daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)   # keeps stdout open
open({pid!r}, "w").write(str(daemon.pid))
print(1.5)
"""


def _measured(kernel: Path, **options: Any) -> Evaluations:
    """What the workspace's bench.py measures for one configuration of ``T1``, through a ProgramObjective with ``options``."""
    objective = ProgramObjective(kernel, ["bench.py"], space_from_t1(T1), **options)
    try:
        return objective.evaluate(objective.space.encode(CONFIG)[None], "time")
    finally:
        objective.close()


def test_a_run_that_leaves_a_daemon_holding_its_output_ends_when_the_program_ends(kernel, tmp_path):
    (kernel / "bench.py").write_text(ESCAPING.format(pid=str(tmp_path / "daemon")))
    try:
        result = _measured(kernel, timeout_s=300)
    finally:
        daemon = int((tmp_path / "daemon").read_text())
        alive = running(daemon)
        os.kill(daemon, signal.SIGKILL)                                   # it left the process group: the test reaps it
    assert result.cycles[0] == 1.5 and result.reasons == [None] and alive   # not a timeout: the program had ended


NOISY = ("import json, os, sys\nc = json.load(sys.stdin)\n"                      # bx + 9, 1, 0, 9, 1, 0... by the runs' count
         "n = int(open('count').read()) + 1 if os.path.exists('count') else 1\n"
         "open('count', 'w').write(str(n))\nprint(c['bx'] + [0, 9, 1][n % 3])\n")


def test_a_noisy_program_is_valued_by_the_median_of_its_runs(kernel):
    """Its value is the median of its runs, and its report (``run_objective``'s) shows every run."""
    (kernel / "bench.py").write_text(NOISY)
    result = _measured(kernel, repeats=3)
    assert result.samples == [[73.0, 65.0, 64.0]] and result.cycles[0] == 65.0
    objective = ProgramObjective(kernel, ["bench.py"], space_from_t1(T1), repeats=3)
    try:
        report = objective.report(CONFIG)
    finally:
        objective.close()
    assert report["samples"] == [73.0, 65.0, 64.0] and report["time_ms"] == 65.0


def test_a_noisy_programs_study_exports_every_measurement_of_each_configuration(kernel):
    """T4's runtimes: each run of a configuration measured repeatedly, the median of which is its value."""
    (kernel / "bench.py").write_text(NOISY)
    problem = ("--objective", "command:bench.py", "--space", "space.t1.json", "--repeats", "3")
    searched = _tuner(kernel, *problem, "search_plans", "--max-evals", "4", "--seed", "1")
    assert searched.returncode == 0, searched.stderr
    exported = _tuner(kernel, *problem, "export_results")
    assert exported.returncode == 0, exported.stderr
    results = json.loads((kernel / "results" / "results.t4.json").read_text())["results"]
    assert len(results) == 4
    for result in results:
        runs, value = result["times"]["runtimes"], result["measurements"][0]["value"]
        assert len(runs) == 3 and sorted(runs)[1] == value and {run - result["configuration"]["bx"] for run in runs} == {0, 1, 9}
    (kernel / "start.json").write_text(json.dumps(results[0]["configuration"]))     # measured: found in the history
    climbed = _tuner(kernel, *problem, "local_neighborhood_search", "--plan", "start.json", "--max-evals", "3")
    assert climbed.returncode == 0, climbed.stderr
    exported = _tuner(kernel, *problem, "export_results", "--study", "checkpoint", "--out", "results/climb.t4.json")
    assert exported.returncode == 0, exported.stderr
    climb = json.loads((kernel / "results" / "climb.t4.json").read_text())["results"]
    assert climb[0]["configuration"] == results[0]["configuration"]          # its runs, though another study made them
    assert climb[0]["times"]["runtimes"] == results[0]["times"]["runtimes"]


def test_a_sweep_that_kept_no_result_is_not_exported_as_a_file_no_replay_reads(kernel):
    """Every run failed: the sweep keeps no range's best, and an empty T4 file was written that cache:PATH refused."""
    (kernel / "bench.py").write_text("print('{\"error\": \"no GPU\"}')\n")
    problem = ("--objective", "command:bench.py", "--space", "space.t1.json")
    assert _tuner(kernel, *problem, "bounded_exhaustive_search", "--profile", "all").returncode == 1
    exported = _tuner(kernel, *problem, "export_results")
    assert exported.returncode == 2 and exported.stderr.startswith("tuner export_results: error: study 'exhaustive:")
    assert exported.stderr.endswith("holds no evaluation to export: a sweep keeps each range's best only, and none of them "
                                    "has a value\n") and len(exported.stderr.splitlines()) == 1
    assert not (kernel / "results").exists()


def test_reading_a_noisy_programs_history_without_its_repeats_says_which_repeats_read_it(kernel):
    """Values measured with --repeats K are another objective's (medians): reading them without it found no study,
    and the report and the ranking came out empty without saying why."""
    (kernel / "bench.py").write_text(NOISY)
    problem = ("--objective", "command:bench.py", "--space", "space.t1.json")
    searched = _tuner(kernel, *problem, "--repeats", "3", "search_plans", "--max-evals", "4", "--seed", "1")
    assert searched.returncode == 0, searched.stderr
    name = json.loads(_tuner(kernel, *problem, "--repeats", "3", "--json", "rank_experiments").stdout)["ranking"][0]["study"]
    hint = f"it holds 1 study of {name.split('@')[1]} (--repeats 3 reads them)"
    exported = _tuner(kernel, *problem, "export_results")
    assert exported.returncode == 2 and exported.stderr.endswith(f"nothing to export; {hint}\n"), exported.stderr
    assert not (kernel / "results" / "results.t4.json").exists()
    for command in ("rank_experiments", "compare_history", "report"):
        out = _tuner(kernel, *problem, command)
        assert out.returncode == 0 and out.stderr.endswith(f"; {hint}\n"), (command, out.stderr)
    assert _tuner(kernel, *problem, "--repeats", "3", "rank_experiments").stderr == ""


def test_an_executable_program_gets_its_arguments_and_no_shell(kernel):
    script = kernel / "tools" / "bench.sh"
    script.parent.mkdir()
    script.write_text('#!/bin/sh\ncat > /dev/null\necho "{\\"time\\": $#}"\n')      # the time is its number of arguments
    script.chmod(0o755)
    out = _tuner(kernel, "--objective", "command:tools/bench.sh --n '4096 4096' ';' '$(touch pwned)'", "--space", "space.t1.json",
                 "--json", "run_objective")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["time_ms"] == 4 and not list(kernel.rglob("pwned"))


def test_a_sweep_runs_no_configuration_the_history_measured_however_fast_it_answers(kernel, tmp_path):
    """A sweep's first range is one configuration; when the history held it, the sweep took the cache's answer for the
    program's speed, went on with the fast path and ran every other configuration again, measured or not, keeping none."""
    log = tmp_path / "runs.log"
    (kernel / "bench.py").write_text(LOGGED.format(log=str(log)))
    (kernel / "studies").mkdir()
    (kernel / "studies" / "every.json").write_text(json.dumps({"knobs": KNOBS}))       # the same plans as 'all'
    common = ("--objective", "command:bench.py", "--space", "space.t1.json", "--json", "bounded_exhaustive_search", "--profile")
    found = []
    for profile in ("all", "every", "every"):
        out = _tuner(kernel, *common, profile)
        assert out.returncode == 0 and json.loads(out.stdout)["best"]["plan"] == {"bx": 32, "tile": 1, "layout": "row"}, out.stderr
        found.append(json.loads(out.stdout)["cached"])
    assert found == [0, 34, 0]                                      # what this run found in the history (a done sweep: none)
    ran = log.read_text().splitlines()
    assert len(ran) == len(set(ran)) == 34                          # each configuration the restriction allows, once
    (kernel / "studies" / "again.json").write_text(json.dumps({"knobs": KNOBS}))
    ctx = service.Context.create(kernel, objective=f"command:{kernel / 'bench.py'}", space=str(kernel / "space.t1.json"))
    said: list[str] = []
    ctx.progress = lambda done, total, message: said.append(message)
    assert service.bounded_exhaustive_search(ctx, "again")["cached"] == 34
    assert said[:2] == ["1 plan from 0", "39 plans from 1"]          # a range the history answered whole: the next grows


def test_a_sweep_keeps_every_run_of_a_fast_program(kernel, tmp_path):
    """A program that answers in a few milliseconds (a shell script here) ran past the rate under which a sweep keeps
    each run in the history, so the sweep kept only its finalists, and a later search ran the program again."""
    log = tmp_path / "runs.log"
    (kernel / "fast.sh").write_text(f"#!/bin/sh\nread config\necho \"$config\" >> {log}\necho 1.5\n")
    (kernel / "fast.sh").chmod(0o755)
    (kernel / "wide.t1.json").write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "a", "Values": "list(range(300))"}]}}))
    common = ("--objective", "command:fast.sh", "--space", "wide.t1.json", "--json")
    out = _tuner(kernel, *common, "bounded_exhaustive_search", "--profile", "all")
    assert out.returncode == 0 and json.loads(out.stdout)["evaluations"] == 300, out.stderr
    out = _tuner(kernel, *common, "search_plans", "--max-evals", "50")
    assert out.returncode == 0 and json.loads(out.stdout)["new_evaluations"] == 0, out.stderr
    assert len(log.read_text().splitlines()) == 300                 # each configuration once, the sweep's runs kept


def test_the_main_job_keeps_a_default_that_no_configuration_beats(kernel):
    """Where every configuration ties the default (a kernel already at its best), the main job said another one was
    best, with its changes and a 1.00x speedup: a tie is no reason to change a configuration."""
    (kernel / "flat.py").write_text("import sys\nsys.stdin.read()\nprint(1.5)\n")
    common = ("--objective", "command:flat.py", "--space", "space.t1.json")
    out = _tuner(kernel, *common, "run", "--time-s", "60")
    assert out.returncode == 0 and "the default is the best configuration found" in out.stdout, out.stdout
    out = _tuner(kernel, *common, "--json", "compare_history")
    assert out.returncode == 0 and json.loads(out.stdout)["current_is_best"] is True, out.stdout


def test_two_workers_sweeping_a_program_run_each_configuration_once(kernel, tmp_path):
    """Each worker checks the sweep's finalists at the end; those another worker measured in its ranges were not in its
    own cache (a range claims no plan), so it ran them again: 48 runs for 36 configurations."""
    log = tmp_path / "runs.log"
    (kernel / "bench.py").write_text(LOGGED.format(log=str(log)))
    out = _tuner(kernel, "--objective", "command:bench.py", "--space", "space.t1.json", "--json", "bounded_exhaustive_search",
                 "--profile", "all", "--workers", "2")
    assert out.returncode == 0, out.stderr
    result, ran = json.loads(out.stdout), log.read_text().splitlines()
    assert result["best"]["plan"] == {"bx": 32, "tile": 1, "layout": "row"} and result["evaluations"] == 40
    assert len(ran) == len(set(ran)) == 34 and result["cached"] == 0      # what the restriction allows, each once


def test_a_program_is_not_run_again_on_what_it_measured_under_another_space_of_the_same_knobs(kernel, tmp_path):
    """A real run can take minutes: a space that gains a value (here in front, so every position moves), loses one,
    lists its knobs in another order or changes its restrictions reuses every measurement of the program its
    configurations hold, of those its restrictions allow (the others were the seeds of its searches). Other knob names,
    or another program, measure again."""
    log = tmp_path / "runs.log"
    (kernel / "bench.py").write_text(f"import json, sys\nc = json.load(sys.stdin)\nopen({str(log)!r}, 'a').write(json.dumps(c) + '\\n')\n"
                                     "bx, tile = c.values()\n"                     # whatever the second knob is named
                                     "print(json.dumps({'time': abs(bx - 96) / 32 + tile}) if bx != 32 else 'oops')\n")

    def sweep(bx: list[int], tile: list[int], restriction: str = "True", knob: str = "tile",
              order: slice = slice(None)) -> tuple[dict, str, list[dict]]:
        (kernel / "grid.t1.json").write_text(json.dumps({"ConfigurationSpace": {
            "TuningParameters": [{"Name": "bx", "Values": bx}, {"Name": knob, "Values": tile}][order],
            "Conditions": [{"Expression": restriction.replace("tile", knob)}]}}))
        runs = len(log.read_text().splitlines()) if log.exists() else 0
        out = _tuner(kernel, "--objective", "command:bench.py", "--space", "grid.t1.json", "--json",
                     "bounded_exhaustive_search", "--profile", "all")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout), out.stderr, [json.loads(line) for line in log.read_text().splitlines()[runs:]]

    first, said, ran = sweep([32, 64, 96], [1, 2])
    assert len(ran) == 6 and "under another space" not in said
    grown, said, ran = sweep([128, 32, 64, 96], [1, 2])              # a value in front: every index vector moves
    assert ran == [{"bx": 128, "tile": 1}, {"bx": 128, "tile": 2}], ran
    assert "the history holds 6 measurements of this program under another space of the same knobs" in said
    assert grown["best"]["plan"] == first["best"]["plan"] == {"bx": 96, "tile": 1} and grown["best"]["time"] == first["best"]["time"]
    with contextlib.closing(sqlite3.connect(kernel / "studies" / "history.db")) as db:      # why bx=32 failed, carried too
        reasons = db.execute("SELECT objective, reason FROM tuner_reasons ORDER BY objective").fetchall()
    assert len({o for o, _ in reasons}) == 2 and len(reasons) == 4 and all("'oops'" in why for _, why in reasons), reasons
    narrowed, said, ran = sweep([64, 96], [2, 1], "bx * tile <= 128")  # a value gone, the order and the restrictions changed
    assert ran == [] and "the history holds 3 measurements" in said and narrowed["best"]["plan"] == {"bx": 96, "tile": 1}
    out = _tuner(kernel, "--objective", "command:bench.py", "--space", "grid.t1.json", "--json", "resume_search_history")
    seeds = [seed["plan"] for seed in json.loads(out.stdout)["seeds"]]      # 96 x 2, measured before, is not this space's
    assert sorted(seeds, key=str) == [{"bx": 64, "tile": 1}, {"bx": 64, "tile": 2}, {"bx": 96, "tile": 1}], seeds
    _, said, ran = sweep([64, 96], [2, 1], "bx * tile <= 128")        # the same space: nothing carried over twice
    assert ran == [] and "under another space" not in said
    _, said, ran = sweep([64, 96], [2, 1], "bx * tile <= 128", order=slice(None, None, -1))     # tile listed first
    assert ran == [] and "the history holds 3 measurements" in said
    _, _, ran = sweep([64, 96], [1, 2], knob="tiles")                 # other knobs: another kernel's measurements
    assert len(ran) == 4


def test_a_search_runs_no_configuration_another_study_measured_since_it_started(kernel, tmp_path):
    """Two studies of one program at once (`quick` on one host, a local search on another): each read what the history
    held when it started, and ran again every configuration the other measured since."""
    log = tmp_path / "runs.log"
    (kernel / "bench.py").write_text(LOGGED.format(log=str(log)))
    space = space_from_t1(T1)
    objective = ProgramObjective(kernel, ["bench.py"], space)
    history = History(f"sqlite:///{tmp_path / 'h.db'}")
    first, second = (Search(history, objective, Spec(strategy="quick", mode="time", seed=seed)) for seed in (0, 1))
    measured = space.encode(CONFIG)[None]
    assert second.evaluate(measured).tolist() == [4.5]
    second.flush()
    assert first.evaluate(measured).tolist() == [4.5] and first.cached_hits == 1
    swept = space.encode({"bx": 32, "tile": 1, "layout": "row"})[None]           # a sweep's range too
    assert second.evaluate(swept).tolist() == [2.0]
    second.flush()
    values, scored = first.measure(swept)
    assert values.tolist() == [2.0] and scored == 0
    assert len(log.read_text().splitlines()) == 2
    objective.close()


def test_a_measurement_the_restrictions_rule_out_is_never_a_seed(kernel, monkeypatch):
    """The previous version carried such measurements over to an edited space: histories it wrote hold them, and the
    searches and the main job's re-check read their seeds there."""
    monkeypatch.chdir(kernel)
    ctx = service.Context.create(kernel, objective="command:bench.py", space="space.t1.json")
    space = ctx.objective.space
    ruled_out, allowed = {"bx": 160, "tile": 8, "layout": "col"}, {"bx": 96, "tile": 4, "layout": "col"}
    assert not space.allowed(space.encode(ruled_out)[None])[0]
    ctx.history.write(ctx.objective.name, "time", [Row(space.hash(c), value, True, None, space.encode(c))
                                                   for c, value in ((ruled_out, 0.5), (allowed, 1.0))])
    assert [seed["plan"] for seed in service.resume_search_history(ctx)["seeds"]] == [allowed]
    ctx.close()


@pytest.mark.parametrize("command", [("search_plans", "--strategy", "focused"), ("search_plans", "--strategy", "quick"),
                                     ("search_plans", "--strategy", "bayes"), ("local_neighborhood_search",),
                                     ("bounded_exhaustive_search", "--profile", "all")])
def test_a_failing_program_on_a_space_of_one_configuration_says_why(kernel, command):
    """Every knob fixed, to check that the program runs: when it does not, ``focused`` and ``checkpoint`` learned a model
    from no value at all and ended in a traceback."""
    (kernel / "one.t1.json").write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [{"Name": "bx", "Values": [64]}]}}))
    (kernel / "broken.py").write_text("import sys\nsys.exit('no device')\n")
    out = _tuner(kernel, "--objective", "command:broken.py", "--space", "one.t1.json", "--json", *command)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    result = json.loads(out.stdout)
    assert result["failed"] == 1 and result["failure_reasons"] == {"broken.py exited 1: no device": 1} and result["best"] is None


def test_a_crashing_programs_failures_are_counted_by_one_line_that_ends_with_its_error(kernel):
    """A Python benchmark that raises prints a traceback: the search's result counts those runs under one line, the
    traceback's first and last (the error), where it showed the traceback's first 100 characters across lines, a
    private folder's path among them; each trial keeps the whole reason."""
    raises = 'if c["tile"] == 8:\n    raise ValueError("tile 8 does not fit")\n'
    (kernel / "bench.py").write_text(BENCH.replace("c = json.load(sys.stdin)\n", "c = json.load(sys.stdin)\n" + raises))
    out = _tuner(kernel, "--objective", "command:bench.py", "--space", "space.t1.json", "--json",
                 "search_plans", "--max-evals", "34")                       # every configuration the restriction allows
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    crashed = "bench.py exited 1: Traceback (most recent call last): ... ValueError: tile 8 does not fit"
    assert result["failure_reasons"][crashed] == 4 and all("\n" not in why for why in result["failure_reasons"])
    history = History(f"sqlite:///{kernel / 'studies' / 'history.db'}")
    kept = [t.user_attrs["reason"] for t in history.trials(result["study"]) if "exited" in t.user_attrs.get("reason", "")]
    history.close()
    assert len(kept) == 4 and all(why.startswith("bench.py exited 1: Traceback") and "line 4, in <module>" in why for why in kept)
    (kernel / "tile8.json").write_text(json.dumps({"bx": 32, "tile": 8, "layout": "row"}))
    out = _tuner(kernel, "--objective", "command:bench.py", "--space", "space.t1.json", "run_objective", "--plan", "tile8.json")
    said = out.stdout.splitlines()                             # as text: the traceback's lines under the key, indented
    at = said.index("reason: |")
    assert out.returncode == 0 and said[at + 1] == "  bench.py exited 1: Traceback (most recent call last):", out.stdout
    assert said[-1] == "  ValueError: tile 8 does not fit" and all(line.startswith("  ") for line in said[at + 1:])


@pytest.mark.parametrize(("first_line", "reason"), [
    (b"#!/bin/sh\r\n", "cannot be started: the interpreter its first line names, '/bin/sh\\r', does not exist"),    # saved on Windows
    (b"", "cannot be started: Exec format error (an executable script needs a first line such as #!/bin/sh)"),
])
def test_a_program_that_cannot_start_says_why_in_the_searchs_result(kernel, first_line, reason):
    """Each run of a script that cannot start is a failed evaluation, and the search's result counts them and gives
    the reason, in terms of the script's first line, rather than a bare "No such file or directory"."""
    script = kernel / "bench.sh"
    script.write_bytes(first_line + b"echo 2.5\n")
    script.chmod(0o755)
    out = _tuner(kernel, "--objective", "command:bench.sh", "--space", "space.t1.json", "--json", "search_plans", "--max-evals", "5")
    assert out.returncode == 1, out.stderr                                  # no configuration ran: the objective failed
    result = json.loads(out.stdout)
    assert result["best"] is None and result["failed"] == result["new_evaluations"] == 5
    assert result["failure_reasons"] == {f"bench.sh {reason}"[:100]: 5} and result["cached_failed"] == 0
    common = ("--objective", "command:bench.sh", "--space", "space.t1.json", "--json")
    assert _tuner(kernel, *common, "search_plans", "--max-evals", "100", "--workers", "2").returncode == 1    # the whole space
    assert _tuner(kernel, *common, "run", "--time-s", "5").returncode == 1
    rerun = _tuner(kernel, *common, "search_plans", "--max-evals", "5")    # the first study again: it has nothing left to do
    said = json.loads(rerun.stdout)
    assert rerun.returncode == 1 and said["new_evaluations"] == said["failed"] == 0 and said["evaluations"] > 5
    assert rerun.stderr == (f"tuner search_plans: nothing new was scored, and none of the study's {said['evaluations']} "
                            "evaluations (its earlier runs') has a value: `report` lists their reasons\n"), rerun.stderr
    in_workers = _tuner(kernel, *common, "search_plans", "--max-evals", "5", "--workers", "2")
    assert in_workers.returncode == 1 and in_workers.stderr == rerun.stderr, in_workers.stderr     # once, not per worker
    again = json.loads(_tuner(kernel, *common, "search_plans", "--seed", "1", "--max-evals", "5").stdout)     # all in the history
    assert again["best"] is None and again["new_evaluations"] == again["failed"] == 0 and again["failure_reasons"] == {}
    assert again["cached_failed"] == again["cached"] > 0                   # why it has no best: failures the history holds


def test_a_script_whose_interpreter_is_no_program_is_told_so_not_to_add_the_first_line_it_has(kernel):
    """The system cannot run a script whose ``#!`` names a file that is neither a binary nor a script with its own
    first line (the same error as a script with no ``#!``): the reason names that interpreter."""
    interpreter, script = kernel / "interpreter", kernel / "bench.sh"
    interpreter.write_text("echo not a program\n")
    script.write_text(f"#!{interpreter}\necho 2.5\n")
    for path in (interpreter, script):
        path.chmod(0o755)
    objective = ProgramObjective(kernel, ["bench.sh"], space_from_t1(T1))
    try:
        result = objective.evaluate(objective.space.encode(CONFIG)[None], "time")
    finally:
        objective.close()
    assert result.reasons == [f"bench.sh cannot be started: the interpreter its first line names, {str(interpreter)!r}, "
                              "is not a program the system can run (Exec format error)"], result.reasons


def test_a_kernel_tuner_cache_gives_the_program_its_space(kernel):
    toy_cache(kernel, {(32, 1): 1.0}, name="earlier.json.gz")       # tune_params: bx 32, 64, 128; tile 1, 2
    (kernel / "bench.py").write_text("import json, sys\nc = json.load(sys.stdin)\nprint(c['bx'] / c['tile'])\n")
    out = _tuner(kernel, "--objective", "command:bench.py", "--space", "earlier.json.gz", "--json", "bounded_exhaustive_search",
                 "--profile", "all")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert (result["profile_description"], result["profile_size"]) == ("every value of every knob", 6)
    assert result["best"]["plan"] == {"bx": 32, "tile": 2} and result["best"]["time"] == 16


@pytest.mark.parametrize(("objective", "space", "message"), [
    ("command:bench.py", None, "needs --space: a T1 file of the knobs the program takes"),
    ("command:nope.py", "space.t1.json", "program 'nope.py' is not a file of the workspace"),
    ("command:space.t1.json", "space.t1.json", "program 'space.t1.json' is not executable"),
    ("command:../bench.py", "space.t1.json", "from the working folder) is not inside the workspace"),
    ("command:bench.py 'open", "space.t1.json", "cannot be split into arguments: No closing quotation"),
    ("command:", "space.t1.json", "objective 'command:' is not allowed"),
    ("command:bench.py", "bench.py", "space file 'bench.py' is not valid JSON"),
])
def test_a_bad_program_objective_exits_2_with_one_line_and_writes_nothing(kernel, objective, space, message):
    (kernel.parent / "bench.py").write_text(BENCH)
    out = _tuner(kernel, "--objective", objective, *(("--space", space) if space else ()), "search_plans", "--max-evals", "5")
    assert out.returncode == 2 and message in out.stderr and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert sorted(p.name for p in kernel.iterdir()) == ["bench.py", "space.t1.json"]


def test_the_program_objective_names_its_scorer(kernel):
    space = space_from_t1(T1)
    names = {ProgramObjective(kernel, ["bench.py"], space).name, ProgramObjective(kernel, ["bench.py", "--n", "1"], space).name,
             ProgramObjective(kernel, ["bench.py"], space, repeats=3).name}
    (kernel / "bench.py").write_text(BENCH + "\n# changed\n")
    names.add(ProgramObjective(kernel, ["bench.py"], space).name)
    assert len(names) == 4 and all(n.startswith("command:") for n in names)


SLOTTED = """import json, os, sys
c = json.load(sys.stdin)
with open(sys.argv[1], "a") as log:                             # outside the workspace: every worker's runs in one file
    log.write(os.environ.get("GPU", "-") + " " + json.dumps(c, sort_keys=True) + "\\n")
print(c["bx"] / c["tile"])
"""


def test_workers_run_the_program_each_with_its_own_environment_and_no_configuration_twice(kernel, tmp_path):
    (kernel / "bench.py").write_text(SLOTTED)
    log = tmp_path / "runs.log"
    out = _tuner(kernel, "--objective", f"command:bench.py {log}", "--space", "space.t1.json", "--json", "search_plans",
                 "--strategy", "quick", "--seed", "3", "--max-evals", "30", "--workers", "2", "--worker-env", "GPU=cuda:{slot}")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    runs = [line.split(" ", 1) for line in log.read_text().splitlines()]
    assert result["workers"] == 2 and result["new_evaluations"] == len(runs) == 30
    assert {gpu for gpu, _ in runs} <= {"cuda:0", "cuda:1"}
    assert len({config for _, config in runs}) == 30                  # claimed in the history: none measured twice
    assert result["best"]["time"] == min(json.loads(c)["bx"] / json.loads(c)["tile"] for _, c in runs)


LUCKY = """import json, sys
c = json.load(sys.stdin)
key = json.dumps(c, sort_keys=True)
with open(sys.argv[1], "a") as log:
    log.write(key + "\\n")
with open(sys.argv[1]) as log:
    runs = log.read().splitlines().count(key)
time = abs(c["bx"] - 96) / 32 + abs(c["tile"] - 4) + 1.0 + (0.5 if c["layout"] == "row" else 0)
print(0.5 if c == {"bx": 128, "tile": 2, "layout": "col"} and runs <= 3 else time)   # the first runs of one were lucky
"""


def test_the_main_job_on_a_noisy_program_measures_the_best_again_and_keeps_the_fastest_of_those_runs(kernel, tmp_path):
    """With ``--repeats``, a search's best is the configuration its noise favoured most: here one whose first three runs
    were lucky (0.5 ms; 4.0 after). The main job wrote it as the winner, with a 13x speedup; it now measures the five
    best and the default again and keeps the fastest of those runs, with the speedup they give and its interval."""
    (kernel / "bench.py").write_text(LUCKY)
    log = tmp_path / "runs.log"
    common = ("--objective", f"command:bench.py {log}", "--space", "space.t1.json", "--repeats", "3")
    out = _tuner(kernel, *common, "--json", "run", "--time-s", "120")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    lucky, best = {"bx": 128, "tile": 2, "layout": "col"}, {"bx": 96, "tile": 4, "layout": "col"}
    again = result["recheck"]["configurations"]
    assert result["recheck"]["repeats"] == 3 and len(again) == 6 and again[-1]["source"] == "the space's default"
    assert [again[0]["searched"], again[0]["again"]["median"]] == [0.5, 4.0]
    assert again[1]["searched"] == again[1]["again"]["median"] == 1.0 and again[-1]["again"]["median"] == 6.5
    assert json.loads((kernel / "results" / "tuner_run_best.json").read_text()) == best
    assert result["best"]["time"] == 1.0 and result["speedup"] == 6.5 and result["changes"]["tile"] == {"from": 1, "to": 4}
    assert result["recheck"]["against_default"]["better"] and result["recheck"]["against_default"]["ratio"] == 1 / 6.5
    assert log.read_text().splitlines().count(json.dumps(lucky, sort_keys=True)) == 6          # 3 searched, 3 again
    page = (kernel / result["report"]["path"]).read_text()                  # the report's summary says what the job said
    assert "<tr><td>time (ms, lower is better)</td><td>1</td><td>6.5</td></tr>" in page, "not the history's lucky 0.5"
    assert ", measured again</td></tr>" in page and "<tr><td>speedup</td><td>time 6.50x</td></tr>" in page
    text = _tuner(kernel, *common, "run", "--time-s", "120")
    assert text.returncode == 0, text.stderr
    assert "measured again, 3 runs each (median; the searches' value in brackets):" in text.stdout
    assert "speedup over the default: 6.50x\n  95% interval 6.50x-6.50x: significant\n" in text.stdout


def test_the_main_job_on_a_noisy_program_whose_default_cannot_run_compares_no_winner_with_it(kernel):
    """The default's runs fail again in the re-check: the winner is the fastest of the others, with no speedup over
    the default and no comparison with its runs, which are none."""
    (kernel / "bench.py").write_text("import json, sys\nc = json.load(sys.stdin)\n"
                                     "if (c['bx'], c['tile']) == (32, 1):\n    sys.exit('no kernel for the default')\n"
                                     "print(abs(c['bx'] - 96) / 32 + abs(c['tile'] - 4) + 1.0)\n")
    out = _tuner(kernel, "--objective", "command:bench.py", "--space", "space.t1.json", "--repeats", "2", "--json", "run",
                 "--time-s", "60")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    default = result["recheck"]["configurations"][-1]
    assert default["source"] == "the space's default" and default["searched"] is None and default["again"]["median"] is None
    assert "against_default" not in result["recheck"] and "speedup" not in result and result["best"]["time"] == 1.0
    assert result["baseline"]["reason"] == "bench.py exited 1: no kernel for the default"


@pytest.mark.parametrize("command", [("search_plans", "--max-evals", "5"), ("run", "--time-s", "60")])
def test_one_worker_runs_the_program_in_the_environment_worker_env_gives_it(kernel, tmp_path, command):
    """``--worker-env`` without ``--workers`` (one worker) was ignored: the program ran on the default GPU, not the
    one asked for, and a value that is not NAME=VALUE was accepted."""
    (kernel / "bench.py").write_text(SLOTTED)
    log = tmp_path / "runs.log"
    common = ("--objective", f"command:bench.py {log}", "--space", "space.t1.json", *command)
    out = _tuner(kernel, *common, "--worker-env", "GPU=cuda:{slot}")
    assert out.returncode == 0, out.stderr
    assert {line.split(" ", 1)[0] for line in log.read_text().splitlines()} == {"cuda:0"}
    before = sorted(p.relative_to(kernel) for p in kernel.rglob("*"))
    out = _tuner(kernel, *common, "--worker-env", "GPU")
    assert out.returncode == 2 and out.stderr == (f"tuner {command[0]}: error: --worker-env 'GPU' is not NAME=VALUE "
                                                  "(NAME: letters, digits and '_', not starting with a digit)\n"), out.stderr
    assert sorted(p.relative_to(kernel) for p in kernel.rglob("*")) == before


def test_the_main_job_with_workers_runs_its_searches_in_them_and_the_rest_itself(kernel, tmp_path):
    (kernel / "bench.py").write_text(SLOTTED)
    log = tmp_path / "runs.log"
    out = _tuner(kernel, "--objective", f"command:bench.py {log}", "--space", "space.t1.json", "--json", "run", "--time-s", "120",
                 "--workers", "2", "--worker-env", "GPU=cuda:{slot}")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    runs = [line.split(" ", 1) for line in log.read_text().splitlines()]
    default = json.dumps({"bx": 32, "layout": "row", "tile": 1}, sort_keys=True)
    assert runs[0] == ["cuda:0", default]                    # the space's default, scored by the command itself, as slot 0
    assert {gpu for gpu, _ in runs[1:]} <= {"cuda:0", "cuda:1"} and len({c for _, c in runs}) == len(runs) > 1   # none twice
    assert [(step["step"], step.get("workers")) for step in result["steps"]] == [("run_objective", None), ("checkpoint", 2), ("quick", 2)]
    fastest = min(json.loads(c)["bx"] / json.loads(c)["tile"] for _, c in runs)
    written = json.loads((kernel / "results" / "tuner_run_best.json").read_text())
    assert result["best"]["time"] == written["bx"] / written["tile"] == fastest
    assert json.dumps(written, sort_keys=True) in [c for _, c in runs]


def test_workers_succeed_when_any_of_them_ran_a_configuration(kernel):
    """One worker's device fails every run, but the study has a best, so the search did not fail (a search in which
    no configuration ran exits 1; a worker that ends before the others found one is no failure of the search)."""
    (kernel / "bench.py").write_text("import json, os, sys\nc = json.load(sys.stdin)\n"
                                     "print(json.dumps({'error': 'no device'}) if os.environ['GPU'] == '0' else c['bx'] / c['tile'])\n")
    out = _tuner(kernel, "--objective", "command:bench.py", "--space", "space.t1.json", "--json", "search_plans", "--seed", "3",
                 "--max-evals", "30", "--workers", "2", "--worker-env", "GPU={slot}")
    result = json.loads(out.stdout)
    assert out.returncode == 0 and result["best"] is not None and result["failure_reasons"] == {"no device": result["failed"]}


def test_a_sweep_measures_each_configuration_once_and_keeps_every_measurement(kernel, tmp_path):
    (kernel / "grid.t1.json").write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "a", "Values": "[i for i in range(10)]"}, {"Name": "b", "Values": "[i for i in range(10)]"}]}}))
    (kernel / "bench.py").write_text("import json, sys\nc = json.load(sys.stdin)\n"
                                     "open(sys.argv[1], 'a').write(json.dumps(c, sort_keys=True) + '\\n')\n"
                                     "print(1 + abs(c['a'] - 3) + c['b'])\n")
    log = tmp_path / "runs.log"
    common = ("--objective", f"command:bench.py {log}", "--space", "grid.t1.json", "--json")
    out = _tuner(kernel, *common, "bounded_exhaustive_search", "--profile", "all")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["best"]["plan"] == {"a": 3, "b": 0}
    runs = log.read_text().splitlines()
    assert len(runs) == len(set(runs)) == 100                 # the finalists came from what the sweep measured
    out = _tuner(kernel, *common, "search_plans", "--strategy", "quick", "--max-evals", "20")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["new_evaluations"] == 0 and len(log.read_text().splitlines()) == 100    # all 100 were kept


def test_a_run_killed_at_a_shorter_timeout_is_measured_again_under_a_longer_one(kernel, tmp_path):
    """A run killed at --timeout-s says nothing of its configuration but that it took longer: a search with a longer
    timeout measures it again, and its time takes the failure's place in the history. A crash stays failed, a time
    is never measured again, and a search with the shorter timeout again finds the time."""
    log = tmp_path / "runs.log"
    (kernel / "bench.py").write_text(f"import json, sys, time\nc = json.load(sys.stdin)\n"
                                     f"open({str(log)!r}, 'a').write(f\"{{c['bx']}}\\n\")\n"
                                     "if c['bx'] == 64:\n    time.sleep(2)\nif c['bx'] == 96:\n    sys.exit(3)\nprint(c['bx'] / 32)\n")
    (kernel / "grid.t1.json").write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "bx", "Values": "[32 * i for i in range(1, 5)]"}]}}))
    common = ("--objective", "command:bench.py", "--space", "grid.t1.json", "--json")
    searches = [("0.5", "bounded_exhaustive_search", "--profile", "all"), ("30", "local_neighborhood_search", "--max-evals", "4"),
                ("0.5", "search_plans", "--max-evals", "4")]
    results = []
    for timeout, *command in searches:
        out = _tuner(kernel, *common, "--timeout-s", timeout, *command)
        assert out.returncode == 0, out.stderr
        results.append(json.loads(out.stdout))
    assert results[0]["failed"] == 2 and results[0]["failure_reasons"] == {"bench.py took over 0.5 s and was killed": 1,
                                                                          "bench.py exited 3": 1}
    assert results[1]["new_evaluations"] == 1 and results[1]["failed"] == 0 and results[1]["cached_failed"] == 1
    assert results[2]["new_evaluations"] == 0 and results[2]["cached_failed"] == 1       # bx=64's time, bx=96's crash
    assert sorted(log.read_text().split()) == ["128", "32", "64", "64", "96"]                # bx=64 measured twice


def test_the_reads_and_the_main_job_measure_a_default_killed_at_a_shorter_timeout_again(kernel, tmp_path):
    """A default killed at a shorter --timeout-s is no value: compare_history under a longer one measures it (and, being
    read-only, stores nothing), the main job measures it and replaces the failure, and then the read takes its time."""
    log = tmp_path / "runs.log"
    (kernel / "bench.py").write_text(f"import json, sys, time\nc = json.load(sys.stdin)\n"
                                     f"open({str(log)!r}, 'a').write(f\"{{c['bx']}}\\n\")\n"
                                     "if c['bx'] == 64:\n    time.sleep(2)\nprint(c['bx'] / 32)\n")
    (kernel / "grid.t1.json").write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "bx", "Values": "[32 * i for i in range(1, 5)]", "Default": 64}]}}))
    common = ("--objective", "command:bench.py", "--space", "grid.t1.json")

    def default_time(timeout: str) -> float | None:
        out = _tuner(kernel, *common, "--timeout-s", timeout, "--json", "compare_history")
        assert out.returncode == 0, out.stderr
        (row,) = [r for r in json.loads(out.stdout)["rows"] if r["source"] == "the space's default"]
        return row["time"]

    def runs_of_default() -> int:
        return log.read_text().split().count("64")

    out = _tuner(kernel, *common, "--timeout-s", "0.5", "run", "--time-s", "60")
    assert out.returncode == 0 and "the space's default cannot run: bench.py took over 0.5 s" in out.stderr, out.stderr
    assert runs_of_default() == 1 and default_time("0.5") is None and runs_of_default() == 1
    assert default_time("30") == 2 and runs_of_default() == 2
    assert default_time("30") == 2 and runs_of_default() == 3              # measured, not stored
    out = _tuner(kernel, *common, "--timeout-s", "30", "run", "--time-s", "60")
    assert out.returncode == 0 and "cannot run" not in out.stderr, out.stderr
    assert runs_of_default() == 4
    assert default_time("30") == 2 and default_time("0.5") == 2 and runs_of_default() == 4


def test_failures_the_machine_caused_are_measured_again_and_their_times_replace_them(kernel, tmp_path):
    """A failed run was kept like a time and never measured again, so a failure the machine caused (no device) stayed
    until a new history. remeasure_failures --reason runs the failures whose reason holds the text again, in rounds:
    one cut short resumes, the next measures what failed again; the times take the failures' places, so the history's
    best is found, and a failure the configuration causes (too many registers) is left alone."""
    log, broken = tmp_path / "runs.log", tmp_path / "broken"
    (kernel / "bench.py").write_text(
        f"import json, os, sys\nc = json.load(sys.stdin)\nopen({str(log)!r}, 'a').write(f\"{{c['bx']}},{{c['t']}}\\n\")\n"
        f"if c['t'] == 2 and os.path.exists({str(broken)!r}):\n    print('CUDA error: no device', file=sys.stderr); sys.exit(1)\n"
        "if c['bx'] == 96:\n    print(json.dumps({'error': 'too many registers'}))\n"
        "else:\n    print(c['bx'] / 32 + c['t'] - 2 * (c['t'] == 2))\n")
    (kernel / "grid.t1.json").write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "bx", "Values": "[32 * i for i in range(1, 5)]"}, {"Name": "t", "Values": [1, 2, 3]}]}}))
    common = ("--objective", "command:bench.py", "--space", "grid.t1.json", "--json")

    def tuner(*args: str, code: int = 0) -> dict:
        out = _tuner(kernel, *common, *args)
        assert out.returncode == code, out.stderr
        return json.loads(out.stdout)

    def runs() -> list[str]:
        return log.read_text().split()

    broken.touch()
    swept = tuner("bounded_exhaustive_search", "--profile", "all")
    assert swept["failure_reasons"] == {"bench.py exited 1: CUDA error: no device": 4, "too many registers": 2}
    cut = tuner("remeasure_failures", "--reason", "CUDA error", "--max-evals", "2", code=1)    # still broken: no time
    assert (cut["target"], cut["new_evaluations"], cut["failed"], cut["stopped"]) == ("failures:1", 2, 2, "evaluation budget")
    broken.unlink()
    resumed = tuner("remeasure_failures", "--reason", "CUDA error")        # the round's other two (bx=96 fails as it does)
    assert (resumed["target"], resumed["new_evaluations"], resumed["stopped"]) == ("failures:1", 2, "exhausted")
    assert resumed["failure_reasons"] == {"too many registers": 1} and resumed["best"]["plan"] == {"bx": 32, "t": 2}
    again = tuner("remeasure_failures", "--reason", "CUDA error")           # the next round: the two that failed again
    assert (again["target"], again["new_evaluations"], again["failed"]) == ("failures:2", 2, 0)
    assert sorted(runs()[12:]) == sorted(runs()[12:14] * 2 + ["32,2", "96,2"]) and len(runs()) == 18
    out = _tuner(kernel, *common, "remeasure_failures", "--reason", "CUDA error")
    assert out.returncode == 2 and "holds no failed run of command:" in out.stderr and "whose reason holds 'CUDA error'" in out.stderr
    assert out.stderr.endswith("nothing to measure again; its 3 failed runs say: too many registers (3)\n"), out.stderr
    out = _tuner(kernel, *common, "--history", "new.db", "remeasure_failures")            # refused: no history created
    assert out.returncode == 2 and "holds no failed run" in out.stderr and not (kernel / "new.db").exists()
    best = tuner("compare_history")["best_verified"]
    assert best["plan"] == {"bx": 32, "t": 2} and best["time"] == 1.0
    assert tuner("remeasure_failures", "--reason", "registers", code=1)["failure_reasons"] == {"too many registers": 3}
    assert len(runs()) == 21


def test_a_failure_reason_as_a_search_shows_it_picks_the_failures_to_measure_again(kernel, tmp_path):
    """A program's stderr of several lines (a traceback) shows on one line in failure_reasons, its first and last lines
    joined by ' ... ', and remeasure_failures --reason takes a reason as they show it: that line matched no failure,
    as it is no part of the reason the history keeps."""
    broken = tmp_path / "broken"
    (kernel / "bench.py").write_text(
        f"import json, os, sys\nc = json.load(sys.stdin)\n"
        f"if c['bx'] == 64 and os.path.exists({str(broken)!r}):\n    raise ValueError('no device')\nprint(c['bx'] / 32)\n")
    (kernel / "grid.t1.json").write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "bx", "Values": "[32 * i for i in range(1, 5)]"}]}}))
    common = ("--objective", "command:bench.py", "--space", "grid.t1.json", "--json")
    broken.touch()
    out = _tuner(kernel, *common, "bounded_exhaustive_search", "--profile", "all")
    assert out.returncode == 0, out.stderr
    (shown, count), = json.loads(out.stdout)["failure_reasons"].items()
    assert count == 1 and shown == "bench.py exited 1: Traceback (most recent call last): ... ValueError: no device", shown
    broken.unlink()
    out = _tuner(kernel, *common, "remeasure_failures", "--reason", shown)
    assert out.returncode == 0, out.stderr
    again = json.loads(out.stdout)
    assert (again["new_evaluations"], again["failed"], again["best"]["plan"], again["best"]["time"]) == (1, 0, {"bx": 64}, 2.0), again


def test_measuring_failures_again_by_reason_leaves_a_run_killed_at_a_shorter_timeout_alone(kernel, tmp_path):
    """Under a longer --timeout-s a run killed at a shorter one counts as not measured yet, for any search: a round of
    remeasure_failures --reason measured it too, though its reason does not hold the text."""
    log, broken = tmp_path / "runs.log", tmp_path / "broken"
    (kernel / "bench.py").write_text(
        f"import json, os, sys, time\nc = json.load(sys.stdin)\nopen({str(log)!r}, 'a').write(f\"{{c['bx']}}\\n\")\n"
        "if c['bx'] == 64:\n    time.sleep(2)\n"
        f"if c['bx'] == 32 and os.path.exists({str(broken)!r}):\n    print('no device', file=sys.stderr); sys.exit(1)\n"
        "print(c['bx'] / 32)\n")
    (kernel / "grid.t1.json").write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "bx", "Values": "[32 * i for i in range(1, 5)]"}]}}))
    common = ("--objective", "command:bench.py", "--space", "grid.t1.json", "--json")
    broken.touch()
    out = _tuner(kernel, *common, "--timeout-s", "0.5", "bounded_exhaustive_search", "--profile", "all")
    assert out.returncode == 0 and json.loads(out.stdout)["failed"] == 2, out.stderr
    broken.unlink()
    out = _tuner(kernel, *common, "--timeout-s", "30", "remeasure_failures", "--reason", "no device")
    assert out.returncode == 0 and json.loads(out.stdout)["new_evaluations"] == 1, out.stderr
    assert log.read_text().split() == ["32", "64", "96", "128", "32"]


def test_failures_measured_under_an_earlier_space_are_measured_again_under_an_edited_one(kernel, tmp_path):
    """Each command on an edited space takes over what the program measured under the earlier one, failures
    included. The commands that write no history took nothing over: ``remeasure_failures`` said it held no failed
    run (while a search on the new space took the failure over and never ran it again), ``compare_history`` ran the
    default again and ``resume_search_history`` listed no seed. Back on the first space, a search held 32 as failed."""
    log, broken = tmp_path / "runs.log", tmp_path / "broken"
    (kernel / "bench.py").write_text(
        f"import json, os, sys\nc = json.load(sys.stdin)\nopen({str(log)!r}, 'a').write(f\"{{c['bx']}}\\n\")\n"
        f"if c['bx'] == 32 and os.path.exists({str(broken)!r}):\n    print('no device', file=sys.stderr); sys.exit(1)\n"
        "print(c['bx'] / 32)\n")

    def space(top: int) -> tuple[str, ...]:
        (kernel / f"to{top}.t1.json").write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [
            {"Name": "bx", "Values": f"[32 * i for i in range(1, {top + 1})]"}]}}))
        return "--objective", "command:bench.py", "--space", f"to{top}.t1.json", "--json"

    broken.touch()
    out = _tuner(kernel, *space(3), "bounded_exhaustive_search", "--profile", "all")
    assert out.returncode == 0 and json.loads(out.stdout)["failed"] == 1, out.stderr
    broken.unlink()
    out = _tuner(kernel, *space(4), "compare_history")       # reads what it would take over: the default failed, not run
    assert out.returncode == 0 and json.loads(out.stdout)["rows"][0]["time"] is None and len(log.read_text().split()) == 3
    seeds = json.loads(_tuner(kernel, *space(4), "resume_search_history").stdout)["seeds"]
    assert [(seed["plan"], seed["time"]) for seed in seeds] == [({"bx": 64}, 2), ({"bx": 96}, 3)]
    out = _tuner(kernel, *space(4), "remeasure_failures", "--reason", "CUDA")          # refused: nothing taken over yet
    assert out.returncode == 2 and out.stderr.endswith("its 1 failed run says: bench.py exited 1: no device (1)\n"), out.stderr
    out = _tuner(kernel, *space(4), "remeasure_failures", "--reason", "no device")
    assert out.returncode == 0 and "the history holds 3 measurements of this program under another space" in out.stderr, out.stderr
    result = json.loads(out.stdout)
    assert (result["new_evaluations"], result["failed"], result["best"]["plan"]) == (1, 0, {"bx": 32}), result
    out = _tuner(kernel, *space(5), "bounded_exhaustive_search", "--profile", "all")
    assert out.returncode == 0 and json.loads(out.stdout)["best"] == result["best"], out.stdout
    out = _tuner(kernel, *space(3), "search_plans", "--strategy", "focused")      # the first space again: 32 has its time
    assert out.returncode == 0 and json.loads(out.stdout)["best"]["time"] == 1 and "1 measurement" in out.stderr, out.stderr
    assert log.read_text().split() == ["32", "64", "96", "32", "128", "160"]         # 32 again, and once


def test_a_cancel_ends_a_batch_of_program_runs_between_two_runs(kernel, tmp_path):
    """A program's configurations are claimed and scored one at a time, so a cancel (or the time budget) ends even a batch
    of a hundred, such as a local search's pair phase, after the run in progress; the study counts only what ran (it
    claimed and counted the whole batch first, and ran all of it)."""
    log = tmp_path / "runs.log"
    (kernel / "bench.py").write_text(f"import json, sys\nc = json.load(sys.stdin)\nopen({str(log)!r}, 'a').write('run\\n')\n"
                                     "print(1 + c['bx'])\n")
    space = space_from_t1({"ConfigurationSpace": {"TuningParameters": [{"Name": "bx", "Values": "[i for i in range(100)]"}]}})

    def runs() -> int:
        return len(log.read_text().splitlines()) if log.exists() else 0

    objective = ProgramObjective(kernel, ["bench.py"], space)
    search = Search(History(f"sqlite:///{tmp_path / 'h.db'}"), objective, Spec(strategy="checkpoint", mode="time", max_evals=1000),
                    should_stop=lambda: runs() >= 3)
    try:
        values = search.evaluate(np.arange(100, dtype=np.int16)[:, None], {"phase": "pair"})
        assert runs() == 3 and list(values[:3]) == [1, 2, 3] and np.isinf(values[3:]).all()
        assert search.evaluations == 3 and search.stop_reason() == "cancelled"
    finally:
        search.close()
        objective.close()


STUCK = """import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(os.path.join({log!r}, f"run-{{os.getpid()}}"), "w").write(f"{{child.pid}} {{os.getcwd()}}")
time.sleep(600)
"""


@pytest.mark.parametrize(("stop", "workers", "group"), [(signal.SIGTERM, 1, False), (signal.SIGTERM, 2, False),
                                                     (signal.SIGHUP, 1, False), (signal.SIGINT, 2, True), (signal.SIGINT, 2, False)])
def test_a_stop_signal_ends_a_search_with_one_line_and_leaves_no_measuring_process(kernel, tmp_path, stop, workers, group):
    """`timeout`, a job scheduler or `kill` sends SIGTERM to the tuner alone (its workers, and the programs that run in
    process groups of their own, get nothing), and so does a closed SSH session its SIGHUP and `kill -INT` its SIGINT;
    Ctrl-C in a terminal reaches the tuner's whole process group, its workers too (and then twice). Either way every
    program is killed with its children, the private copies are removed, the study is saved as cancelled, and the tuner
    exits 128 + the signal's number saying so on one line, not one per worker."""
    (kernel / "bench.py").write_text(STUCK.format(log=str(tmp_path)))
    process = subprocess.Popen([sys.executable, "-m", "tuner", "--objective", "command:bench.py", "--space", "space.t1.json",
                                "--timeout-s", "3600", "search_plans", "--max-evals", "100", "--workers", str(workers)],
                               cwd=kernel, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=group)
    until(lambda: len(list(tmp_path.glob("run-*"))) >= workers, process)    # each worker is measuring: no run ends on its own,
    measuring = len(list(tmp_path.glob("run-*")))                          # and a worker that failed to start ends the wait
    if group:
        os.killpg(process.pid, stop)                                       # as a terminal's Ctrl-C does
    else:
        process.send_signal(stop)
    _, err = process.communicate(timeout=120)
    assert measuring == workers, f"a worker never started measuring: {err}"
    assert process.returncode == 128 + stop and "Traceback" not in err, err
    said = [line for line in err.splitlines() if line.startswith("tuner search_plans: ")]
    assert len(said) == 1 and said[0] == err.splitlines()[-1] and "resume" in said[0], err
    assert (f"terminated by {stop.name}" if stop != signal.SIGINT else "interrupted") in said[0], err
    runs = {int(run.name[4:]): run.read_text().split(" ", 1) for run in tmp_path.glob("run-*")}
    assert len(runs) == workers
    for program, (child, copy) in runs.items():
        assert not running(program) and not running(int(child)) and not Path(copy).exists()
    with sqlite3.connect(kernel / "studies" / "history.db") as connection:
        assert connection.execute("select state from tuner_sweeps").fetchall() == [("cancelled",)]


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):                            # a process that ended meanwhile
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def _ended(pid: int, limit_s: float = 120.0) -> bool:
    """Wait until process ``pid`` (not a child of this one) has ended, at most ``limit_s``; whether it has."""
    try:
        descriptor = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([descriptor], [], [], limit_s)[0])      # readable once the process has ended
    finally:
        os.close(descriptor)


def test_an_objective_left_open_at_the_interpreters_exit_says_nothing_and_leaves_no_copy(kernel):
    """A script of the library's that never closed its objective printed `Exception ignored in ... __del__` and a
    traceback as it exited: the modules that closing needs were gone by then."""
    script = ("from tuner.objectives.command import ProgramObjective\nfrom tuner.space import space_from_t1\n"
              f"objective = ProgramObjective({str(kernel)!r}, ['bench.py'], space_from_t1({T1!r}))\n"
              "assert objective.evaluate(objective.space.encode({'bx': 64, 'tile': 2, 'layout': 'col'})[None], 'time').cycles[0] == 4.0\n"
              "print(objective._reaper[0].pid, objective._copy)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    reaper, copy = out.stdout.split()
    assert _ended(int(reaper)) and not Path(copy).exists()


def test_the_reaper_kills_the_runs_still_going_and_no_other_and_removes_the_copies(tmp_path):
    """At the end of its pipe the reaper kills each run's group that was not said to be done (a group gone already is no
    error) and leaves a done one's alone (its number may be another process's by then), and removes every copy (one
    removed already is no error)."""
    def started(code: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)

    done, going, gone = started("import time; time.sleep(600)"), started("import time; time.sleep(600)"), started("")
    gone.wait()
    copy = tmp_path / "copy"
    (copy / "folder").mkdir(parents=True)
    (copy / "folder" / "file").write_text("x")
    told = f"run {gone.pid}\nrun {done.pid}\ndone {done.pid}\nrun {going.pid}\ncopy {copy}\ncopy {tmp_path / 'removed'}\n"
    try:
        reaper = subprocess.run([sys.executable, str(REAPER)], input=told, capture_output=True, text=True, timeout=120)
        assert reaper.returncode == 0 and reaper.stderr == "", reaper.stderr
        assert going.wait(timeout=120) == -signal.SIGKILL and done.poll() is None and not copy.exists()
    finally:
        for process in (done, going):
            process.kill()
            process.wait()


KILLED_AT = 12                      # a run inside a local search's step, after others of it
KILLER = """import json, os, signal, sys
c = json.load(sys.stdin)
with open({log!r}, "a") as log:
    log.write(json.dumps(c, sort_keys=True) + "\\n")
if os.environ.get("KILL") and len(open({log!r}).readlines()) == {at}:      # this run kills the tuner outright
    os.kill(os.getppid(), signal.SIGKILL)
else:
    print(c["bx"] / 32 + c["tile"] + (c["layout"] == "col") / 2)
"""


def test_a_tuner_killed_outright_keeps_the_runs_of_its_step_that_ended_before_the_kill(kernel, tmp_path):
    """A local search's step holds several runs (its pair phase hundreds), and their results were written when the step
    ended: `kill -9` lost every run of the step that had finished, and the resumed search ran them again. Now they are
    written as they come (every ``flush_seconds``, 2 s by default; at once here)."""
    log = tmp_path / "runs.log"
    (kernel / "bench.py").write_text(KILLER.format(log=str(log), at=KILLED_AT))
    script = ("from tuner.history import History\nfrom tuner.objectives.command import ProgramObjective\n"
              "from tuner.search import Search, Spec\nfrom tuner.space import space_from_t1\nfrom tuner.strategies import STRATEGIES\n"
              f"objective = ProgramObjective({str(kernel)!r}, ['bench.py'], space_from_t1({T1!r}))\n"
              f"search = Search(History('sqlite:///{tmp_path / 'h.db'}'), objective, Spec(strategy='checkpoint', mode='time', "
              "max_evals=30, start=tuple(objective.space.default().tolist())), flush_seconds=0)\n"
              "STRATEGIES['checkpoint'](search)\nobjective.close()\n")
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env={**os.environ, "KILL": "1"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    ran = log.read_text().splitlines()
    assert len(ran) == len(set(ran)) == KILLED_AT
    resumed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    again = log.read_text().splitlines()[KILLED_AT:]
    assert again and set(again) & set(ran) == {ran[-1]}             # the run the kill cut short, and no other, runs again


def test_a_tuner_killed_outright_leaves_no_measuring_process_and_no_copy(kernel, tmp_path):
    """SIGKILL (`kill -9`, the out-of-memory killer) ends the tuner before it can kill its run, which lives in a process
    group of its own and would measure on (a hung one for ever, holding its GPU): the reaper kills that group and
    removes the private copy."""
    (kernel / "bench.py").write_text(STUCK.format(log=str(tmp_path)))
    process = subprocess.Popen([sys.executable, "-m", "tuner", "--objective", "command:bench.py", "--space", "space.t1.json",
                                "--timeout-s", "3600", "search_plans", "--max-evals", "100"],
                               cwd=kernel, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    until(lambda: any(tmp_path.glob("run-*")), process)
    reaper = [pid for pid in _children(process.pid) if b"reaper.py" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    process.kill()
    process.communicate()
    (run,) = tmp_path.glob("run-*")
    program, (child, copy) = int(run.name[4:]), run.read_text().split(" ", 1)
    try:
        assert _ended(program) and _ended(int(child))
    finally:
        for pid in (program, int(child)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert not running(program) and not running(int(child))
    assert len(reaper) == 1 and _ended(reaper[0]) and not Path(copy).exists()     # it removes the copy, then ends


HELD = """import json, os, sys, time
c = json.load(sys.stdin)
open(os.path.join({log!r}, f"run-{{os.getpid()}}"), "w").close()
while not os.path.exists(os.path.join({log!r}, "release")):    # measures until the test lets it finish
    time.sleep(0.01)
print(c["bx"] / 32 + c["tile"])
"""


@pytest.mark.parametrize(("stop", "said", "code"), [(signal.SIGINT, "interrupted; it saved its progress", 130),
                                                    (signal.SIGKILL, "was killed by SIGKILL; the others took over its claims", 137)])
def test_a_signal_to_one_worker_alone_is_named_once_by_the_command(kernel, tmp_path, stop, said, code):
    """A worker stopped on its own (a `kill` of its pid, the out-of-memory killer) says nothing itself, as under a Ctrl-C
    of the whole group: the command that started it names it on one line, the other worker finishes the study, and the
    exit status is the stopped worker's, as a shell gives it (128 + the signal)."""
    (kernel / "bench.py").write_text(HELD.format(log=str(tmp_path)))
    process = subprocess.Popen([sys.executable, "-m", "tuner", "--objective", "command:bench.py", "--space", "space.t1.json",
                                "--json", "search_plans", "--max-evals", "30", "--workers", "2"],
                               cwd=kernel, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    until(lambda: len(list(tmp_path.glob("run-*"))) >= 2, process)          # both workers measuring
    os.kill(_children(process.pid)[0], stop)
    (tmp_path / "release").touch()
    out, err = process.communicate(timeout=300)
    assert process.returncode == code and "Traceback" not in err, (process.returncode, out, err)
    lines = [line for line in err.splitlines() if line.startswith("tuner search_plans: ")]
    result = json.loads(out)
    stopped = [w for w in result["per_worker"] if w["exit"] != 0]
    assert len(stopped) == 1 and lines == [f"tuner search_plans: worker {stopped[0]['slot']} {said}"], (out, err)
    assert result["evaluations"] == 30 and result["best"] is not None, out


def test_workers_stop_and_save_when_the_command_that_started_them_is_killed(kernel, tmp_path):
    """SIGKILL (`kill -9`, the out-of-memory killer) gives the tuner no chance to pass anything on to its workers. Each
    sees its stdin pipe from the tuner close and stops as on SIGTERM: its program is killed with its children, the
    private copy removed, the study saved as cancelled, and it says why."""
    (kernel / "bench.py").write_text(STUCK.format(log=str(tmp_path)))
    process = subprocess.Popen([sys.executable, "-m", "tuner", "--objective", "command:bench.py", "--space", "space.t1.json",
                                "--timeout-s", "3600", "search_plans", "--max-evals", "100", "--workers", "2"],
                               cwd=kernel, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    until(lambda: len(list(tmp_path.glob("run-*"))) >= 2, process)
    workers = _children(process.pid)
    process.kill()
    process.wait()
    try:
        assert len(workers) == 2 and all(_ended(pid) for pid in workers)
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    err = process.stderr.read()                                        # the workers' stderr: the tuner's, inherited
    assert "Traceback" not in err and err.count("the command that started this worker (--workers) is gone") == 2, err
    runs = {int(run.name[4:]): run.read_text().split(" ", 1) for run in tmp_path.glob("run-*")}
    for program, (child, copy) in runs.items():
        assert not running(program) and not running(int(child)) and not Path(copy).exists()
    with sqlite3.connect(kernel / "studies" / "history.db") as connection:
        assert connection.execute("select state from tuner_sweeps").fetchall() == [("cancelled",)]
