"""The search space: an Optuna distribution per knob, and named bounded profiles.

Ordinal knobs are integer indices (so TPE sees their order); nominal knobs are categorical.
A profile (``studies/NAME.json``) lists allowed values per knob; its plans are enumerated by a
mixed-radix index, so a grid of millions never has to exist as a list.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from math import prod
from pathlib import Path

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from tuner.knobs import BY_NAME, KNOB_NAMES, KNOBS, Knob
from tuner.workspace import WorkspaceError, check_name

PROFILE_DIR = Path(__file__).resolve().parent.parent / "studies"


def distribution(knob: Knob) -> BaseDistribution:
    """Optuna distribution of a knob: index range for ordinal knobs, choices for nominal ones."""
    if knob.kind == "ordinal":
        return IntDistribution(0, knob.size - 1)
    return CategoricalDistribution(list(knob.choices))


DISTRIBUTIONS: dict[str, BaseDistribution] = {k.name: distribution(k) for k in KNOBS}


def to_params(idx: np.ndarray) -> dict[str, int | str]:
    """Optuna params of an index vector."""
    return {k.name: int(i) if k.kind == "ordinal" else k.choices[int(i)] for k, i in zip(KNOBS, idx, strict=True)}


def from_params(params: dict[str, int | str]) -> np.ndarray:
    """Index vector of Optuna params."""
    return np.array([params[k.name] if k.kind == "ordinal" else k.index(params[k.name]) for k in KNOBS], dtype=np.int16)


class ProfileError(ValueError):
    """A profile that does not exist or is malformed."""


@dataclass(frozen=True)
class Profile:
    """A bounded grid: per knob, the indices (catalogue order) of its allowed values."""

    name: str
    description: str
    choices: tuple[tuple[int, ...], ...]

    @property
    def size(self) -> int:
        return prod(len(c) for c in self.choices)

    def plans(self, start: int, stop: int) -> np.ndarray:
        """Index matrix of plans ``start`` .. ``stop - 1`` in enumeration order (last knob fastest)."""
        flat = np.arange(start, min(stop, self.size), dtype=np.int64)
        out = np.empty((len(flat), len(KNOBS)), dtype=np.int16)
        for j in range(len(KNOBS) - 1, -1, -1):
            options = np.array(self.choices[j], dtype=np.int16)
            flat, digit = np.divmod(flat, len(options))
            out[:, j] = options[digit]
        return out


def _folders(extra: Path | None) -> list[Path]:
    return [f for f in (extra, PROFILE_DIR) if f is not None and f.is_dir()]


def profile_names(extra: Path | None = None) -> list[str]:
    """Names of the profiles in ``extra`` (a workspace's ``studies/``) and the built-in ``studies/``."""
    return sorted({p.stem for folder in _folders(extra) for p in folder.glob("*.json")})


def load_profile(name: str, extra: Path | None = None) -> Profile:
    """The profile ``NAME.json`` from ``extra`` or the built-in ``studies/``; :class:`ProfileError` otherwise."""
    known = ", ".join(profile_names(extra))
    try:
        check_name(name, "profile")
    except WorkspaceError as exc:
        raise ProfileError(f"{exc}; known profiles: {known}") from None
    path = next((folder / f"{name}.json" for folder in _folders(extra) if (folder / f"{name}.json").is_file()), None)
    if path is None or not path.resolve().is_relative_to(path.parent.resolve()):
        raise ProfileError(f"unknown profile {name!r}; known profiles: {known}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ProfileError(f"profile {name!r} is not valid JSON: {exc.msg}") from None
    knobs = data.get("knobs") if isinstance(data, dict) else None
    if not isinstance(knobs, dict) or set(knobs) != set(KNOB_NAMES):
        missing = sorted(set(KNOB_NAMES) - set(knobs or {}))
        unknown = sorted(set(knobs or {}) - set(KNOB_NAMES))
        raise ProfileError(f"profile {name!r} must list every knob (missing: {missing}, unknown: {unknown})")
    choices = []
    for knob_name in KNOB_NAMES:
        values = knobs[knob_name]
        if not isinstance(values, list) or not values:
            raise ProfileError(f"profile {name!r}: knob {knob_name!r} needs a non-empty list of values")
        try:
            indices = tuple(BY_NAME[knob_name].index(v) for v in values)
        except ValueError as exc:
            raise ProfileError(f"profile {name!r}: {exc}") from None
        if len(set(indices)) != len(indices):
            raise ProfileError(f"profile {name!r}: knob {knob_name!r} repeats a value")
        choices.append(indices)
    return Profile(name=name, description=str(data.get("description", "")), choices=tuple(choices))
