"""Shared test helpers: the repository root, fixtures and scoring shortcuts."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from tuner.plan import Plan, validate_plan
from tuner.task.benchmark import benchmark_report

# Property tests: a fixed example budget and derandomized examples, so CI is repeatable and bounded.
settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parents[1]

# Two plans at the best dev cycles, 178,866: the second is faster on final, yet the gate (dev better) keeps the first.
BEST_DEV = {"q_layout": "swizzled_mn", "k_layout": "swizzled_nk", "v_layout": "swizzled_kd", "o_layout": "streamed", "block_m": 64,
            "block_n": 64, "block_k": 64, "num_warps": 8, "vector_width": 16, "accum": "sequential", "softmax": "approx_poly",
            "schedule": "split_pipeline", "dma_stages": 2, "prefetch_distance": 2, "dma_burst": 128, "split_k": 1,
            "swizzle": "tensorcore", "epilogue": "fused_scale", "scratchpad_kb": 48}
BEST_DEV_FASTER_FINAL = dict(BEST_DEV, softmax="online", dma_stages=3, prefetch_distance=3, scratchpad_kb=64)
# Changes after which a plan's scratchpad footprint exceeds its scratchpad_kb=48: a plan that cannot run.
OVERFLOWING = {"block_m": 128, "block_n": 192, "block_k": 128, "dma_stages": 4, "scratchpad_kb": 48}


def fixture_plan(name: str) -> Plan:
    return validate_plan(json.loads((ROOT / "fixtures" / f"{name}.json").read_text())["plan"])


def report(plan: Plan, mode: str) -> dict[str, Any]:
    return benchmark_report(plan, mode, trace=False)


def cycles(plan: Plan, mode: str) -> int:
    return report(plan, mode)["best_cycles"]


def case_cycles(plan: Plan, mode: str, name: str) -> int:
    return next(c["cycles"] for c in report(plan, mode)["cases"] if c["name"] == name)


@pytest.fixture(scope="session")
def attempt1() -> Plan:
    return fixture_plan("tensor_plan_attempt1_best")


@pytest.fixture(scope="session")
def iteration2() -> Plan:
    return fixture_plan("tensor_plan_iteration2_neighborhood_best")


@pytest.fixture(scope="session")
def baseline() -> Plan:
    return fixture_plan("baseline_row_major")


COPY_ITEMS = ("benchmark.py", "verifier.py", "_bootstrap.py", "kernel_plan.json", "fixtures", "tuner")


def copy_workspace(root: Path) -> Path:
    """A private copy of the repository at ``root``, to search and apply in (never the repository itself)."""
    import shutil

    root.mkdir(parents=True)
    for item in COPY_ITEMS:
        source = ROOT / item
        if source.is_dir():
            shutil.copytree(source, root / item, ignore=shutil.ignore_patterns("__pycache__", "*.db*"))
        else:
            shutil.copy2(source, root / item)
    (root / "studies").mkdir()                          # the history's and the workspace's own profiles (none yet)
    (root / ".harnessgym").mkdir()
    (root / ".harnessgym" / "fixtures").symlink_to("../fixtures")
    for item in ("mcp", "runtime"):
        shutil.copytree(ROOT / ".harnessgym" / item, root / ".harnessgym" / item, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture()
def workspace(tmp_path):
    """A private copy of the repository to search and apply in."""
    return copy_workspace(tmp_path / "ws")


def child_env() -> dict[str, str]:
    """Environment for child processes: ``python3`` is this interpreter (the test environment)."""
    import os
    import sys

    return dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.fixture()
def ctx(workspace):
    from tuner.service import Context

    return Context.create(workspace)


def workspace_files(root: Path) -> dict[str, str]:
    """Every file of a workspace (a symlink as its target text) by relative path, with its SHA-256."""
    import hashlib
    import os

    out = {}
    for path in root.rglob("*"):
        if "__pycache__" in path.parts or (path.is_dir() and not path.is_symlink()):
            continue
        data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        out[str(path.relative_to(root))] = hashlib.sha256(data).hexdigest()
    return out


def changed_files(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def declared_write(tool: str, path: str, arguments: dict[str, Any]) -> bool:
    """Whether ``path`` (workspace-relative) is one ``tool`` called with ``arguments`` declares it may write."""
    import os

    from tuner.service import WRITES
    from tuner.workspace import BACKUP_DIR, PLAN_FILE, RESULT_PATH

    kinds = WRITES[tool]
    result = arguments.get("path", RESULT_PATH)
    return (("history" in kinds and path.startswith("studies/history.db"))
            or ("plan" in kinds and path == PLAN_FILE)
            or ("fixture" in kinds and path == f"fixtures/{arguments.get('name')}.json")
            or ("result" in kinds and isinstance(result, str) and path == os.path.normpath(result))
            or (bool(kinds - {"history"}) and path.startswith(BACKUP_DIR + "/")))


def running(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie waits for its reaper and runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def where_nothing_can_be_written(folder: Path, command: list[str]) -> list[str]:
    """``command`` run where ``folder`` cannot be written, as on a read-only mount or a shared folder of another user: for
    root (whom permissions do not stop), in a mount namespace of its own where ``folder`` is bound read-only."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return command
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("root cannot be kept from writing a folder here: unshare --mount is not allowed")
    return ["unshare", "--mount", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(folder), *command]


