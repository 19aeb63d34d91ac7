"""Shared test helpers: the repository root, fixtures and scoring shortcuts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tuner.plan import Plan, validate_plan
from tuner.task.benchmark import benchmark_report

ROOT = Path(__file__).resolve().parents[1]


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


COPY_ITEMS = ("benchmark.py", "verifier.py", "_bootstrap.py", "kernel_plan.json", "fixtures", "tuner", "studies")


@pytest.fixture()
def workspace(tmp_path):
    """A private copy of the repository to search and apply in (never the repository itself)."""
    import shutil

    root = tmp_path / "ws"
    root.mkdir()
    for item in COPY_ITEMS:
        source = ROOT / item
        if source.is_dir():
            shutil.copytree(source, root / item, ignore=shutil.ignore_patterns("__pycache__", "*.db*"))
        else:
            shutil.copy2(source, root / item)
    (root / ".harnessgym").mkdir()
    (root / ".harnessgym" / "fixtures").symlink_to("../fixtures")
    for item in ("mcp", "runtime"):
        shutil.copytree(ROOT / ".harnessgym" / item, root / ".harnessgym" / item, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def child_env() -> dict[str, str]:
    """Environment for child processes: ``python3`` is this interpreter (the test environment)."""
    import os
    import sys

    return dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.fixture()
def ctx(workspace):
    from tuner.service import Context

    return Context.create(workspace)
