"""Cooperating workers, measured side by side in one run (numbers vary by machine; say how many cores).

    python perf/workers.py [--seconds 20] [--workers 1 2 4 8] [--crowd 16] [--kills 4]

1. Throughput: evaluations per second of 1, 2, 4 and 8 workers of one study, with a command
   objective whose benchmark.py sleeps 50 ms per plan (a stand-in for a GPU run), for ``quick`` and
   for ``exhaustive``, on SQLite and on PostgreSQL, and the ratio to one worker. Each run has a time
   budget; the rate is the evaluations recorded divided by it. Beside it, the CPU cores the workers and
   their benchmark runs kept busy: where that reaches the machine's cores, the machine, not the
   claims, bounds the ratio (each plan costs a Python start of benchmark.py, and quick's proposals).
2. A crowd: 16 workers on one PostgreSQL history running ``quick`` and then an ``exhaustive``
   profile, 4 of them killed with -9 while they hold claims. Printed: errors (survivors' exit
   status), duplicate evaluations (the survivors' new evaluations plus what the killed recorded,
   against the cache rows and claims), lost work (claims never done, members against claims), and
   whether the profile's ranges tile it once.
3. BLAS threads: evaluations in the same time of 4 workers of ``quick`` and of ``bayes`` on the
   model objective, each process with one BLAS thread (the tuner's default) and with one per core
   (OpenBLAS's own default), and the ratio.

PostgreSQL comes from the machine's server binaries (a throwaway cluster, as the tests start one).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from arguments import at_least_one, positive_seconds
from sqlalchemy import text

from tuner import BLAS_THREADS
from tuner.claims import audit
from tuner.history import History

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))        # after the imports of tuner: tests/tuner would stand in for the package

from postgres_cluster import cluster, create_database  # noqa: E402

SLEEP_BENCHMARK = '''"""A stand-in for a GPU benchmark: 50 ms per plan, a value from the plan's text (no imports that cost CPU)."""
import json, sys, time, zlib
plan = open("kernel_plan.json", "rb").read()
time.sleep(0.05)
print(json.dumps({"best_cycles": 100000 + zlib.crc32(plan) % 100000, "correct": True, "max_abs": 0.0, "feasible": True}))
'''
PROFILE = "iteration3_dev_core"


def _workspace(root: Path, sleeping: bool) -> Path:
    workspace = root / ("sleep" if sleeping else "model")
    workspace.mkdir()
    for item in ("kernel_plan.json", "fixtures", "benchmark.py"):
        source = ROOT / item
        shutil.copytree(source, workspace / item) if source.is_dir() else shutil.copy2(source, workspace / item)
    if sleeping:
        (workspace / "benchmark.py").write_text(SLEEP_BENCHMARK)
    return workspace


def _tuner(workspace: Path, history: str, objective: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tuner", "--workspace", str(workspace), "--history", history, "--objective", objective,
                             "--json", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)


def _search(strategy: str, budget: str, seconds: float | None = None) -> list[str]:
    timed = ["--time-s", str(seconds)] if seconds else []
    if strategy != "exhaustive":
        return ["search_plans", "--strategy", strategy, "--seed", "1", "--max-evals", budget, "--include-final", "false", *timed]
    return ["bounded_exhaustive_search", "--profile", PROFILE, "--max-evals", budget, "--include-final", "false", *timed]


def _cpu_seconds() -> float:
    """CPU time of this process's finished children and theirs (workers, benchmark runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def throughput(urls: dict[str, Callable[[str], str]], workspace: Path, counts: list[int], seconds: float) -> None:
    cores = os.cpu_count() or 1
    print(f"1. evaluations per second, benchmark sleeping 50 ms per plan, {seconds:g} s per run; "
          f"in brackets, the CPU cores busy (of {cores}) with {counts[-1]} workers")
    print(f"   {'history':<11}{'strategy':<12}" + "".join(f"{n:>8} w" for n in counts) + f"{'ratio':>12}{'CPU':>8}")
    for kind, url in urls.items():
        for strategy in ("quick", "exhaustive"):
            rates = []
            for n in counts:
                history_url = url(f"{strategy}{n}")
                cpu, started = _cpu_seconds(), time.perf_counter()
                processes = [_tuner(workspace, history_url, "command", *_search(strategy, "1000000", seconds)) for _ in range(n)]
                study = _finished(processes)
                busy = (_cpu_seconds() - cpu) / (time.perf_counter() - started)
                rates.append(_recorded(history_url, study) / seconds)
            print(f"   {kind:<11}{strategy:<12}" + "".join(f"{r:>10.1f}" for r in rates) + f"{rates[-1] / rates[0]:>11.2f}x"
                  f"{f'({busy:.1f})':>8}")


def _finished(processes: list[subprocess.Popen]) -> str:
    """Wait for the workers of one search; its study (any worker's failure ends the measurement)."""
    outputs = [p.communicate() for p in processes]
    failed = [err[-500:] for p, (_, err) in zip(processes, outputs, strict=True) if p.returncode != 0]
    if failed:
        raise SystemExit(f"a worker failed: {failed[0]}")
    return json.loads(outputs[0][0])["study"]


def _recorded(history_url: str, study: str) -> int:
    """The evaluations ``study`` recorded (its done claims)."""
    history = History(history_url)
    done = audit(history, study)["done"]
    history.close()
    return done


def blas_threads(root: Path, workspace: Path, workers: int, seconds: float) -> None:
    cores = str(os.cpu_count() or 1)
    print(f"3. evaluations in {seconds:g} s of {workers} workers on the model objective (SQLite): one BLAS thread per process "
          f"(the default) against {cores} (one per core)")
    for strategy in ("quick", "bayes"):
        done = {}
        for threads in ("1", cores):
            url, env = f"sqlite:///{root / f'blas-{strategy}-{threads}'}.db", {**os.environ, **dict.fromkeys(BLAS_THREADS, threads)}
            processes = [_tuner(workspace, url, "builtin", *_search(strategy, "1000000", seconds), env=env) for _ in range(workers)]
            done[threads] = _recorded(url, _finished(processes))
        print(f"   {strategy:<8}{done['1']:>8,} against {done[cores]:>8,} ({done['1'] / max(done[cores], 1):.2f}x)")


def _kill_holders(history: History, processes: list[subprocess.Popen], kills: int) -> list[subprocess.Popen]:
    pids = {p.pid: p for p in processes}
    while True:
        try:
            with history.engine.connect() as connection:
                rows = connection.execute(text("select worker from tuner_claims where state = 'claimed'")).scalars().all()
        except Exception:
            rows = []
        holders = sorted({int(w.split(":")[1]) for w in rows} & pids.keys())
        if len(holders) >= kills:
            for pid in holders[:kills]:
                pids[pid].send_signal(signal.SIGKILL)
            return [pids[pid] for pid in holders[:kills]]
        time.sleep(0.01)


def crowd(url: str, workspace: Path, workers: int, kills: int) -> None:
    print(f"2. {workers} workers on one PostgreSQL history, {kills} killed with -9 while holding claims")
    history = History(url)
    for strategy, budget in (("quick", "400"), ("exhaustive", "1814400")):
        started = time.perf_counter()
        processes = [_tuner(workspace, url, "builtin", *_search(strategy, budget)) for _ in range(workers)]
        killed = _kill_holders(history, processes, kills)
        outputs = {p.pid: p.communicate() for p in processes}
        seconds = time.perf_counter() - started
        survivors = [p for p in processes if p not in killed]
        errors = sum(p.returncode != 0 for p in survivors) + sum("Traceback" in outputs[p.pid][1] for p in survivors)
        results = [json.loads(outputs[p.pid][0]) for p in survivors if p.returncode == 0]
        study = results[0]["study"]
        report = audit(history, study)
        dead = {p.pid for p in killed}
        with history.engine.connect() as connection:
            rows = connection.execute(text("select worker, size from tuner_claims where study_name = :s and state = 'done'"),
                                      {"s": study}).all()
            cache_rows = connection.execute(text("select count(*) from tuner_evaluations where mode = 'dev'")).scalar_one()
        by_killed = sum(size for worker, size in rows if int(worker.split(":")[1]) in dead)
        scored = sum(r["new_evaluations"] for r in results) + by_killed
        expected = report["range_plans"] or report["members"]
        print(f"   {strategy}: {seconds:.1f} s; errors {errors}; evaluations by survivors + recorded by the killed {scored:,} "
              f"against {expected:,} recorded ({'no duplicates' if scored == expected else 'DUPLICATES'}); "
              f"claims never done {report['unfinished']}; members {report['members']:,} = distinct {report['distinct_members']:,} "
              f"= plan claims {report['plan_claims']:,}; claimed {report['claimed']:,} = counted {report['counted']:,}"
              + (f"; ranges tile the profile: {report['range_gaps'] == 0 and report['range_plans'] == 1_814_400}"
                 if report["range_plans"] else f"; dev cache rows {cache_rows:,}"))
    history.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=positive_seconds, default=20.0, help="time budget of each throughput run (default 20)")
    parser.add_argument("--workers", type=at_least_one, nargs="+", default=[1, 2, 4, 8], help="worker counts (default 1 2 4 8)")
    parser.add_argument("--crowd", type=at_least_one, default=16, help="workers in the kill run (default 16)")
    parser.add_argument("--kills", type=int, default=4, help="workers killed in it (default 4)")
    args = parser.parse_args()
    if not 0 <= args.kills <= args.crowd:
        parser.error(f"argument --kills: {args.kills} is not between 0 and the crowd's {args.crowd} workers")
    root = Path(tempfile.mkdtemp(prefix="tuner-workers-"))
    try:
        sleeping, model = _workspace(root, True), _workspace(root, False)
        with cluster() as server:
            urls = {"SQLite": lambda name: f"sqlite:///{root / name}.db",
                    "PostgreSQL": lambda name: create_database(server.url, name)}
            throughput(urls, sleeping, args.workers, args.seconds)
            crowd(create_database(server.url, "crowd"), model, args.crowd, args.kills)
        blas_threads(root, model, 4, args.seconds)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
