"""The task's reports of 400 random plans, pinned: the cycle model and the verifier change only on purpose.

The fixtures' metrics pin three plans; most terms of the model (a swizzle's cost, Kahan's registers, a prefetch
deeper than the pipeline...) touch none of them, and changing one moved no other test. Each pinned row holds a plan's
knob indices, its dev and final ``best_cycles`` and a digest of both ``benchmark.py --json`` reports (every case's
cycles, trace components and ``max_abs`` to 3 digits) and, where the plan runs, of ``trace_summary``'s indicators of
each case (conflicts, pressures, DMA efficiency and the notes they give). A change to the model on purpose rewrites
the file (``python tests/task/test_pins.py``) and says so in its commit.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from tuner.plan import KNOB_NAMES, KNOBS, decode
from tuner.task.benchmark import benchmark_report, case_indicators
from tuner.task.suites import MODES

PINS = Path(__file__).with_name("model_pins.json")
SEED, PLANS = 20261206, 400


def _row(indices: list[int]) -> list[Any]:
    plan = decode(indices)
    reports = [_coarse(benchmark_report(plan, mode)) for mode in MODES]
    indicators = [case_indicators(plan, mode) if report["feasible"] else None for mode, report in zip(MODES, reports, strict=True)]
    digest = hashlib.sha256(json.dumps([reports, indicators], sort_keys=True).encode()).hexdigest()[:16]
    return [*indices, reports[0]["best_cycles"], reports[1]["best_cycles"], digest]


def _coarse(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with each ``max_abs`` to 3 significant digits: the verifier's reference goes through BLAS, whose last
    bit may differ on another processor; 6 digits could then round otherwise, 3 do not (cycles are exact integers)."""
    for part in (report, *report["cases"]):
        part["max_abs"] = None if part["max_abs"] is None else float(f"{part['max_abs']:.3g}")
    return report


def test_the_task_scores_the_pinned_plans_as_when_they_were_pinned():
    pinned = json.loads(PINS.read_text())
    assert pinned["columns"][:len(KNOB_NAMES)] == list(KNOB_NAMES)
    moved = [(row, now) for row in pinned["rows"] if (now := _row(row[:len(KNOB_NAMES)])) != row]
    assert not moved, f"{len(moved)} of {len(pinned['rows'])} plans score otherwise, first: {moved[0]}"
    assert sum(row[len(KNOB_NAMES)] is not None for row in pinned["rows"]) > PLANS / 3       # most terms are reached


def _write() -> None:
    rng = np.random.default_rng(SEED)
    idx = np.stack([rng.integers(0, k.size, PLANS) for k in KNOBS], axis=1)
    rows = [_row([int(v) for v in row]) for row in idx]
    text = json.dumps({"columns": [*KNOB_NAMES, "dev", "final", "reports_sha256"], "rows": rows}, separators=(",", ":"))
    PINS.write_text(text.replace("],[", "],\n[") + "\n")


if __name__ == "__main__":
    _write()
