"""Section 7 of the benchmark design: the behaviours that must emerge from the model."""

from __future__ import annotations

from itertools import product

from conftest import case_cycles, cycles, report

from tuner.plan import validate_plan
from tuner.task.benchmark import benchmark_report
from tuner.task.suites import suite


def test_baseline_is_correct_but_at_least_five_times_slower_than_iteration2(baseline, iteration2):
    assert report(baseline, "dev")["correct"] and report(baseline, "final")["correct"]
    assert cycles(baseline, "dev") >= 5 * cycles(iteration2, "dev")


def test_iteration2_beats_attempt1_in_both_modes(attempt1, iteration2):
    for mode in ("dev", "final"):
        assert cycles(iteration2, mode) < cycles(attempt1, mode)


def test_iteration2_changes_are_worth_more_together_than_alone(attempt1, iteration2):
    start = dict(attempt1, prefetch_distance=iteration2["prefetch_distance"])
    changes = {"num_warps": 6, "epilogue": "fused_scale", "scratchpad_kb": 96}
    together = cycles(dict(start, **changes), "dev")
    assert together == cycles(iteration2, "dev")
    for knob, value in changes.items():
        alone = cycles(dict(start, **{knob: value}), "dev")
        assert together < alone, knob
        assert cycles(start, "dev") - together > cycles(start, "dev") - alone


def test_approx_poly_overfits_dev(iteration2):
    roomy = dict(iteration2, scratchpad_kb=128)          # room for the pairwise partial buffer
    overfit = dict(roomy, accum="sequential", softmax="approx_poly")
    safe = dict(roomy, accum="sequential", softmax="online_renorm")
    dev = report(overfit, "dev")
    assert dev["correct"] and dev["best_cycles"] < cycles(safe, "dev")
    final = report(overfit, "final")
    assert not final["correct"]
    assert any(c["max_abs"] > final["tolerance"] for c in final["cases"] if "x128_" in c["name"])
    for accum in ("pairwise", "kahan", "tree"):
        assert iteration2["block_k"] < 128
        assert report(dict(overfit, accum=accum), "final")["correct"], accum


def test_burst_256_helps_the_dense_hotspot_and_hurts_the_sparse_dev_case(iteration2):
    wide = dict(iteration2, dma_burst=256)
    assert case_cycles(wide, "final", "final_384x128_dense") < case_cycles(iteration2, "final", "final_384x128_dense")
    sparse = next(c.name for c in suite("dev") if c.mask == "block_sparse")
    assert case_cycles(wide, "dev", sparse) > case_cycles(iteration2, "dev", sparse)


def test_register_spills_make_larger_tiles_and_fewer_warps_lose(iteration2):
    def spill(plan):
        return sum(c["components"]["spill"] for c in benchmark_report(plan, "final")["cases"])

    fits = dict(iteration2, block_m=64, num_warps=4, scratchpad_kb=192)
    grown = dict(fits, block_m=128)
    assert spill(fits) == 0
    assert spill(grown) > 0
    assert cycles(grown, "final") > cycles(fits, "final")


def test_split_k_helps_the_long_causal_case_and_hurts_the_short_dense_dev_case(iteration2):
    split = dict(iteration2, split_k=2)
    long_causal = next(c.name for c in suite("final") if c.mask == "causal")
    assert case_cycles(split, "final", long_causal) < case_cycles(iteration2, "final", long_causal)
    assert case_cycles(split, "dev", "dev_192x64_dense") > case_cycles(iteration2, "dev", "dev_192x64_dense")


def test_dense_384x128_is_the_final_hotspot_of_iteration2(iteration2):
    cases = report(iteration2, "final")["cases"]
    assert max(cases, key=lambda c: c["cycles"])["name"] == "final_384x128_dense"


def test_swizzled_layouts_need_the_tensorcore_swizzle(iteration2):
    fast = cycles(iteration2, "dev")
    for swizzle in ("none", "xor"):
        assert cycles(dict(iteration2, swizzle=swizzle), "dev") >= 1.5 * fast, swizzle


def test_components_are_non_negative_and_sum_to_the_case_cycles(attempt1, iteration2, baseline):
    odd = validate_plan(dict(baseline, block_m=128, num_warps=2, accum="kahan", schedule="split_pipeline",
                             dma_stages=2, prefetch_distance=4, block_n=128, split_k=2, scratchpad_kb=192))
    for plan, mode in product((attempt1, iteration2, baseline, odd), ("dev", "final")):
        for case in benchmark_report(plan, mode)["cases"]:
            assert all(v >= 0 for v in case["components"].values()), case
            assert sum(case["components"].values()) == case["cycles"], case


def test_iteration2_scores_the_seed_figures_within_one_percent(iteration2):
    assert abs(cycles(iteration2, "dev") / 262005 - 1) <= 0.01
    assert abs(cycles(iteration2, "final") / 1495982 - 1) <= 0.01
    assert report(iteration2, "dev")["correct"] and report(iteration2, "final")["correct"]
