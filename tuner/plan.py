"""Typed plans: validation with clear messages, index encoding, a stable hash and diffs.

A plan is a flat JSON object with exactly the knobs of :mod:`tuner.knobs`. Validation never
coerces: ``"16"``, ``16.0`` and ``true`` are not ``16``.
"""

from __future__ import annotations

import hashlib
import json
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, StrictInt, StrictStr, ValidationError, create_model

from tuner.knobs import BY_NAME, KNOB_NAMES, KNOBS, Knob


class PlanError(ValueError):
    """A plan that breaks the schema. The message names the knob, the value and what is allowed."""


def _check_choice(knob: Knob, value: Any) -> Any:
    if value not in knob.choices:
        raise ValueError("not an allowed value")
    return value


def _field(knob: Knob) -> tuple[Any, Any]:
    base = StrictInt if knob.kind == "ordinal" else StrictStr
    return (Annotated[base, AfterValidator(partial(_check_choice, knob))], ...)


PlanModel: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "PlanModel",
    __config__=ConfigDict(extra="forbid", frozen=True),
    **{knob.name: _field(knob) for knob in KNOBS},
)
PlanModel.__doc__ = "A kernel plan: exactly the catalogue's knobs, each one of its choices."

Plan = dict[str, Any]


def _describe_value(name: str, error: dict[str, Any]) -> str:
    knob = BY_NAME[name]
    value = json.dumps(error["input"]) if _jsonable(error["input"]) else repr(error["input"])
    if error["type"] == "value_error":
        return f"knob {name!r}: value {value} is not allowed (allowed: {knob.allowed()})"
    expected = "an integer" if knob.kind == "ordinal" else "a string"
    return f"knob {name!r}: value {value} must be {expected}, one of: {knob.allowed()}"


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _message(data: Any, errors: list[dict[str, Any]]) -> str:
    if not isinstance(data, dict):
        return f"a plan must be a JSON object of knobs, got {type(data).__name__}"
    missing = [str(e["loc"][0]) for e in errors if e["type"] == "missing"]
    unknown = [str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden"]
    parts = [_describe_value(str(e["loc"][0]), e) for e in errors if e["type"] not in ("missing", "extra_forbidden")]
    parts.sort(key=lambda p: KNOB_NAMES.index(p.split("'")[1]))
    if unknown:
        parts.append(f"unknown knob{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                     f"(known knobs: {', '.join(KNOB_NAMES)})")
    if len(missing) == 1:
        parts.append(f"missing knob {missing[0]!r} (allowed: {BY_NAME[missing[0]].allowed()})")
    elif missing:
        parts.append(f"missing knobs {', '.join(map(repr, missing))}")
    return "; ".join(parts)


def validate_plan(data: Any) -> Plan:
    """Return the plan as a plain dict in catalogue order; raise :class:`PlanError` otherwise.

    A fixture object (``{"plan": {...}, "metrics": ..., "provenance": ...}``) stands for its plan.
    """
    if isinstance(data, dict) and isinstance(data.get("plan"), dict) and not set(data) & set(KNOB_NAMES):
        data = data["plan"]
    try:
        model = PlanModel.model_validate(data)
    except ValidationError as exc:
        raise PlanError(_message(data, exc.errors())) from None
    return {name: getattr(model, name) for name in KNOB_NAMES}


def parse_plan_text(text: str, source: str = "plan") -> Plan:
    """Parse and validate JSON text; ``source`` names it in error messages."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"{source} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    return validate_plan(data)


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file; a missing or unreadable file is a :class:`PlanError` too."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"cannot read plan {str(path)!r}: {exc.strerror if isinstance(exc, OSError) else exc}") from None
    return parse_plan_text(text, source=f"plan {str(path)!r}")


def plan_json(plan: Plan) -> str:
    """Canonical text of a plan: catalogue order, two-space indent, trailing newline."""
    return json.dumps({name: plan[name] for name in KNOB_NAMES}, indent=2) + "\n"


def plan_hash(plan: Plan) -> str:
    """Stable 16-hex-digit identity of a plan (sha256 of its canonical compact JSON)."""
    canonical = json.dumps([plan[name] for name in KNOB_NAMES], separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def encode(plan: Plan) -> np.ndarray:
    """Index vector of a valid plan (``int16``, one entry per knob in catalogue order)."""
    return np.array([BY_NAME[name].index(plan[name]) for name in KNOB_NAMES], dtype=np.int16)


def encode_many(plans: list[Plan]) -> np.ndarray:
    """Index matrix (plans x knobs) of valid plans."""
    if not plans:
        return np.zeros((0, len(KNOBS)), dtype=np.int16)
    return np.stack([encode(p) for p in plans])


def decode(indices: np.ndarray | list[int]) -> Plan:
    """Plan of an index vector."""
    return {knob.name: knob.choices[int(i)] for knob, i in zip(KNOBS, indices, strict=True)}


def diff(before: Plan, after: Plan) -> dict[str, dict[str, Any]]:
    """Knobs whose values differ, in catalogue order: ``{knob: {"from": a, "to": b}}``."""
    return {n: {"from": before[n], "to": after[n]} for n in KNOB_NAMES if before[n] != after[n]}
