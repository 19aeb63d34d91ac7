"""Kernel plans: the tensor-plan task's space (the catalogue ``tuner/task/kernel_plan.t1.json``)
and its plan functions: validation without coercion, encoding, a stable hash and diffs.

A plan is a flat JSON object with exactly the catalogue's knobs. Numeric knobs are ordinal
(neighbouring choices are adjacent values); the others are nominal. The catalogue's order is the
order of a plan's index encoding.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tuner.space import Config, SpaceError, load_space
from tuner.workspace import json_reason, loads, read_text

SPACE = load_space(Path(__file__).resolve().parent / "task" / "kernel_plan.t1.json")
PROFILE_DIR = Path(__file__).resolve().parent / "task" / "profiles"   # the task's bounded profiles (package data)
KNOBS = SPACE.knobs
KNOB_NAMES = SPACE.names
Plan = Config


class PlanError(SpaceError):
    """A plan that breaks the schema. The message names the knob, the value and what is allowed."""


def validate_plan(data: Any) -> Plan:
    """Return the plan as a plain dict in catalogue order; raise :class:`PlanError` otherwise."""
    try:
        return SPACE.validate(data)
    except SpaceError as exc:
        raise PlanError(str(exc)) from None


def parse_plan_text(text: str, source: str = "plan") -> Plan:
    """Parse and validate JSON text; ``source`` names it in error messages."""
    try:
        data = loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"{source} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:
        raise PlanError(f"{source} is not valid JSON: {exc}") from None
    return validate_plan(data)


def load_plan(path: str | Path, label: str | None = None) -> Plan:
    """Read and validate a plan file; a missing or unreadable file is a :class:`PlanError` too.
    Messages name the file by ``label`` (default: the path as given)."""
    path = Path(path)
    name = label if label is not None else str(path)
    try:
        text = read_text(path)
    except (OSError, ValueError) as exc:
        raise PlanError(f"cannot read plan {name!r}: {json_reason(exc)}") from None
    return parse_plan_text(text, source=f"plan {name!r}")


def plan_json(plan: Plan) -> str:
    return SPACE.to_json(plan)


def plan_hash(plan: Plan) -> str:
    return SPACE.hash(plan)


def encode(plan: Plan) -> np.ndarray:
    return SPACE.encode(plan)


def decode(indices: np.ndarray | list[int]) -> Plan:
    return SPACE.decode(indices)


def diff(before: Plan, after: Plan) -> dict[str, dict[str, Any]]:
    return SPACE.diff(before, after)
