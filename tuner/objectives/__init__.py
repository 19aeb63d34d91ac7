"""Objectives: what the engine scores configurations with. One interface, four implementations.

``builtin`` (:mod:`.builtin`): this repository's vectorized task (millions of plans per second).
``command`` (:mod:`.command`): any workspace's own ``benchmark.py --json --mode M``, run in a private copy;
``command:PROGRAM`` (the same module): a program of the workspace that measures each configuration of any space.
``cache`` (:mod:`.cache`): measurements already made on a real GPU (a Kernel Tuner cache or a T4 results file).

The package exports the interface only, so the engine that imports it imports no task.
"""

from __future__ import annotations

from tuner.objectives.base import Evaluations, Objective, ObjectiveError

__all__ = ["Evaluations", "Objective", "ObjectiveError"]
