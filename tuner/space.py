"""Search spaces as data: knobs with ordered values and a kind, restrictions, and bounded profiles.

A :class:`Space` is what every strategy sees: configurations are index vectors (``int16``, one
entry per knob in space order), ordinal knobs have meaningful neighbours, nominal ones do not, and
restrictions (conditions) rule configurations out before anything is scored. Spaces come from data:
a T1 tuning-problem file (:func:`space_from_t1`), a Kernel Tuner ``tune_params`` object
(:func:`space_from_tune_params`) or this repository's own catalogue (a T1 file too). Expressions in
those files are untrusted text and go through :mod:`tuner.expressions`, never ``eval``.

A profile (``studies/NAME.json``) lists allowed values per knob; its configurations are
enumerated by a mixed-radix index, so a grid of millions never has to exist as a list.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from math import isfinite, prod
from pathlib import Path
from typing import Any, Literal

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from tuner.expressions import FUNCTION_NAMES, ArithmeticFault, ExpressionError, evaluate, names_in, reserved
from tuner.workspace import WorkspaceError, check_name, loads, quoted, shortened

Kind = Literal["ordinal", "nominal"]
Value = int | float | str | bool
Config = dict[str, Any]
MAX_KNOBS = 64
MAX_VALUES = 10_000                   # values of one knob
MAX_NAME_CHARS = 100                  # of a knob's name (a history keeps a parameter's name in 512)
T1_TYPES = ("int", "uint", "float", "bool", "string")    # a T1 knob's Type, where it gives one
MAX_EXACT_INT = 2**53                 # integer values beyond this would be shown (Optuna, the dashboard) as other numbers
MAX_COUPLED_MOVES = 4096              # joint values of the declared groups of coupled knobs, all together
MAX_JSON_BYTES = 1 << 30              # JSON text of one file, once decompressed: a cache of about a million records
ENUMERATED = 1 << 23                  # configurations of a group of restricted knobs that draw() lists once, at most
ENUMERATION_CHUNK = 1 << 18           # of them checked at a time
DRAW_TRIES = 50                       # redraws of a group too large to list, where its restrictions fail


class SpaceError(ValueError):
    """A space file or a configuration that breaks the space (the message names the knob and value)."""


class ProfileError(ValueError):
    """A profile that does not exist or is malformed."""


def _text(value: Any, limit: int = 60) -> str:
    """JSON text of ``value`` cut to a short prefix (a message never echoes a huge value)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return shortened(text, limit)


@dataclass(frozen=True)
class Knob:
    """One knob: its name, its values in order, whether that order means anything, and its default."""

    name: str
    choices: tuple[Value, ...]
    kind: Kind
    default: Value | None = None

    @property
    def size(self) -> int:
        return len(self.choices)

    @cached_property
    def _positions(self) -> dict[tuple[type, Value], int]:
        """Each value's index, keyed by its type too (``1``, ``1.0`` and ``True`` are three values)."""
        positions: dict[tuple[type, Value], int] = {}
        for i, choice in enumerate(self.choices):
            positions.setdefault((type(choice), choice), i)
        return positions

    def __contains__(self, value: Any) -> bool:
        """Whether ``value`` is one of ``choices`` (same type and value)."""
        try:
            return (type(value), value) in self._positions
        except TypeError:                                   # a list or an object, no knob's value
            return False

    def index(self, value: Any) -> int:
        """Index of ``value`` among ``choices`` (same type and value); ``ValueError`` otherwise."""
        try:
            return self._positions[type(value), value]
        except (KeyError, TypeError):                       # TypeError: a list or an object, no knob's value
            raise ValueError(f"knob {self.name!r}: {_text(value)} is not one of {self.allowed()}") from None

    def allowed(self) -> str:
        """The values as a person writes them in JSON (``true``, not ``True``; strings bare)."""
        return ", ".join(json.dumps(c) if isinstance(c, bool) else str(c) for c in self.choices)

    def expected(self) -> str:
        kinds = {type(c) for c in self.choices}
        said = {frozenset({int}): "an integer", frozenset({str}): "a string", frozenset({bool}): "true or false",
                frozenset({float}): "a number with a decimal point (1.0, not 1)"}
        return said.get(frozenset(kinds), "a number" if kinds <= {int, float} else "one of the listed values")


