"""The two objectives agree, the command objective never touches the workspace's plan, and the built-in one's name,
cheap check and tolerance follow the task."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import misbehaviours, running

import tuner
from tuner.objectives import ObjectiveError, builtin
from tuner.objectives.base import REASON_CHARS, as_float, brief, reason_group
from tuner.objectives.builtin import BuiltinObjective
from tuner.objectives.command import CommandObjective, program_time, repeats_of
from tuner.plan import KNOBS, encode
from tuner.task.benchmark import benchmark_report
from tuner.task.verifier import TOLERANCE


def test_command_objective_agrees_with_builtin(workspace, attempt1, iteration2, baseline):
    before = (workspace / "kernel_plan.json").read_bytes()
    rng = np.random.default_rng(3)
    random = np.stack([rng.integers(0, k.size, 3) for k in KNOBS], axis=1).astype(np.int16)
    idx = np.concatenate([np.stack([encode(p) for p in (attempt1, iteration2, baseline)]), random])
    command, builtin = CommandObjective(workspace), BuiltinObjective()
    try:
        for mode in ("dev", "final"):
            a, b = command.evaluate(idx, mode), builtin.evaluate(idx, mode)
            assert np.array_equal(a.cycles, b.cycles)
            assert np.array_equal(a.correct, b.correct)
            assert np.allclose(a.max_abs, b.max_abs, equal_nan=True)
    finally:
        command.close()
    assert (workspace / "kernel_plan.json").read_bytes() == before


def test_command_objective_needs_a_benchmark(tmp_path):
    with pytest.raises(ObjectiveError, match=r"no benchmark\.py"):
        CommandObjective(tmp_path)


MISBEHAVING = """import json, os, subprocess, sys, time
plan = json.load(open("kernel_plan.json"))
with open(os.path.join({log!r}, "runs"), "a") as log:
    log.write(str(plan["block_m"]) + "\\n")
{misbehaviours}if plan["block_m"] == 48:
    print("garbage, not JSON")
    sys.exit(0)
from tuner.task.cli import benchmark_main
sys.exit(benchmark_main(sys.argv[1:]))
"""


def _misbehaving(workspace, log):
    (workspace / "benchmark.py").write_text(MISBEHAVING.format(log=str(log), misbehaviours=misbehaviours(log, 'plan["block_m"]', 16, 32)))


def test_a_misbehaving_benchmark_is_a_failed_evaluation_and_leaves_no_process(workspace, tmp_path, attempt1):
    _misbehaving(workspace, tmp_path)
    idx = np.stack([encode(attempt1 | {"block_m": m}) for m in (16, 32, 48, 64)])
    objective = CommandObjective(workspace, timeout_s=2)
    try:
        result = objective.evaluate(idx, "dev")
        with pytest.raises(ObjectiveError, match="exited 3: boom"):
            objective.report(attempt1 | {"block_m": 32}, "dev")
    finally:
        objective.close()
    assert np.isinf(result.cycles[:3]).all() and np.isfinite(result.cycles[3]) and not result.correct[:3].any()
    assert "took over 2 s and was killed" in result.reasons[0]
    assert "exited 3: boom" in result.reasons[1] and "printed no JSON" in result.reasons[2] and result.reasons[3] is None
    assert not running(int((tmp_path / "child").read_text()))       # killed with its process group


LYING = """import json
plan = json.load(open("kernel_plan.json"))
print(json.dumps({16: {"best_cycles": "fast", "correct": True}, 32: {"best_cycles": -5, "correct": True},
                  48: {"best_cycles": float("nan"), "correct": True}, 64: {"feasible": False, "best_cycles": 100, "correct": False},
                  80: {"best_cycles": 100, "correct": "false", "max_abs": "tiny"}}[plan["block_m"]]))
