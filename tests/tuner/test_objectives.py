"""The two objectives agree, and the command objective never touches the workspace's plan."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.objectives import ObjectiveError
from tuner.objectives.builtin import BuiltinObjective
from tuner.objectives.command import CommandObjective
from tuner.plan import KNOBS, encode


def test_command_objective_agrees_with_builtin(workspace, attempt1, iteration2, baseline):
    before = (workspace / "kernel_plan.json").read_bytes()
    rng = np.random.default_rng(3)
    random = np.stack([rng.integers(0, k.size, 3) for k in KNOBS], axis=1).astype(np.int16)
    idx = np.concatenate([np.stack([encode(p) for p in (attempt1, iteration2, baseline)]), random])
    command, builtin = CommandObjective(workspace), BuiltinObjective()
    try:
        for mode in ("dev", "final"):
            a, b = command.evaluate(idx, mode), builtin.evaluate(idx, mode)
            assert np.array_equal(a.cycles, b.cycles)
            assert np.array_equal(a.correct, b.correct)
            assert np.allclose(a.max_abs, b.max_abs, equal_nan=True)
    finally:
        command.close()
    assert (workspace / "kernel_plan.json").read_bytes() == before


def test_command_objective_needs_a_benchmark(tmp_path):
    with pytest.raises(ObjectiveError, match=r"no benchmark\.py"):
        CommandObjective(tmp_path)


def test_command_objective_reports_a_failing_benchmark(tmp_path):
    (tmp_path / "benchmark.py").write_text("import sys\nprint('boom', file=sys.stderr)\nsys.exit(3)\n")
    objective = CommandObjective(tmp_path)
    with pytest.raises(ObjectiveError, match="exited 3: boom"):
        objective.evaluate(np.zeros((1, len(KNOBS)), dtype=np.int16), "dev")
    objective.close()


def test_objective_names_change_with_the_scorer(workspace):
    first = CommandObjective(workspace).name
    (workspace / "benchmark.py").write_text((workspace / "benchmark.py").read_text() + "\n# changed\n")
    assert CommandObjective(workspace).name != first
    assert BuiltinObjective().name.startswith("builtin:")