@dataclass(frozen=True)
class Space:
    """Knobs (in encoding order) and restrictions: the whole of a tuning problem's search space."""

    name: str
    knobs: tuple[Knob, ...]
    conditions: tuple[str, ...] = ()
    coupled: tuple[tuple[int, ...], ...] = ()       # a hint: groups of knobs (positions) that pay only together

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)

    @cached_property
    def by_name(self) -> dict[str, Knob]:
        return {k.name: k for k in self.knobs}

    @cached_property
    def position(self) -> dict[str, int]:
        return {k.name: i for i, k in enumerate(self.knobs)}

    @cached_property
    def sizes(self) -> np.ndarray:
        return np.array([k.size for k in self.knobs])

    @cached_property
    def ordinal(self) -> np.ndarray:
        """Boolean mask of the ordinal knobs."""
        return np.array([k.kind == "ordinal" for k in self.knobs])

    @property
    def size(self) -> int:
        """Configurations before restrictions."""
        return prod(k.size for k in self.knobs)

    @cached_property
    def fingerprint(self) -> str:
        """Stable identity of the space's content (knobs, values, kinds, restrictions)."""
        data = [[k.name, list(k.choices), k.kind] for k in self.knobs] + [list(self.conditions)]
        return hashlib.sha256(json.dumps(data, default=str).encode()).hexdigest()[:12]

    # --- configurations -------------------------------------------------------------------

    def validate(self, data: Any, what: str = "plan") -> Config:
        """The configuration as a dict in space order; :class:`SpaceError` naming every bad knob otherwise.

        Nothing is coerced: ``"16"``, ``16.0`` and ``true`` are not ``16``. A fixture object
        (``{"plan": {...}, ...}``) stands for its configuration.
        """
        if isinstance(data, dict) and isinstance(data.get("plan"), dict) and not set(data) & set(self.names):
            data = data["plan"]
        if not isinstance(data, dict):
            raise SpaceError(f"a {what} must be a JSON object of knobs, got {type(data).__name__}")
        parts = []
        for knob in self.knobs:
            if knob.name not in data:
                continue
            value = data[knob.name]
            if value in knob:
                continue
            if any(type(value) is type(c) for c in knob.choices):
                parts.append(f"knob {knob.name!r}: value {_text(value)} is not allowed (allowed: {knob.allowed()})")
            else:
                parts.append(f"knob {knob.name!r}: value {_text(value)} must be {knob.expected()}, one of: {knob.allowed()}")
        unknown = [str(k) for k in data if k not in self.by_name]
        missing = [k for k in self.names if k not in data]
        if unknown:
            named = ", ".join(quoted(k) for k in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            parts.append(f"unknown knob{'s' if len(unknown) > 1 else ''} {named} "
                         f"(known knobs: {', '.join(self.names)})")
        if len(missing) == 1:
            parts.append(f"missing knob {missing[0]!r} (allowed: {self.by_name[missing[0]].allowed()})")
        elif missing:
            parts.append(f"missing knobs {', '.join(map(repr, missing))}")
        if parts:
            raise SpaceError("; ".join(parts))
        return {name: data[name] for name in self.names}

    def encode(self, config: Config) -> np.ndarray:
        """Index vector of a valid configuration."""
        return np.array([k.index(config[k.name]) for k in self.knobs], dtype=np.int16)

    def encode_many(self, configs: list[Config]) -> np.ndarray:
        """Index vectors of valid configurations, one row each."""
        if not configs:
            return np.zeros((0, len(self.knobs)), dtype=np.int16)
        return np.stack([self.encode(c) for c in configs])

    def decode(self, idx: np.ndarray | list[int] | tuple[int, ...]) -> Config:
        """Configuration of an index vector."""
        return {k.name: k.choices[int(i)] for k, i in zip(self.knobs, idx, strict=True)}

    def hash(self, config: Config) -> str:
        """Stable 16-hex-digit identity of a configuration (sha256 of its values in space order)."""
        canonical = json.dumps([config[name] for name in self.names], separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def hash_idx(self, idx: np.ndarray) -> str:
        return self.hash(self.decode(idx))

    def to_json(self, config: Config) -> str:
        """Canonical text of a configuration: space order, two-space indent, trailing newline."""
        return json.dumps({name: config[name] for name in self.names}, indent=2) + "\n"

    def diff(self, before: Config, after: Config) -> dict[str, dict[str, Any]]:
        """Knobs whose values differ, in space order: ``{knob: {"from": a, "to": b}}``."""
        return {n: {"from": before[n], "to": after[n]} for n in self.names if before[n] != after[n]}

    def default(self) -> np.ndarray:
        """Index vector of the default configuration (each knob's default, else its first value)."""
        return np.array([k.index(k.default) if k.default is not None else 0 for k in self.knobs], dtype=np.int16)

    def sample(self) -> np.ndarray:
        """The default configuration, then rows in which each knob takes each of its values at least once
        (row ``i`` holds value ``i`` modulo the knob's size): a small set that meets every value."""
        rows = np.arange(int(self.sizes.max()))[:, None] % self.sizes[None, :]
        return np.vstack([self.default()[None], rows]).astype(np.int16)

    # --- restrictions ---------------------------------------------------------------------

    def values(self, idx: np.ndarray, names: set[str]) -> dict[str, np.ndarray]:
        """Per knob of ``names`` (in space order), the values of the configurations ``idx`` (plans x knobs) as arrays."""
        idx = np.asarray(idx)
        return {k.name: self._tables[j][idx[:, j]] for j, k in enumerate(self.knobs) if k.name in names}

    @cached_property
    def _reads(self) -> dict[str, set[str]]:
        """The knobs each restriction reads: the only values it needs."""
        return {c: names_in(c) & set(self.names) for c in self.conditions}

    @cached_property
    def _tables(self) -> list[np.ndarray]:
        """Each knob's values as an array; one that mixes strings with numbers, or has a string ending in a NUL
        character, keeps Python objects (numpy would turn the numbers into strings, and drops trailing NULs)."""
        def kept(choices: tuple[Any, ...]) -> bool:
            return len({isinstance(c, str) for c in choices}) > 1 or any(isinstance(c, str) and c.endswith("\0") for c in choices)

        return [np.array(k.choices, dtype=object if kept(k.choices) else None) for k in self.knobs]

    def allowed(self, idx: np.ndarray) -> np.ndarray:
        """Whether each configuration of ``idx`` passes every restriction (bool per row), as Python would
        evaluate each restriction for it: one that divides by zero for a configuration rules it out, any other
        failure is a :class:`SpaceError`.

        A restriction is evaluated for all rows at once (a guarded operand only where its guard lets Python reach it);
        where that fails (a division by zero, an operation numpy refuses, arrays past the evaluator's bounds), it is
        evaluated again row by row, as Python would."""
        return self._passes(self.conditions, idx)

    def failed(self, row: np.ndarray) -> tuple[str, ...]:
        """The restrictions that the configuration ``row`` (an index vector) fails, in the space's order."""
        return tuple(c for c in self.conditions if not self._passes((c,), row)[0])

    def uniform(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` configurations (index vectors) uniformly at random over the whole space, restrictions aside."""
        return np.stack([rng.integers(0, size, count) for size in self.sizes], axis=1).astype(np.int16)

    def draw(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """Up to ``count`` configurations that the restrictions allow, uniformly among them, however few they are:
        the knobs that restrictions link are drawn together from the list of their allowed values (made once per
        space, for a group of at most ``ENUMERATED`` configurations), the others each uniformly. A larger group is
        redrawn where its restrictions fail, ``DRAW_TRIES`` times, and the rows still ruled out are left out."""
        rows = self.uniform(count, rng)
        for positions, conditions, table in self._groups:
            if table is not None:
                rows[:, positions] = table[rng.integers(0, len(table), count)] if len(table) else 0
                continue
            for _ in range(DRAW_TRIES):
                bad = np.flatnonzero(~self._passes(conditions, rows))
                if not len(bad):
                    break
                rows[np.ix_(bad, positions)] = np.stack([rng.integers(0, self.sizes[p], len(bad)) for p in positions], axis=1)
        return rows[self.allowed(rows)]

    def unsatisfiable(self) -> str:
        """Why the restrictions allow no configuration: one that reads no knob and is false, or restrictions that no
        values of the knobs they link pass together (among the groups that :meth:`draw` lists); empty when neither."""
        for condition in self.conditions:
            if not self._reads[condition] and not self._passes((condition,), np.zeros((1, len(self.knobs)), dtype=np.int16))[0]:
                return f"{condition!r} is false whatever the knobs' values"
        never = next((conditions for _, conditions, table in self._groups if table is not None and not len(table)), ())
        return f"no values of the knobs they name pass {', '.join(map(repr, never))} together" if never else ""

    @cached_property
    def linked(self) -> tuple[tuple[int, ...], ...]:
        """The knobs that restrictions link (a restriction links the knobs it reads), as groups of positions: a change
        to the knobs of one group can break or mend only that group's restrictions."""
        group = list(range(len(self.knobs)))

        def root(i: int) -> int:
            while group[i] != i:
                i = group[i]
            return i

        read = [positions for c in self.conditions if (positions := sorted(self.position[n] for n in self._reads[c]))]
        for positions in read:          # a restriction that reads no knob links none: allowed() applies it
            for p in positions[1:]:
                group[root(p)] = root(positions[0])
        return tuple(tuple(i for i in range(len(self.knobs)) if root(i) == r) for r in sorted({root(p[0]) for p in read}))

    @cached_property
    def _groups(self) -> list[tuple[np.ndarray, tuple[str, ...], np.ndarray | None]]:
        """The groups of :attr:`linked` knobs: their positions, their restrictions, and the rows of their values that
        pass them (``None`` past ``ENUMERATED``)."""
        out = []
        for group in self.linked:
            positions = np.array(group, dtype=np.int64)
            conditions = tuple(c for c in self.conditions if any(self.position[n] in group for n in self._reads[c]))
            sizes = self.sizes[positions]
            total = prod(int(n) for n in sizes)
            table = None
            if total <= ENUMERATED:
                parts = []
                for start in range(0, total, ENUMERATION_CHUNK):
                    sub = np.stack(np.unravel_index(np.arange(start, min(start + ENUMERATION_CHUNK, total)), sizes), axis=1)
                    rows = np.zeros((len(sub), len(self.knobs)), dtype=np.int16)
                    rows[:, positions] = sub
                    parts.append(sub[self._passes(conditions, rows)].astype(np.int16))
                table = np.concatenate(parts).reshape(-1, len(positions))
            out.append((positions, conditions, table))
        return out

    def _passes(self, conditions: tuple[str, ...], idx: np.ndarray) -> np.ndarray:
        """Whether each configuration of ``idx`` passes every restriction of ``conditions`` (see :meth:`allowed`)."""
        idx = np.asarray(idx).reshape(-1, len(self.knobs))
        ok = np.ones(len(idx), dtype=bool)
        if not conditions or not len(idx):
            return ok
        names = self.values(idx, set().union(*(self._reads[c] for c in conditions)))
        faulted = []
        for condition in conditions:
            try:
                with np.errstate(all="raise"):
                    value = evaluate(condition, names)
                ok &= np.asarray(value, dtype=bool) if isinstance(value, np.ndarray) else bool(value)   # a list is true, as in Python
            except ExpressionError:                        # a fault on the values, or the arrays past the bounds
                faulted.append(condition)
        for condition in faulted:                          # row by row, where the other restrictions allow
            rows = np.flatnonzero(ok)
            columns = {name: column[rows].tolist() for name, column in names.items()}  # Python values, objects as they are
            ok[rows] = [self._allows(condition, {name: column[i] for name, column in columns.items()}) for i in range(len(rows))]
        return ok

    @staticmethod
    def _allows(condition: str, config: dict[str, Any]) -> bool:
        try:
            return bool(evaluate(condition, config))
        except ArithmeticFault:
            return False
        except ExpressionError as exc:
            raise SpaceError(f"restriction {condition[:80]!r} cannot be evaluated for {_text(config, 200)}: {exc}") from None

    # --- Optuna's view --------------------------------------------------------------------

    @cached_property
    def distributions(self) -> dict[str, BaseDistribution]:
        """Per knob, a distribution over its value indices (the params of :meth:`to_params`): a range for ordinal
        knobs (so an Optuna model sees their order), unordered categories for nominal ones. Indices, not values:
        Optuna finds a categorical value by ``==``, which confuses ``1`` with ``True`` and ``1.0``."""
        return {k.name: IntDistribution(0, k.size - 1) if k.kind == "ordinal" else CategoricalDistribution(list(range(k.size)))
                for k in self.knobs}

    @cached_property
    def shown_distributions(self) -> dict[str, BaseDistribution]:
        """Per knob, what a person reads in a stored trial (optuna-dashboard): numeric ordinal knobs as their
        real value range, so plots show and sort the values themselves; every other knob as its choices."""
        out: dict[str, BaseDistribution] = {}
        for k in self.knobs:
            numeric = k.kind == "ordinal" and all(isinstance(c, int | float) and not isinstance(c, bool) for c in k.choices)
            if numeric and all(isinstance(c, int) for c in k.choices):
                out[k.name] = IntDistribution(min(k.choices), max(k.choices))
            elif numeric:
                out[k.name] = FloatDistribution(float(min(k.choices)), float(max(k.choices)))
            else:
                out[k.name] = CategoricalDistribution(list(k.choices))
        return out

    def shown_internal(self, idx: np.ndarray) -> dict[str, float]:
        """Optuna's stored form of an index vector under :attr:`shown_distributions`: a numeric knob's value itself,
        any other knob's choice index. The index is taken as it is, not looked up by value, since Optuna's lookup
        (``choices.index``) would store ``True`` as a ``1`` listed before it."""
        shown = self.shown_distributions
        return {k.name: float(i) if isinstance(shown[k.name], CategoricalDistribution) else float(k.choices[int(i)])
                for k, i in zip(self.knobs, idx, strict=True)}

    def to_params(self, idx: np.ndarray) -> dict[str, int]:
        """Optuna params of an index vector, under :attr:`distributions`."""
        return {k.name: int(i) for k, i in zip(self.knobs, idx, strict=True)}


# --- readers ----------------------------------------------------------------------------------

def _kind(values: list[Any], declared: Any, where: str) -> Kind:
    if declared is not None:
        if declared not in ("ordinal", "nominal"):
            raise SpaceError(f"{where}: Kind {declared!r} is not allowed (allowed: ordinal, nominal)")
        return declared
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    return "ordinal" if numeric and len(values) > 1 else "nominal"


def _exact(value: Any) -> bool:
    """Whether a float holds ``value`` exactly (strings: always): a finite float, an integer within +-2**53."""
    if isinstance(value, float):
        return isfinite(value)
    return not isinstance(value, int) or abs(value) <= MAX_EXACT_INT


def make_knob(name: Any, values: Any, where: str, default: Any = None, kind: Any = None) -> Knob:
    """A knob from data; :class:`SpaceError` naming ``where`` when the values are not a list of scalars."""
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("__"):
        raise SpaceError(f"{where}: knob name {quoted(name)} is not allowed (a plain identifier, not starting with two underscores)")
    if len(name) > MAX_NAME_CHARS:
        raise SpaceError(f"{where}: knob name {quoted(name)} is too long (at most {MAX_NAME_CHARS} characters)")
    if reserved(name):
        raise SpaceError(f"{where}: knob name {name!r} is not allowed: a restriction could not name it "
                         f"(a Python keyword, or one of the functions {', '.join(FUNCTION_NAMES)})")
    if isinstance(values, str):
        try:
            values = evaluate(values)
        except ExpressionError as exc:
            raise SpaceError(f"{where}: knob {name!r}: {exc}") from None
    if isinstance(values, range | tuple):
        values = list(values)
    if not isinstance(values, list) or not values:
        raise SpaceError(f"{where}: knob {name!r}: values must be a non-empty list, got {_text(values)}")
    if len(values) > MAX_VALUES:
        raise SpaceError(f"{where}: knob {name!r} has {len(values)} values (at most {MAX_VALUES})")
    if not all(isinstance(v, int | float | str | bool) for v in values):
        raise SpaceError(f"{where}: knob {name!r}: values must be numbers, strings or booleans")
    inexact = next((v for v in values if not _exact(v)), None)
    if inexact is not None:
        raise SpaceError(f"{where}: knob {name!r}: value {_text(inexact)} is not allowed (numbers must be finite, "
                         f"integers within +-2**53, which a float holds exactly)")
    if len({(type(v), v) for v in values}) != len(values):
        raise SpaceError(f"{where}: knob {name!r} repeats a value")
    if len(values) == 1:                    # its one value is its default, whatever a file says (the community's
        default = None                      # files have `"Values": "[10]", "Default": 1` and `"Default": [0]`)
    knob = Knob(name, tuple(values), _kind(values, kind, where), default)
    if default is not None and default not in knob:
        raise SpaceError(f"{where}: knob {name!r}: Default {_text(default)} is not one of its values (allowed: {knob.allowed()})")
    return knob


def make_space(name: str, knobs: list[Knob], conditions: list[Any], where: str, coupled: Any = ()) -> Space:
    """A space from knobs, condition strings (each checked for its names and its form) and ``coupled``
    groups of knob names (see :func:`_coupled`)."""
    if not knobs or len(knobs) > MAX_KNOBS:
        raise SpaceError(f"{where}: a space needs 1 to {MAX_KNOBS} knobs, got {len(knobs)}")
    if repeated := [name for name, count in Counter(k.name for k in knobs).items() if count > 1]:
        raise SpaceError(f"{where}: knob name {repeated[0]!r} is given to more than one knob")
    space = Space(name, tuple(knobs), tuple(conditions), _coupled(coupled, knobs, where))
    for condition in conditions:
        if not isinstance(condition, str):
            raise SpaceError(f"{where}: a condition must be an expression string, got {_text(condition)[:60]}")
        try:
            unknown = names_in(condition) - set(space.names)
        except ExpressionError as exc:
            raise SpaceError(f"{where}: {exc}") from None
        if unknown:
            raise SpaceError(f"{where}: condition {condition!r} names unknown knobs {sorted(unknown)}")
    try:
        space.allowed(space.sample())                      # once every name is known: refuses what the evaluator does not allow
    except (ExpressionError, SpaceError) as exc:
        raise SpaceError(f"{where}: {exc}") from None
    return space


def _coupled(groups: Any, knobs: list[Knob], where: str) -> tuple[tuple[int, ...], ...]:
    """Knob positions of each group of ``groups``: a list of lists of two or more distinct knob names
    whose joint values number at most ``MAX_COUPLED_MOVES`` over all the groups (each is a step of
    the local search)."""
    if not isinstance(groups, list | tuple):
        raise SpaceError(f"{where}: Coupled must be a list of lists of knob names, got {_text(groups)}")
    position = {k.name: i for i, k in enumerate(knobs)}
    out, moves = [], 0
    for group in groups:
        names = list(group) if isinstance(group, list | tuple) else []
        if len(names) < 2 or not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
            raise SpaceError(f"{where}: a Coupled group must list two or more distinct knob names, got {_text(group)}")
        unknown = [n for n in names if n not in position]
        if unknown:
            raise SpaceError(f"{where}: Coupled group {_text(names)} names unknown knobs {_text(unknown)}; "
                             f"the knobs are {_text(list(position), 200)}")
        moves += prod(knobs[position[n]].size for n in names)
        if moves > MAX_COUPLED_MOVES:
            raise SpaceError(f"{where}: Coupled groups up to {_text(names)} have {moves} joint values; "
                             f"at most {MAX_COUPLED_MOVES} in all are allowed")
        out.append(tuple(sorted(position[n] for n in names)))
    return tuple(out)


def space_from_t1(data: Any, source: str = "T1 file") -> Space:
    """The space of a T1 tuning-problem object (``ConfigurationSpace.TuningParameters`` and ``Conditions``).

    ``Values`` is a list or an expression string; ``Default`` is optional; an optional ``Kind``
    (``ordinal``/``nominal``) overrides the inference (numbers ordinal, anything else nominal). An
    optional ``ConfigurationSpace.Coupled`` (this project's hint; other T1 readers ignore it) lists
    groups of knob names that pay only together: the local search moves each group jointly.
    """
    config = data.get("ConfigurationSpace") if isinstance(data, dict) else None
    params = config.get("TuningParameters") if isinstance(config, dict) else None
    if not isinstance(params, list):
        raise SpaceError(f"{source}: no ConfigurationSpace.TuningParameters list")
    knobs = []
    for i, p in enumerate(params):
        if not isinstance(p, dict):
            raise SpaceError(f"{source}: TuningParameters[{i}] is not an object")
        if p.get("Type", T1_TYPES[0]) not in T1_TYPES:      # not read otherwise: the values are what the program receives
            raise SpaceError(f"{source}: TuningParameters[{i}] ({quoted(p.get('Name'))}): Type {_text(p['Type'])} is not "
                             f"one of {', '.join(T1_TYPES)}")
        knobs.append(make_knob(p.get("Name"), p.get("Values"), source, p.get("Default"), p.get("Kind")))
    conditions = config.get("Conditions") or []
    if not isinstance(conditions, list):
        raise SpaceError(f"{source}: Conditions must be a list")
    names = [k.name for k in knobs]
    for c in (c for c in conditions if isinstance(c, dict)):     # the knobs it says its expression reads: a typo shows here
        listed, where = c.get("Parameters", []), f"{source}: condition {_text(c.get('Expression'))[:80]}"
        if not isinstance(listed, list):
            raise SpaceError(f"{where}: its Parameters must be a list of knob names, got {_text(listed)[:60]}")
        if unknown := [p for p in listed if p not in names]:
            raise SpaceError(f"{where} lists unknown knobs {_text(unknown)} in its Parameters; the knobs are {_text(names, 200)}")
    expressions = [c.get("Expression") if isinstance(c, dict) else c for c in conditions]
    general = data.get("General") if isinstance(data.get("General"), dict) else {}
    return make_space(str(general.get("BenchmarkName") or Path(source).stem), knobs, expressions, source,
                      [] if config.get("Coupled") is None else config["Coupled"])


def space_from_tune_params(params: Any, keys: Any = None, name: str = "cache", source: str = "cache") -> Space:
    """The space of a Kernel Tuner ``tune_params`` object (knob order: ``keys`` when given)."""
    if not isinstance(params, dict) or not params:
        raise SpaceError(f"{source}: no tune_params object")
    keys = list(params) if keys is None else keys
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys) or set(keys) != set(params):
        raise SpaceError(f"{source}: tune_params_keys must list the knobs of tune_params")
    return make_space(name, [make_knob(k, params[k], source) for k in keys], [], source)


def read_stored(path: str | Path, what: str, shown: str | None = None) -> bytes:
    """The bytes of file ``path`` as stored (compressed, for ``.gz``), read once, as a pipe can only be read: at most
    ``MAX_JSON_BYTES``; :class:`SpaceError` naming the file where it cannot be opened, by ``shown`` or the path as given
    (so that a typo in a folder shows)."""
    path = Path(path)
    shown = str(path) if shown is None else shown
    try:
        with open(path, "rb") as file:
            stored = file.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        raise SpaceError(f"{what} {shown!r} does not exist") from None
    except OSError as exc:
        raise SpaceError(f"{what} {shown!r} cannot be read: {exc.strerror or exc}") from None
    if len(stored) > MAX_JSON_BYTES:
        raise SpaceError(f"{what} {path.name!r} holds more than {MAX_JSON_BYTES >> 20} MiB"
                         f"{' compressed' if path.suffix == '.gz' else ' of JSON'}, the most a file may hold")
    return stored


def read_json(path: str | Path, what: str, completed: Callable[[str], str] | None = None, shown: str | None = None,
              stored: bytes | None = None) -> Any:
    """JSON of a file (``.gz`` decompressed; at most ``MAX_JSON_BYTES`` of text): of ``stored``, its bytes as
    :func:`read_stored` read them, else read now; :class:`SpaceError` naming the file on any failure. ``completed``:
    for a text that is not JSON, the text a writer that stopped part-way would have finished it with (tried once)."""
    path = Path(path)
    shown = str(path) if shown is None else shown
    raw = read_stored(path, what, shown) if stored is None else stored
    if path.suffix == ".gz":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as file:
                raw = file.read(MAX_JSON_BYTES + 1)                     # a compressed file can hide any size: read no further
        except (OSError, EOFError, zlib.error) as exc:
            raise SpaceError(f"{what} {shown!r} cannot be read: {exc}") from None
        if len(raw) > MAX_JSON_BYTES:
            raise SpaceError(f"{what} {path.name!r} holds more than {MAX_JSON_BYTES >> 20} MiB of JSON once decompressed, "
                             "the most a file may hold")
    try:
        try:
            return loads(raw)
        except json.JSONDecodeError as exc:
            if completed is None:
                raise
            try:
                return loads(completed(raw.decode("utf-8-sig")))          # as json.loads reads bytes: a BOM is allowed
            except json.JSONDecodeError:
                raise exc from None
    except ValueError as exc:                                           # not JSON, not UTF-8, or more than the parser holds
        raise SpaceError(f"{what} {path.name!r} is not valid JSON: {getattr(exc, 'msg', exc)}") from None


def space_from_cache(data: dict[str, Any], source: str) -> Space:
    """The space of a Kernel Tuner cache object: its ``tune_params`` (a cache records no restrictions)."""
    if "tune_params" not in data:
        raise SpaceError(f"{source}: a Kernel Tuner cache needs tune_params"
                         + ("; this is a T1 space file, which --space takes" if "ConfigurationSpace" in data else ""))
    return space_from_tune_params(data["tune_params"], data.get("tune_params_keys"), str(data.get("kernel_name") or Path(source).stem),
                                  source)


def load_space(path: str | Path) -> Space:
    """The space of a T1 file, or of a Kernel Tuner cache file (``.json`` or ``.json.gz``; its ``tune_params``)."""
    data, source = read_json(path, "space file"), Path(path).name
    if isinstance(data, dict) and "ConfigurationSpace" not in data and "tune_params" in data:
        return space_from_cache(data, source)
    return space_from_t1(data, source)


# --- profiles ---------------------------------------------------------------------------------

WHOLE_SPACE = "all"                  # the profile every space has: every value of every knob


@dataclass(frozen=True)
class Profile:
    """A bounded grid: per knob, the indices (space order) of its allowed values."""

    name: str
    description: str
    choices: tuple[tuple[int, ...], ...]

    @property
    def size(self) -> int:
        return prod(len(c) for c in self.choices)

    def plans(self, start: int, stop: int) -> np.ndarray:
        """Index matrix of configurations ``start`` .. ``stop - 1`` in enumeration order (last knob fastest)."""
        flat = np.arange(start, min(stop, self.size), dtype=np.int64)
        out = np.empty((len(flat), len(self.choices)), dtype=np.int16)
        for j in range(len(self.choices) - 1, -1, -1):
            options = np.array(self.choices[j], dtype=np.int16)
            flat, digit = np.divmod(flat, len(options))
            out[:, j] = options[digit]
        return out


def _folders(folders: tuple[Path | None, ...]) -> list[Path]:
    return [f for f in folders if f is not None and f.is_dir()]


def _a_profile_file(path: Path) -> bool:
    """Whether ``path`` is a file of its folder: a link that leads out of the folder is none (nothing elsewhere is read
    through it)."""
    return path.is_file() and path.resolve().is_relative_to(path.parent.resolve())


def _of_another_space(path: Path, space: Space) -> bool:
    """Whether a profile file reads as one that lists knobs other than ``space``'s (a profile of another problem)."""
    try:
        data = read_json(path, "profile")
    except SpaceError:
        return False                                    # unreadable: listed, so that asking for it says why
    knobs = data.get("knobs") if isinstance(data, dict) else None
    return isinstance(knobs, dict) and set(knobs) != set(space.names)


def profile_names(space: Space, *folders: Path | None) -> list[str]:
    """Names of the profiles of ``space`` in ``folders`` (``WHOLE_SPACE`` is always one); profiles that list another
    space's knobs, such as the tensor plan's beside a cache, and links out of their folder are left out."""
    return sorted({WHOLE_SPACE} | {p.stem for folder in _folders(folders) for p in folder.glob("*.json")
                                   if _a_profile_file(p) and not _of_another_space(p, space)})


def load_profile(name: str, space: Space, *folders: Path | None) -> Profile:
    """The profile ``NAME.json`` of ``space`` from the first of ``folders`` that holds it; :class:`ProfileError` otherwise."""
    def known() -> str:                                 # for an error only: it reads every profile file of the folders
        return ", ".join(profile_names(space, *folders))

    try:
        check_name(name, "profile")
    except WorkspaceError as exc:
        raise ProfileError(f"{exc}; known profiles: {known()}") from None
    if name == WHOLE_SPACE:
        return Profile(name, "every value of every knob", tuple(tuple(range(k.size)) for k in space.knobs))
    path = next((p for p in (folder / f"{name}.json" for folder in _folders(folders)) if _a_profile_file(p)), None)
    if path is None:
        raise ProfileError(f"unknown profile {name!r}; known profiles: {known()}")
    try:
        data = read_json(path, "profile", shown=path.name)
    except SpaceError as exc:
        raise ProfileError(str(exc)) from None
    knobs = data.get("knobs") if isinstance(data, dict) else None
    if not isinstance(knobs, dict):
        first = space.knobs[0]
        raise ProfileError(f"profile {name!r} needs a knobs object: each knob's name -> its allowed values, "
                           f"as in {{\"knobs\": {{{json.dumps(first.name)}: {json.dumps(list(first.choices[:2]))}, ...}}}}")
    if set(knobs) != set(space.names):
        missing = sorted(set(space.names) - set(knobs))
        unknown = sorted(set(knobs) - set(space.names))
        raise ProfileError(f"profile {name!r} must list every knob (missing: {missing}, unknown: {unknown})")
    choices = []
    for knob in space.knobs:
        values = knobs[knob.name]
        if not isinstance(values, list) or not values:
            raise ProfileError(f"profile {name!r}: knob {knob.name!r} needs a non-empty list of values")
        try:
            indices = tuple(knob.index(v) for v in values)
        except ValueError as exc:
            raise ProfileError(f"profile {name!r}: {exc}") from None
        if len(set(indices)) != len(indices):
            raise ProfileError(f"profile {name!r}: knob {knob.name!r} repeats a value")
        choices.append(indices)
    return Profile(name=name, description=str(data.get("description", "")), choices=tuple(choices))