"""


def test_a_benchmark_whose_json_lies_is_a_failed_evaluation_not_a_crash(workspace, attempt1):
    (workspace / "benchmark.py").write_text(LYING)
    objective = CommandObjective(workspace, repeats=2)
    try:
        result = objective.evaluate(np.stack([encode(attempt1 | {"block_m": m}) for m in (16, 32, 48, 64, 80)]), "dev")
    finally:
        objective.close()
    assert np.isinf(result.cycles[:4]).all() and result.cycles[4] == 100 and not result.correct.any()
    assert [r.split(", not")[0] for r in result.reasons[:3]] == [f"benchmark.py printed best_cycles {v!r}" for v in ("fast", "-5", "nan")]
    assert result.reasons[3] == "infeasible" and result.reasons[4] is None and np.isnan(result.max_abs[4])
    assert result.samples[4] == [100.0, 100.0] and result.samples[0] == []


DISAGREEING = """import json, os
n = int(open("count").read()) + 1 if os.path.exists("count") else 1     # this run's number, in the private copy
open("count", "w").write(str(n))
print(json.dumps({"best_cycles": 100 * n, "correct": n != 2, "max_abs": [1e-5, 3e-4, 2e-5][n - 1]}))
"""


def test_a_plan_whose_repeated_runs_disagree_is_as_correct_as_its_worst_run(workspace, attempt1):
    """Of three runs of one plan, the second is wrong: the plan is incorrect, its error is the largest of the three and
    its value is the median of their values."""
    (workspace / "benchmark.py").write_text(DISAGREEING)
    objective = CommandObjective(workspace, repeats=3)
    try:
        result = objective.evaluate(encode(attempt1)[None], "dev")
    finally:
        objective.close()
    assert result.samples == [[100.0, 200.0, 300.0]] and result.cycles[0] == 200
    assert not result.correct[0] and result.max_abs[0] == 3e-4 and result.reasons == [None]


CHATTY = """import json
plan = json.load(open("kernel_plan.json"))
report = {"best_cycles": plan["block_m"], "correct": True, "max_abs": 0.0}
print("WARNING: clock throttled\\n{ not JSON")
if plan["block_m"] == 48:
    print(json.dumps(report | {"best_cycles": 999}))                 # a warm-up's report, then the one that counts
print(json.dumps(report, indent=2) + ("\\ndone" if plan["block_m"] == 32 else ""))
"""


def test_a_benchmark_that_prints_lines_before_its_json_is_read(workspace, attempt1):
    """A warning or banner on standard output before the report (drivers print them) is passed over, as a program's lines
    before its last one are: the report is the JSON object that ends the output, starting a line."""
    (workspace / "benchmark.py").write_text(CHATTY)
    objective = CommandObjective(workspace)
    try:
        result = objective.evaluate(np.stack([encode(attempt1 | {"block_m": m}) for m in (16, 32, 48)]), "dev")
    finally:
        objective.close()
    assert list(result.cycles) == [16, np.inf, 48] and result.correct[0] and result.correct[2]
    assert "printed no JSON object" in result.reasons[1]


def test_a_search_on_a_hanging_benchmark_pays_one_timeout_and_goes_on(workspace, tmp_path, attempt1):
    _misbehaving(workspace, tmp_path)
    profile = {knob: [value] for knob, value in attempt1.items()} | {"block_m": [16, 32, 48, 64]}
    (workspace / "studies" / "misbehave.json").write_text(json.dumps({"name": "misbehave", "knobs": profile}))
    out = subprocess.run([sys.executable, "-m", "tuner", "--workspace", str(workspace), "--objective", "command", "--timeout-s", "2",
                          "--json", "bounded_exhaustive_search", "--profile", "misbehave", "--include-final", "false"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["stopped"] == "exhausted" and result["best"]["plan"]["block_m"] == 64
    assert (tmp_path / "runs").read_text().split().count("16") == 1          # the hang cost one run, then the cache knew


MODES_LOGGED = """import json, sys
plan = json.load(open("kernel_plan.json"))
mode = sys.argv[sys.argv.index("--mode") + 1]
with open(sys.argv[0] + ".log", "a") as log:
    log.write(mode + "\\n")
