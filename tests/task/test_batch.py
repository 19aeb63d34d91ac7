"""The batch path and the single-plan path are one model: they never disagree."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.plan import KNOBS, decode, encode
from tuner.task.benchmark import benchmark_report, score_batch


@pytest.mark.parametrize("mode", ["dev", "final"])
def test_batch_equals_single_plan_path_on_random_plans(mode):
    rng = np.random.default_rng(20261129)
    idx = np.stack([rng.integers(0, k.size, 300) for k in KNOBS], axis=1).astype(np.int16)
    batch = score_batch(idx, mode)
    feasible = 0
    for row, cycles in zip(idx, batch, strict=True):
        report = benchmark_report(decode(row), mode, trace=False)
        assert report["feasible"] == bool(np.isfinite(cycles))
        if report["feasible"]:
            feasible += 1
            assert report["best_cycles"] == cycles
    assert feasible > 50


def test_batch_is_independent_of_chunking_and_order(iteration2, baseline):
    rng = np.random.default_rng(7)
    idx = np.stack([rng.integers(0, k.size, 1000) for k in KNOBS], axis=1).astype(np.int16)
    idx[0], idx[1] = encode(iteration2), encode(baseline)
    whole = score_batch(idx, "dev")
    shuffled = rng.permutation(len(idx))
    assert np.array_equal(score_batch(idx[shuffled], "dev"), whole[shuffled])
    assert np.array_equal(score_batch(idx[:1], "dev"), whole[:1])
    assert score_batch(idx[:0], "dev").shape == (0,)                  # an empty batch scores nothing
