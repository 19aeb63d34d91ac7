"""The perf scripts refuse what would run nothing (a count below 1, a time of 0, a method or a cache that is not there):
exit 2 with the option and the value named, before anything runs or prints (they used to fail deep inside a run
with a traceback, or run nothing and say so nowhere)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT


@pytest.mark.parametrize(("script", "wrong", "named"), [
    ("cache_load.py", ["--records", "0"], "--records: '0' is not a count of at least 1"),
    ("task_speed.py", ["--plans", "0"], "--plans: '0' is not a count of at least 1"),
    ("history_reads.py", ["--trials", "-5"], "--trials: '-5' is not a count of at least 1"),
    ("mcp_startup.py", ["--runs", "two"], "--runs: 'two' is not a count of at least 1"),
    ("tuner_speed.py", ["--budget", "0"], "--budget: '0' is not a count of at least 1"),
    ("headroom.py", ["--jobs", "0"], "--jobs: '0' is not a count of at least 1"),
    ("headroom.py", ["--budgets", "300", "0"], "--budgets: '0' is not a count"),
    ("headroom.py", ["--caches", str(ROOT / "perf" / "caches"), "--only", "gemm"], "--only gemm"),   # no GEMM cache there
    ("real_caches.py", ["--seeds", "0"], "--seeds: '0' is not a count of at least 1"),
    ("real_caches.py", ["--methods", "tpe"], "--methods: invalid choice: 'tpe'"),
    ("real_caches.py", ["--only", "zzz"], "no cache starts with zzz in"),
    ("program_runs.py", ["--runs", "0"], "--runs: '0' is not a count of at least 1"),
    ("noisy_winner.py", ["--noise", "-1"], "--noise: '-1' is not a noise fraction from 0 to 0.5"),
    ("noisy_winner.py", ["--repeats", "1"], "--repeats: the best are measured again only with --repeats above 1"),
    ("space_speed.py", ["--configs", "0"], "--configs: '0' is not a count of at least 1"),
    ("step_speed.py", ["--repeats", "0"], "--repeats: '0' is not a count of at least 1"),
    ("workers.py", ["--workers", "1", "0"], "--workers: '0' is not a count of at least 1"),
    ("workers.py", ["--seconds", "nan"], "--seconds: 'nan' is not a number of seconds above 0"),
    ("workers.py", ["--crowd", "4", "--kills", "5"], "--kills: 5 is not between 0 and the crowd's 4 workers"),
])
def test_a_perf_script_refuses_what_would_run_nothing(tmp_path, script, wrong, named):
    out = subprocess.run([sys.executable, str(ROOT / "perf" / script), *wrong], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 2 and named in out.stderr and "Traceback" not in out.stderr and not out.stdout


@pytest.mark.parametrize(("script", "small", "shown"), [
    ("cache_load.py", ["--records", "10"], "records/s"),
    ("task_speed.py", ["--plans", "10"], "plans/s"),
    ("history_reads.py", ["--studies", "1", "--trials", "5"], "rank_experiments now"),
    ("mcp_startup.py", ["--runs", "1"], "first validate_plan result"),
    ("program_runs.py", ["--runs", "2"], "ProgramObjective.evaluate"),
    ("noisy_winner.py", ["--seeds", "1"], "overstated speedup: before"),
    ("space_speed.py", ["--configs", "10"], "configurations/s"),
    ("step_speed.py", ["--repeats", "1"], "fixes/s"),
])
def test_a_perf_script_runs_on_a_checkout_at_its_smallest(tmp_path, script, small, shown):
    """Each script builds what it measures from the checkout alone (history_reads.py copied a studies/ folder
    the repository no longer has, and failed before printing a figure)."""
    out = subprocess.run([sys.executable, str(ROOT / "perf" / script), *small], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert shown in out.stdout, out.stdout
