"""trace_summary: the findings that name the trap a change of the plan walks into (the seed's step 2)."""

from __future__ import annotations

import pytest
from conftest import OVERFLOWING

from tuner import service


@pytest.mark.parametrize(("change", "mode", "finding"), [
    ({"swizzle": "xor"}, "dev", "anti-synergy: swizzled Q read with swizzle=xor: 4-way conflicts"),
    ({"k_layout": "row_major", "v_layout": "row_major"}, "dev",
     "anti-synergy: swizzle=tensorcore on non-swizzled K/V layouts swizzles on the fly during DMA"),
    ({"dma_burst": 256}, "dev", "DMA over-fetch: dma_burst=256 moves 2.00x the useful bytes"),
    ({"block_m": 128, "num_warps": 4, "scratchpad_kb": 192}, "final", "spill: 264 registers per thread needed, limit 255"),
])
def test_a_change_into_a_trap_is_named_among_the_findings(ctx, iteration2, change, mode, finding):
    before = service.trace_summary(ctx, iteration2, mode)["findings"]
    after = service.trace_summary(ctx, dict(iteration2, **change), mode)["findings"]
    assert finding in after and finding not in before
    assert "synergy: swizzled Q with swizzle=tensorcore is conflict-free" in before


def test_a_plan_that_cannot_run_is_traced_as_infeasible_with_the_reason(ctx, iteration2):
    crowded = dict(iteration2, **OVERFLOWING)
    trace = service.trace_summary(ctx, crowded)
    assert trace == {"plan_source": "inline plan", "feasible": False, "reason": trace["reason"]}
    assert trace["reason"].startswith("scratchpad footprint ") and "exceeds scratchpad_kb=48" in trace["reason"]


def test_the_findings_name_each_overhead_of_at_least_5_percent_of_the_cycles_and_never_compute(ctx):
    """Compute is the work itself, not an overhead to remove: it is never a finding, whatever its share."""
    trace = service.trace_summary(ctx, None, "dev")
    shares = {component: entry["share"] for component, entry in trace["components"].items()}
    assert shares["compute"] >= 0.05 and 0.05 <= shares["tail"] < 0.1 and shares["memory"] < 0.05     # what the test is about
    assert "tail is 6% of dev cycles" in trace["findings"]
    assert not any(finding.startswith(("compute ", "memory ")) for finding in trace["findings"])


def test_the_hotspot_is_the_case_of_the_most_cycles_and_each_case_names_its_largest_component(ctx):
    """The model's indicators come per case too, each note among the findings."""
    trace = service.trace_summary(ctx, None, "dev")
    cycles = {case["name"]: case["cycles"] for case in trace["cases"]}
    hottest = max(cycles, key=cycles.__getitem__)
    assert hottest != trace["cases"][0]["name"]                                     # what the test is about
    assert trace["hotspot"] == {"case": hottest, "share": round(cycles[hottest] / sum(cycles.values()), 4)}
    for case in trace["cases"]:
        assert case["dominant"] == max(case["components"], key=case["components"].__getitem__), case
    assert any(case["dominant"] != "compute" for case in trace["cases"])
    assert set(trace["indicators"]) == set(cycles) and trace["indicators"][hottest]["conflict_factors"]["Q"] == 16.0
    assert {note for case in trace["indicators"].values() for note in case["notes"]} <= set(trace["findings"])
