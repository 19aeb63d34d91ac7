"""Objectives: what the engine scores plans with. One interface, two implementations.

``builtin``: this repository's vectorized task (millions of plans per second).
``command``: any workspace's own ``benchmark.py --json --mode M``, run in a private copy.
"""

from __future__ import annotations

from tuner.objectives.base import Evaluations, Objective
from tuner.objectives.builtin import BuiltinObjective
from tuner.objectives.command import CommandObjective, ObjectiveError

__all__ = ["BuiltinObjective", "CommandObjective", "Evaluations", "Objective", "ObjectiveError"]
