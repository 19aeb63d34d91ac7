"""The contract of benchmark.py and verifier.py (design section 1), through real subprocesses."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from conftest import OVERFLOWING, ROOT

from tuner.plan import KNOB_NAMES

KEYS = {"mode", "best_cycles", "correct", "max_abs", "tolerance", "feasible", "plan_hash", "cases"}


def run(script: str, *args: str, cwd=ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / script), *args], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.parametrize("mode", ["dev", "final"])
def test_benchmark_json_contract(mode):
    out = run("benchmark.py", "--json", "--mode", mode)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert set(report) >= KEYS
    assert report["mode"] == mode and report["tolerance"] == 2.5e-4 and report["feasible"] is True
    assert report["best_cycles"] == sum(c["cycles"] for c in report["cases"])
    assert report["max_abs"] == max(c["max_abs"] for c in report["cases"])
    assert report["correct"] == (report["max_abs"] <= 2.5e-4)
    for case in report["cases"]:
        assert case["name"].startswith(f"{mode}_")
        assert isinstance(case["cycles"], int) and set(case["components"]) >= {"compute", "memory", "tail"}


@pytest.mark.parametrize("script", ["benchmark.py", "verifier.py"])
def test_output_is_byte_identical_across_processes(script):
    plan = "fixtures/tensor_plan_iteration2_neighborhood_best.json"
    for mode in ("dev", "final"):
        first = run(script, "--json", "--mode", mode, "--plan", plan)
        second = run(script, "--json", "--mode", mode, "--plan", plan)
        assert first.returncode == 0 and first.stdout == second.stdout


def test_fixtures_are_reachable_under_harnessgym():
    for name in ("tensor_plan_attempt1_best", "tensor_plan_iteration2_neighborhood_best", "baseline_row_major"):
        direct = run("benchmark.py", "--json", "--plan", f"fixtures/{name}.json")
        harness = run("benchmark.py", "--json", "--plan", f".harnessgym/fixtures/{name}.json")
        assert direct.returncode == 0 and direct.stdout == harness.stdout


def test_repository_plan_is_the_baseline_fixture():
    plan = json.loads((ROOT / "kernel_plan.json").read_text())
    assert plan == json.loads((ROOT / "fixtures/baseline_row_major.json").read_text())["plan"]


def test_human_table_names_every_case():
    out = run("benchmark.py", "--mode", "final")
    assert out.returncode == 0
    assert "best_cycles" in out.stdout and "final_384x128_dense" in out.stdout and "compute" in out.stdout


def test_the_benchmarks_table_says_when_a_plan_is_incorrect_and_keeps_its_columns_aligned(tmp_path):
    """Each number ends under the end of its column's heading, however short the heading ("tail" above 172803)."""
    iteration2 = json.loads((ROOT / "fixtures/tensor_plan_iteration2_neighborhood_best.json").read_text())["plan"]
    path = tmp_path / "overfit.json"
    path.write_text(json.dumps(dict(iteration2, scratchpad_kb=128, accum="sequential", softmax="approx_poly")))
    out = run("benchmark.py", "--mode", "final", "--plan", str(path))
    assert out.returncode == 0
    _, verdict, heading, *cases = out.stdout.splitlines()
    assert verdict.startswith("best_cycles ") and " INCORRECT (max_abs " in verdict and cases

    def ends(line: str) -> list[int]:
        return [word.end() for word in re.finditer(r"\S+", line)]

    for case in cases:
        assert ends(case)[1:] == ends(heading)[1:], (heading, case)     # all but the left-aligned case name


def test_verifier_reports_each_case():
    out = run("verifier.py", "--json", "--mode", "final", "--plan", "fixtures/tensor_plan_iteration2_neighborhood_best.json")
    report = json.loads(out.stdout)
    assert report["correct"] is True and all(c["passed"] for c in report["cases"])
    assert {c["name"] for c in report["cases"]} >= {"final_384x128_dense"}


def test_the_verifiers_table_says_which_case_fails(tmp_path):
    """Without --json each case is a line with its error and pass or FAIL: approx_poly with sequential accumulation
    passes dev and fails the head_dim 128 cases of final (design section 7, behaviour 3)."""
    iteration2 = json.loads((ROOT / "fixtures/tensor_plan_iteration2_neighborhood_best.json").read_text())["plan"]
    path = tmp_path / "overfit.json"
    path.write_text(json.dumps(dict(iteration2, scratchpad_kb=128, accum="sequential", softmax="approx_poly")))
    dev, final = (run("verifier.py", "--mode", mode, "--plan", str(path)) for mode in ("dev", "final"))
    assert dev.returncode == final.returncode == 0
    assert " correct (max_abs " in dev.stdout.splitlines()[0] and "FAIL" not in dev.stdout
    header, *cases = final.stdout.splitlines()
    assert " INCORRECT (max_abs " in header and "tolerance 2.5e-04" in header
    verdicts = {line.split()[0]: line.split()[-1] for line in cases}
    report = json.loads(run("verifier.py", "--json", "--mode", "final", "--plan", str(path)).stdout)
    assert verdicts == {c["name"]: "pass" if c["passed"] else "FAIL" for c in report["cases"]}
    assert "FAIL" in verdicts.values() and "pass" in verdicts.values()