def reading(database: Path) -> sqlite3.Connection:
    """A connection that reads ``database`` and never creates it: a test that polls a history while a tuner makes it
    must not make the file (or hold it) first."""
    return sqlite3.connect(f"file:{database}?mode=ro", uri=True)


def scored_in(database: Path) -> int:
    """The evaluations a history holds so far, read without creating it (0 while it does not exist or has no tables)."""
    try:
        with reading(database) as connection:
            return connection.execute("select count(*) from tuner_evaluations").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def until(done: Callable[[], bool], process: subprocess.Popen, limit_s: float = 300.0) -> bool:
    """Wait until ``done()`` holds (a state, not a time) while ``process`` runs, waiting on the process itself between
    checks; at most ``limit_s``, so that a test whose state never comes fails instead of hanging. Whether it holds."""
    deadline = time.monotonic() + limit_s
    while not done() and process.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.05)
    return done()


def misbehaviours(log: Path, value: str, hang: object, crash: object) -> str:
    """Lines of a benchmark script (importing os, subprocess, sys and time) that misbehave by ``value``: where it is
    ``hang`` the script hangs with a child process of its own (its pid written to LOG/child), where it is ``crash``
    it prints "boom" on stderr and exits 3."""
    return (f"if {value} == {hang!r}:\n"
            '    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])\n'
            f'    open(os.path.join({str(log)!r}, "child"), "w").write(str(child.pid))\n'
            "    time.sleep(600)\n"
            f"if {value} == {crash!r}:\n"
            '    print("boom", file=sys.stderr)\n'
            "    sys.exit(3)\n")


def toy_cache(tmp_path: Path, records: dict[tuple[Any, ...], object], name: str = "toy.json.gz",
              tune_params: dict[str, list[Any]] | None = None) -> Path:
    """A Kernel Tuner cache with ``records`` (a configuration, values in knob order -> time in ms, or an error
    marker) over ``tune_params`` (default: a 3 x 2 space, bx and tile)."""
    import gzip

    tune_params = tune_params or {"bx": [32, 64, 128], "tile": [1, 2]}
    names = list(tune_params)
    data = {"kernel_name": "toy", "tune_params_keys": names, "tune_params": tune_params,
            "cache": {",".join(map(str, combo)): {**dict(zip(names, combo, strict=True)), "time": t} for combo, t in records.items()}}
    path = tmp_path / name
    path.write_bytes(gzip.compress(json.dumps(data).encode()) if name.endswith(".gz") else json.dumps(data).encode())
    return path


@pytest.fixture(scope="session")
def postgres_server():
    """A throwaway PostgreSQL cluster (:mod:`postgres_cluster`), stopped at the end of the session whatever happened;
    the tests that need it skip, saying why, where the machine has no PostgreSQL binaries."""
    from postgres_cluster import NoPostgres, cluster

    try:
        with cluster() as server:
            yield server
    except NoPostgres as exc:
        pytest.skip(str(exc))


@pytest.fixture()
def postgres_url(postgres_server):
    """A fresh database on the throwaway server (dropped afterwards)."""
    import uuid

    from postgres_cluster import create_database, drop_database

    name = f"t_{uuid.uuid4().hex[:12]}"
    yield create_database(postgres_server.url, name)
    drop_database(postgres_server.url, name)
