"""Plan validation, encoding, hashing and diffs."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.plan import KNOB_NAMES, KNOBS, SPACE, PlanError, decode, diff, encode, parse_plan_text, plan_hash, plan_json, validate_plan


def test_catalogue_matches_the_design():
    assert len(KNOBS) == 19
    assert int(np.prod([k.size for k in KNOBS])) == SPACE.size
    assert {k.name for k in KNOBS if k.kind == "ordinal"} == {
        "block_m", "block_n", "block_k", "num_warps", "vector_width", "dma_stages", "prefetch_distance", "dma_burst",
        "split_k", "scratchpad_kb"}


def test_encode_decode_round_trip(iteration2):
    idx = encode(iteration2)
    assert decode(idx) == iteration2
    assert all(0 <= i < k.size for i, k in zip(idx, KNOBS, strict=True))


def test_hash_is_stable_and_order_independent(iteration2):
    reordered = dict(reversed(list(iteration2.items())))
    assert plan_hash(validate_plan(reordered)) == plan_hash(iteration2)
    assert plan_hash(iteration2) == "86944e53be5a885b"        # pinned: history and fixtures key on it
    assert plan_hash(dict(iteration2, block_m=64)) != plan_hash(iteration2)


def test_validation_returns_catalogue_order_and_canonical_text(iteration2):
    assert list(validate_plan(dict(reversed(list(iteration2.items()))))) == list(KNOB_NAMES)
    assert parse_plan_text(plan_json(iteration2)) == iteration2


def test_fixture_wrapper_stands_for_its_plan(iteration2):
    assert validate_plan({"name": "x", "plan": iteration2, "metrics": {}}) == iteration2


def test_diff_lists_changed_knobs_in_catalogue_order(attempt1, iteration2):
    changes = diff(attempt1, iteration2)
    assert list(changes) == ["num_warps", "prefetch_distance", "epilogue", "scratchpad_kb"]
    assert changes["num_warps"] == {"from": 4, "to": 6}
    assert diff(iteration2, iteration2) == {}


@pytest.mark.parametrize("bad", [16.0, "16", True, None, 17])
def test_no_coercion(iteration2, bad):
    with pytest.raises(PlanError, match="block_m"):
        validate_plan(dict(iteration2, block_m=bad))
