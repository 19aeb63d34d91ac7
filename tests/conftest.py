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