BASE = json.loads((ROOT / "fixtures/baseline_row_major.json").read_text())["plan"]

MALFORMED = {
    "unknown knob": (json.dumps(dict(BASE, warp_size=32)), ["warp_size", "known knobs"]),
    "missing knob": (json.dumps({k: v for k, v in BASE.items() if k != "accum"}), ["accum", "sequential, pairwise, tree, kahan"]),
    "value outside choices": (json.dumps(dict(BASE, block_m=50)), ["block_m", "50", "16, 32, 48, 64, 80, 96, 128"]),
    "nominal outside choices": (json.dumps(dict(BASE, swizzle="diagonal")), ["swizzle", "diagonal", "none, xor, tensorcore"]),
    "string for integer": (json.dumps(dict(BASE, block_n="64")), ["block_n", '"64"', "32, 64, 96, 128, 192"]),
    "float for integer": (json.dumps(dict(BASE, num_warps=4.0)), ["num_warps", "4.0", "2, 4, 6, 8"]),
    "bool for integer": (json.dumps(dict(BASE, split_k=True)), ["split_k", "true", "1, 2, 4"]),
    "integer for string": (json.dumps(dict(BASE, accum=1)), ["accum", "1", "sequential"]),
    "null value": (json.dumps(dict(BASE, softmax=None)), ["softmax", "null", "online_renorm"]),
    "wrong case": (json.dumps(dict(BASE, schedule="Persistent")), ["schedule", "Persistent", "static, persistent, split_pipeline"]),
    "list value": (json.dumps(dict(BASE, dma_stages=[1, 2])), ["dma_stages", "[1, 2]", "1, 2, 3, 4"]),
    "not an object": ("[1, 2, 3]", ["JSON object", "list"]),
    "not JSON": ("{block_m: 64", ["not valid JSON"]),
    "empty file": ("", ["not valid JSON"]),
    "nested past the parser's recursion": ("[" * 100_000, ["not valid JSON: nested too deeply"]),
    "an integer past the parser's digits": ('{"block_m": ' + "1" * 5000 + "}", ["not valid JSON: a number too long to read"]),
    "a knob given twice": (json.dumps(BASE)[:-1] + ', "num_warps": 8}', ["not valid JSON: key 'num_warps' appears twice"]),
    "an integer past a float": (json.dumps(dict(BASE, block_m=10**400)), ["block_m", "16, 32, 48, 64, 80, 96, 128"]),
    "negative value": (json.dumps(dict(BASE, scratchpad_kb=-64)), ["scratchpad_kb", "-64", "48, 64, 96, 128, 160, 192"]),
}


@pytest.mark.parametrize("script", ["benchmark.py", "verifier.py"])
@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_plan_is_an_input_error(tmp_path, script, name):
    text, expected = MALFORMED[name]
    plan = tmp_path / "kernel_plan.json"
    plan.write_text(text)
    out = run(script, "--json", "--plan", str(plan))
    assert out.returncode == 2
    assert out.stdout == ""
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    for fragment in expected:
        assert fragment in out.stderr, (fragment, out.stderr)


def test_missing_plan_file_is_an_input_error(tmp_path):
    out = run("benchmark.py", "--json", cwd=tmp_path)
    assert out.returncode == 2 and "kernel_plan.json" in out.stderr and "Traceback" not in out.stderr


def test_unknown_mode_is_an_input_error():
    out = run("benchmark.py", "--json", "--mode", "fast")
    assert out.returncode == 2 and "fast" in out.stderr and "dev" in out.stderr


def test_infeasible_plan_is_reported_with_an_actionable_reason(tmp_path):
    plan = dict(BASE, **OVERFLOWING)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    out = run("benchmark.py", "--json", "--plan", str(path))
    assert out.returncode == 0
    report = json.loads(out.stdout)
    assert report["feasible"] is False and report["best_cycles"] is None and report["correct"] is False
    assert "scratchpad footprint" in report["reason"] and "exceeds scratchpad_kb=48" in report["reason"]
    assert "raise scratchpad_kb" in report["reason"]
    table = run("benchmark.py", "--plan", str(path))
    assert table.returncode == 0 and table.stdout.splitlines()[1] == f"infeasible: {report['reason']}"


def test_split_k_beyond_kv_blocks_is_infeasible(tmp_path):
    plan = dict(BASE, block_n=192, split_k=4, scratchpad_kb=192)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    report = json.loads(run("benchmark.py", "--json", "--plan", str(path)).stdout)
    assert report["feasible"] is False and "split_k=4" in report["reason"] and "KV blocks" in report["reason"]


def test_every_knob_is_in_the_repository_plan():
    assert list(json.loads((ROOT / "kernel_plan.json").read_text())) == list(KNOB_NAMES)
