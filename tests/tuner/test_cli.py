"""``python -m tuner``: subcommands, JSON output, clear input errors, and the main job."""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import pairwise

import pytest
from conftest import ROOT


def tuner(workspace, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", "tuner", "--workspace", str(workspace), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def test_every_service_function_has_a_subcommand():
    from tuner import service
    from tuner.cli import COMMANDS

    tools = {"run_objective", "trace_summary", "validate_plan", "resume_search_history", "local_neighborhood_search",
             "bounded_exhaustive_search", "search_plans", "candidate_diff", "benchmark_plan", "apply_candidate",
             "apply_best_verified", "export_candidate_fixture", "compare_history", "rank_experiments", "record_result"}
    assert tools <= set(COMMANDS) and all(hasattr(service, t) for t in tools)


def test_json_output_of_read_only_commands(workspace):
    out = tuner(workspace, "--json", "run_objective", "--mode", "final")
    assert out.returncode == 0 and json.loads(out.stdout)["mode"] == "final"
    trace = json.loads(tuner(workspace, "--json", "trace_summary").stdout)
    assert trace["hotspot"]["case"].startswith("dev_") and trace["findings"]
    assert abs(sum(c["share"] for c in trace["components"].values()) - 1) < 1e-3
    bench = json.loads(tuner(workspace, "benchmark_plan", "--json", "--plan", "tensor_plan_attempt1_best",
                             "--modes", "dev", "final").stdout)
    assert set(bench["reports"]) == {"dev", "final"} and bench["correct_in_all"]
    diff = json.loads(tuner(workspace, "--json", "candidate_diff", "--candidate", "tensor_plan_iteration2_neighborhood_best",
                            "--against", "tensor_plan_attempt1_best").stdout)
    assert set(diff["changes"]) == {"num_warps", "prefetch_distance", "epilogue", "scratchpad_kb"}
    assert diff["metrics"]["dev"]["speedup"] > 1


@pytest.mark.parametrize(("args", "fragment"), [
    (("run_objective", "--mode", "fast"), "mode 'fast' is not allowed"),
    (("run_objective", "--plan", "../../etc/passwd"), "outside the workspace"),
    (("run_objective", "--plan", "no_such_fixture"), "unknown fixture 'no_such_fixture'"),
    (("bounded_exhaustive_search", "--profile", "nope"), "unknown profile 'nope'"),
    (("search_plans", "--strategy", "grid"), "strategy 'grid' is not allowed"),
    (("search_plans", "--max-evals", "-5"), "positive integer"),
    (("apply_candidate", "--plan", "tensor_plan_attempt1_best", "--dry-run", "maybe"), "expected true or false"),
    (("export_candidate_fixture", "--name", "../escape"), "not allowed"),
    (("record_result", "--path", "/tmp/elsewhere.json"), "outside the workspace"),
    (("local_neighborhood_search", "--fixture", "tensor_plan_attempt1_best", "--strategy", "quick"), "not allowed here"),
])
def test_bad_input_exits_2_with_one_clear_line(workspace, args, fragment):
    out = tuner(workspace, *args)
    assert out.returncode == 2, out.stderr
    assert fragment in out.stderr and "Traceback" not in out.stderr


def test_malformed_current_plan_is_an_input_error(workspace):
    (workspace / "kernel_plan.json").write_text('{"block_m": 3}')
    out = tuner(workspace, "run_objective")
    assert out.returncode == 2 and "block_m" in out.stderr and "Traceback" not in out.stderr


def test_main_job_improves_the_baseline_at_least_five_times(workspace):
    out = tuner(workspace, "run", "--apply", "--time-s", "120", timeout=600)
    assert out.returncode == 0, out.stderr
    assert "speedup" in out.stdout and "applied to kernel_plan.json" in out.stdout
    after = json.loads(tuner(workspace, "--json", "benchmark_plan").stdout)
    fixture = json.loads((workspace / "fixtures" / "baseline_row_major.json").read_text())["metrics"]
    assert after["correct_in_all"]
    assert fixture["dev"]["best_cycles"] >= 5 * after["best_cycles"]["dev"]
    assert after["best_cycles"]["final"] <= fixture["final"]["best_cycles"]
    assert (workspace / "fixtures" / "tuner_run_best.json").is_file()
    ranking = json.loads(tuner(workspace, "--json", "rank_experiments").stdout)["ranking"]
    assert ranking and ranking[0]["rank"] == 1 and all(a["final"] <= b["final"] for a, b in pairwise(ranking))
