"""The numeric verifier (design section 6): real emulation, calibrated outcomes, signature cache."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import ROOT

from tuner.task import verifier
from tuner.task.suites import suite


def test_bf16_and_narrow_rounding_are_exact():
    assert verifier.bf16(np.array([1.0 + 2**-8]))[0] == 1.0                  # ties to even
    assert verifier.bf16(np.array([1.0 + 3 * 2**-8]))[0] == 1.0 + 2**-6
    x = np.array([1.0 + 2**-20, 3.0])
    assert verifier.narrow(x, 18)[0] == 1.0 and verifier.narrow(x, 18)[1] == 3.0
    assert verifier.narrow(np.array([1.0 + 2**-17]), 18)[0] == 1.0 + 2**-17


def test_polynomial_exp2_error_is_about_1e_4():
    f = np.linspace(0, 1, 10001)
    rel = np.abs(np.polyval(verifier.EXP2_POLY, f) / np.exp2(f) - 1).max()
    assert 5e-5 < rel < 1e-4


def test_accumulation_orders_rank_by_error():
    case = suite("final")[0]
    errors = {a: verifier.case_error(case, (a, "online_renorm", 96, 32, 1, "fused_scale"))
              for a in ("sequential", "pairwise", "tree", "kahan")}
    assert errors["kahan"] < errors["tree"] < errors["sequential"]
    assert errors["pairwise"] < errors["sequential"]


def _plan(name):
    return json.loads((ROOT / "fixtures" / f"{name}.json").read_text())["plan"]


def test_an_error_equal_to_the_tolerance_passes(iteration2, monkeypatch):
    """The bar is ``max_abs <= tolerance``, in the benchmark's verdict, the verifier's and each case's."""
    from tuner.task import benchmark

    monkeypatch.setattr(benchmark, "TOLERANCE", benchmark.benchmark_report(iteration2, "final", trace=False)["max_abs"])
    assert benchmark.benchmark_report(iteration2, "final", trace=False)["correct"]
    verified = benchmark.verifier_report(iteration2, "final")
    assert verified["correct"] and all(case["passed"] for case in verified["cases"])


def test_required_outcomes():
    baseline, iteration2 = _plan("baseline_row_major"), _plan("tensor_plan_iteration2_neighborhood_best")
    tol = verifier.TOLERANCE
    for mode in ("dev", "final"):
        assert max(verifier.verify(baseline, mode)) <= tol
        assert max(verifier.verify(dict(iteration2, accum="tree", softmax="online_renorm"), mode)) <= tol
    poly = dict(iteration2, accum="sequential", softmax="approx_poly")
    for mode in ("dev", "final"):
        for case, err in zip(suite(mode), verifier.verify(poly, mode), strict=True):
            if case.d == 64:
                assert err <= tol, case.name
    assert any(err > tol for case, err in zip(suite("final"), verifier.verify(poly, "final"), strict=True) if case.d == 128)


def test_results_depend_only_on_the_numeric_signature_and_are_cached(iteration2):
    verifier.case_error.cache_clear()
    first = verifier.verify(iteration2, "dev")
    misses = verifier.case_error.cache_info().misses
    layout_change = dict(iteration2, q_layout="row_major", num_warps=8, dma_burst=256)
    assert verifier.verify(layout_change, "dev") == first
    assert verifier.case_error.cache_info().misses == misses


@pytest.mark.parametrize("split_k", [2, 4])
def test_split_k_merge_by_log_sum_exp_keeps_accuracy(iteration2, split_k):
    errors = verifier.verify(dict(iteration2, split_k=split_k, block_n=32), "final")
    assert max(errors) <= verifier.TOLERANCE