print(json.dumps({"best_cycles": plan["block_m"] * plan["num_warps"] * (3 if mode == "final" else 1), "correct": True, "max_abs": 0.0}))
"""


def test_a_search_that_ends_at_its_time_budget_runs_no_final_benchmark_after_it(workspace, tmp_path, attempt1):
    """Checking its ten best plans in final mode ran up to ten benchmarks past the time budget (or a cancel); a search
    that ends otherwise checks them, and a later search finds those already checked in the history."""
    log = tmp_path / "benchmark.py.log"
    (workspace / "benchmark.py").write_text(MODES_LOGGED.replace('sys.argv[0] + ".log"', repr(str(log))))
    profile = {knob: [value] for knob, value in attempt1.items()} | {"block_m": [16, 32, 48, 64]}
    (workspace / "studies" / "four.json").write_text(json.dumps({"name": "four", "knobs": profile}))

    def search(*args: str) -> tuple[dict, list[str]]:
        log.write_text("")
        out = subprocess.run([sys.executable, "-m", "tuner", "--workspace", str(workspace), "--objective", "command", "--json", *args],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout), log.read_text().split()

    result, runs = search("bounded_exhaustive_search", "--profile", "four")
    assert result["stopped"] == "exhausted" and runs == ["dev"] * 4 + ["final"] * 4
    assert [row["final"] for row in result["top"]] == [3 * row["dev"] for row in result["top"]]
    result, runs = search("search_plans", "--max-evals", "100000", "--time-s", "2")
    assert result["stopped"] == "time budget" and runs == ["dev"] * result["new_evaluations"]
    checked = {row["plan_hash"] for row in result["top"] if "final" in row}
    assert checked == {row["plan_hash"] for row in result["top"] if row["plan"]["block_m"] in (16, 32, 48, 64)
                       and all(row["plan"][k] == v for k, v in attempt1.items() if k != "block_m")}    # the history's, only


def test_a_seed_whose_final_run_was_killed_at_a_shorter_timeout_is_unchecked_under_a_longer_one(workspace, tmp_path, attempt1):
    """The history's seeds take their authority value as every reader does: a final run killed at a shorter --timeout-s
    says only that it took longer, so under a longer limit the plan is a seed not yet checked there (it was dropped as
    incorrect), and under the same limit the failure stands."""
    log = tmp_path / "benchmark.py.log"
    slow_final = (MODES_LOGGED.replace('sys.argv[0] + ".log"', repr(str(log))).replace('mode + "\\n"', 'f"{mode}{plan[\'block_m\']}\\n"')
                  .replace("print(", 'if mode == "final" and plan["block_m"] == 16:\n    import time\n    time.sleep(5)\nprint(', 1))
    (workspace / "benchmark.py").write_text(slow_final)
    profile = {knob: [value] for knob, value in attempt1.items()} | {"block_m": [16, 32, 48, 64]}
    (workspace / "studies" / "four.json").write_text(json.dumps({"name": "four", "knobs": profile}))

    def tuner(timeout: str, *args: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "tuner", "--workspace", str(workspace), "--objective", "command",
                              "--timeout-s", timeout, "--json", *args], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    swept = tuner("1", "bounded_exhaustive_search", "--profile", "four")
    fastest = next(row for row in swept["top"] if row["plan"]["block_m"] == 16)
    assert fastest["final"] is None and not fastest["final_correct"]                # killed in final mode: not the best
    assert swept["best"]["plan"]["block_m"] == 32

    def seed(timeout: str) -> dict | None:
        seeds = tuner(timeout, "resume_search_history", "--limit", "20")["seeds"]
        return next((row for row in seeds if row["plan_hash"] == fastest["plan_hash"]), None)

    assert seed("1") is None                                     # the failure stands under the limit that killed it
    found = seed("30")
    assert found is not None and found["correct"] and found["final"] is None and found["dev"] == fastest["dev"]
    assert log.read_text().split().count("final16") == 1         # the reads ran no benchmark of it


def test_objective_names_change_with_the_scorer(workspace):
    first = CommandObjective(workspace).name
    (workspace / "benchmark.py").write_text((workspace / "benchmark.py").read_text() + "\n# changed\n")
    assert CommandObjective(workspace).name != first
    assert BuiltinObjective().name.startswith("builtin:")


def _builtin_name(package: Path) -> str:
    code = "from tuner.objectives.builtin import BuiltinObjective; print(BuiltinObjective().name)"
    env = {**os.environ, "PYTHONPATH": str(package.parent)}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=package.parent)
    return run.stdout.strip()


def test_the_built_in_objective_is_renamed_by_any_change_to_the_task_and_only_by_one(tmp_path):
    """The history keys cached values by the objective's name: a changed model or verifier must not reuse them, and
    a change elsewhere in the package must not throw them away."""
    source = Path(tuner.__file__).parent
    copies = {}
    for name in ("same", "model", "elsewhere"):
        copies[name] = shutil.copytree(source, tmp_path / name / "tuner", ignore=shutil.ignore_patterns("__pycache__"))
    with open(copies["model"] / "task" / "cycles.py", "a") as changed:
        changed.write("\n# a comment changes the source, so the name\n")
    with open(copies["elsewhere"] / "report.py", "a") as changed:
        changed.write("\n# not the task\n")
    names = {name: _builtin_name(package) for name, package in copies.items()}
    assert names["same"] == BuiltinObjective().name
    assert names["model"] != names["same"]
    assert names["elsewhere"] == names["same"]


def test_the_built_in_cheap_check_rules_out_a_plan_that_runs_in_dev_but_not_in_final(baseline):
    plan = {**baseline, "block_m": 16, "block_n": 192, "block_k": 128, "dma_stages": 2, "accum": "kahan", "scratchpad_kb": 128}
    assert benchmark_report(plan, "dev")["feasible"] and not benchmark_report(plan, "final")["feasible"]
    objective = BuiltinObjective()
    assert not objective.feasible(encode(plan)[None])[0]
    assert objective.feasible(encode(baseline)[None])[0]


@pytest.mark.parametrize(("error", "shown", "correct"), [(TOLERANCE, TOLERANCE, True), (np.nextafter(TOLERANCE, 1.0), TOLERANCE, True),
                                                    (2.50001e-4, 2.50001e-4, False)])
def test_the_built_in_objective_judges_the_error_it_shows_against_the_tolerance(monkeypatch, baseline, error, shown, correct):
    """As ``benchmark.py`` does: ``max_abs`` is shown to 6 significant digits, and correct is ``max_abs <= 2.5e-4`` of that."""
    monkeypatch.setattr(builtin, "verify", lambda plan, mode: [0.0, error])
    result = BuiltinObjective().evaluate(encode(baseline)[None], "dev")
    assert result.max_abs[0] == shown and bool(result.correct[0]) is correct


def test_a_failure_reason_is_shown_on_one_line_and_grouped_by_its_start():
    stderr = "Traceback (most recent call last):\n  File \"bench.py\", line 3\n\n   ValueError: bad tile   \n\n"
    assert brief(stderr) == "Traceback (most recent call last): ... ValueError: bad tile"       # first and last lines, blanks skipped
    assert brief("  too many registers \n\n") == "too many registers"
    assert brief(None) == brief(" \n ") == "no reason given"
    long = "x" * (REASON_CHARS + 50)
    assert reason_group(f"{long}\nsecond line") == long[:REASON_CHARS]
    assert reason_group("a\nb") == "a ... b"


@pytest.mark.parametrize(("value", "expected"), [(3, 3.0), (2.5, 2.5), (True, None), ("1.5", None), (None, None), (10**400, None)])
def test_a_value_read_from_outside_is_a_float_only_where_it_is_a_number(value, expected):
    got = as_float(value)
    assert got == expected if expected is not None else np.isnan(got)


def test_an_objectives_name_says_how_many_runs_its_values_are_the_median_of():
    assert repeats_of("command:0123456789ab") == ("command:0123456789ab", 1)
    assert repeats_of("command:0123456789ab:median5") == ("command:0123456789ab", 5)


@pytest.mark.parametrize(("stdout", "reason"), [
    ('{"error": "too many registers"}', "too many registers"), ('{"time": 1.5, "error": "too many registers"}', "too many registers"),
    ('{"error": ""}', """bench.py printed '{"error": ""}' as its last line, not a time (a positive number or {"time": T})"""),
    ('{"error": null}', """bench.py printed '{"error": null}' as its last line, not a time (a positive number or {"time": T})"""),
])
def test_a_programs_error_is_its_reason_and_an_empty_one_without_a_time_is_no_time(stdout, reason):
    with pytest.raises(ObjectiveError) as refused:
        program_time("bench.py", f"compiling\n{stdout}\n", "")
    assert str(refused.value) == reason


@pytest.mark.parametrize("error", ["null", "false", '""'])
def test_a_program_that_always_prints_an_error_key_reports_a_time_where_it_is_empty(error):
    assert program_time("bench.py", f'{{"time": 1.5, "error": {error}}}\n', "") == 1.5


def test_a_program_that_prints_no_time_is_refused_with_the_end_of_its_long_stderr():
    """Where a program says why it failed: the last line of a traceback, after a long log."""
    stderr = "warming up\n" * 100 + "CUDA error: out of memory"
    with pytest.raises(ObjectiveError) as refused:
        program_time("bench.py", "compiling\n", stderr + "\n")
    assert str(refused.value).endswith("; stderr: " + stderr[-300:])
