"""Fixtures carry metrics that the current model still produces."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT

from tuner.plan import validate_plan
from tuner.task.benchmark import benchmark_report


@pytest.mark.parametrize("path", sorted((ROOT / "fixtures").glob("*.json")), ids=lambda p: p.stem)
def test_fixture_metrics_match_the_model(path):
    fixture = json.loads(path.read_text())
    assert fixture["name"] == path.stem
    plan = validate_plan(fixture["plan"])
    for mode, metrics in fixture["metrics"].items():
        report = benchmark_report(plan, mode, trace=False)
        assert {k: report[k] for k in metrics} == metrics
