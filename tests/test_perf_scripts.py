"""The perf scripts refuse what would run nothing (a count below 1, a time of 0, a method or a cache that is not there):
exit 2 with the option and the value named, before anything runs or prints (they used to fail deep inside a run
with a traceback, or run nothing and say so nowhere)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest
from conftest import ROOT, toy_cache

from tuner.objectives.cache import T4_VERSION, t4_result

BROKEN = gzip.compress(b'{"tune_params": {"bx": [1, 2')           # a cache cut short: not JSON


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
    ("headroom.py", ["--caches", str(ROOT / "perf" / "caches"), "--only", "convolution", "--seeds", "1", "--budgets", "1", "10"],
     "failures known to exploration"),
])
def test_a_perf_script_runs_on_a_checkout_at_its_smallest(tmp_path, script, small, shown):
    """Each script builds what it measures from the checkout alone (history_reads.py copied a studies/ folder
    the repository no longer has, and failed before printing a figure)."""
    out = subprocess.run([sys.executable, str(ROOT / "perf" / script), *small], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert shown in out.stdout, out.stdout


def test_real_caches_reports_what_it_cannot_replay_and_compares_the_rest(tmp_path):
    """Another GPU's folder of caches may hold a file no method can replay (damaged, or not a cache), or a cache named
    after a shipped kernel whose knobs its T1 file in perf/spaces does not fit: each is one line naming the file and
    why, and every other table is still printed (the first such file used to end the run with a traceback)."""
    caches = tmp_path / "caches"
    caches.mkdir()
    toy_cache(caches, {(bx, tile): bx / 32 + tile for bx in (32, 64, 128) for tile in (1, 2)}, "gemm-tiny.json.gz")
    (caches / "broken-A100.json.gz").write_bytes(BROKEN)
    out = subprocess.run([sys.executable, str(ROOT / "perf" / "real_caches.py"), "--caches", str(caches), "--seeds", "1",
                          "--budget", "4", "--jobs", "1", "--methods", "quick"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "broken-A100.json.gz (no T1 file: no restrictions): skipped: cache file 'broken-A100.json.gz' is not valid JSON" in out.stdout
    assert "gemm-tiny.json.gz (no T1 file: no restrictions): fraction of optimum" in out.stdout
    assert "gemm-tiny.json.gz (restrictions of spaces/gemm.t1.json): skipped: space file 'gemm.t1.json' names knobs" in out.stdout


def test_headroom_on_caches_it_cannot_replay_says_so_and_ends_as_real_caches_does(tmp_path):
    """A cache that ``--only`` matches but the tuner cannot replay is a line saying why, as in real_caches.py; it is
    no bad input (the script used to exit 2 with "no problem matches" under the line that said why)."""
    caches = tmp_path / "caches"
    caches.mkdir()
    (caches / "broken-A100.json.gz").write_bytes(BROKEN)
    out = subprocess.run([sys.executable, str(ROOT / "perf" / "headroom.py"), "--caches", str(caches), "--only", "broken",
                          "--seeds", "1", "--budgets", "1", "4", "--jobs", "1"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0 and not out.stderr, out.stderr
    assert out.stdout.startswith("broken-A100.json.gz with no T1 file: skipped: cache file 'broken-A100.json.gz' is not valid JSON")


def test_a_method_that_fails_on_a_cache_is_one_line_not_the_end_of_the_comparison(tmp_path, monkeypatch):
    """Kernel Tuner replays only its own caches: on a T4 results file (or where it is not installed) each of its runs
    is the reason it failed, on one line, which the table prints in its row's place; this project's methods replay it."""
    monkeypatch.syspath_prepend(str(ROOT / "perf"))
    import real_caches

    t4 = tmp_path / "toy-T4.json"
    t4.write_text(json.dumps({"schema_version": T4_VERSION,
                              "results": [t4_result({"bx": bx}, {"time": bx / 32}, "ms", True, None) for bx in (32, 64)]}))
    method, outcome = real_caches._run((str(t4), None, "pso", 0, 2))
    assert method == "pso" and isinstance(outcome, str) and outcome.startswith("seed 0: ") and "\n" not in outcome
    method, outcome = real_caches._run((str(t4), None, "quick", 0, 2))
    assert method == "quick" and len(outcome) == 2 and outcome[-1] == 1.0 and sorted(outcome) == list(outcome)  # both scored
