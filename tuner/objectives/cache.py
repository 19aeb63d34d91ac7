"""The cache objective: configurations scored by measurements already made on a real GPU.

It replays a Kernel Tuner cache file (``tune_params``, ``tune_params_keys``, ``cache``; ``.json``
or ``.json.gz``) or a T4 results file (``results`` with ``configuration`` and ``measurements``).
The value is the recorded time (ms, lower is better). A configuration recorded with an error
marker (``InvalidConfig``, ``CompilationFailedConfig``, ``RuntimeFailedConfig``, ``ErrorConfig``;
a T4 ``invalidity`` of ``constraints``, ``compile`` or ``runtime`` reads as the first three) is
infeasible with that reason; one the file does not hold is infeasible as "not measured". The
space comes from the file, or from a T1 file naming the same knobs (which adds its restrictions
and defaults); a record those restrictions rule out is no configuration of the space and has no
value ("ruled out by the space's restrictions"), as a program's run would have none. Restrictions
are the only cheap feasibility: which configurations were measured is not known before they are
asked for.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from tuner.objectives.base import MODE_CHARS, RULED_OUT, TIME, Evaluations, as_float, brief, ruled_out, value_key
from tuner.space import Config, Space, SpaceError, load_space, read_json, read_stored, space_from_cache, space_from_tune_params

MODE = TIME
ERROR_MARKERS = ("InvalidConfig", "CompilationFailedConfig", "RuntimeFailedConfig", "ErrorConfig")
NOT_MEASURED = "not measured"
NO_VALUE = "no {} measurement"                  # a record that holds neither a value nor an error marker
OTHER_FAILURE = "ErrorConfig: {}"               # the reason of a record without a value or one of Kernel Tuner's markers
HIGHER_IS_BETTER = ("GFLOP/s", "TFLOP/s", "GB/s", "TB/s", "GFLOPS/W", "TFLOPS/W", "GFLOP/J", "TFLOP/J", "fitness")
T4_INVALIDITY = {"compile": "CompilationFailedConfig", "runtime": "RuntimeFailedConfig", "constraints": "InvalidConfig"}
FAILURE_CATEGORIES = (*T4_INVALIDITY.items(), ("constraints", RULED_OUT),    # a failure's T4 category, by what its reason
                      ("timeout", OTHER_FAILURE.format("timeout")),            # holds (the last two: a replayed export's)
                      ("correctness", OTHER_FAILURE.format("correctness")))
T4_VERSION = "1.0.0"                            # the T4 results schema written (Kernel Tuner 1.5 writes the same)
MAX_NAMED = 20                                  # knob names quoted in an error, at most
MAX_REASONS = 3                                 # kinds of failed record an error counts, at most


Records = list[tuple[dict[str, Any], Any]]     # each configuration with its value or why it has none


def _kernel_tuner(data: dict[str, Any], source: str) -> tuple[Space, Records, str, str]:
    space = space_from_cache(data, source)
    records = data.get("cache")
    if not isinstance(records, dict):
        raise SpaceError(f"{source}: cache must be an object of records")
    out = []
    for key, record in records.items():
        if not isinstance(record, dict):
            raise SpaceError(f"{source}: cache record {str(key)[:40]!r} is not an object")
        out.append((record, record.get(MODE, NO_VALUE.format(MODE))))    # the record configures its knobs
    named = data.get("objective")
    if (isinstance(named, str) and named != MODE and any(named in record for record, _ in out)
            and not any(MODE in record for record, _ in out)):
        raise SpaceError(f"{source}: its records hold no time, the value the tuner replays (ms, lower is better), but "
                         f"its objective {named[:40]!r}, which the tuner does not replay: whether more or less of it is "
                         "better, the file does not say")
    return space, out, MODE, "ms"


def _t4_quantity(results: list[Any], source: str) -> tuple[str, str]:
    """What a T4 file's values are, and their unit: ``time`` (ms) where its results measure it (Kernel Tuner's always
    do), else the objective its results name (this tuner's export of the tensor plan: ``dev``, in cycles)."""
    def measured() -> Iterator[dict[str, Any]]:                 # read lazily: a time is seldom far from the start
        for result in results:
            if isinstance(result, dict) and isinstance(result.get("measurements"), list):
                yield from (m for m in result["measurements"] if isinstance(m, dict))

    if any(m.get("name") == MODE for m in measured()):
        return MODE, "ms"
    named = next((r.get("objectives") for r in results if isinstance(r, dict) and r.get("objectives")), None)
    if not isinstance(named, list) or not isinstance(named[0], str) or not named[0]:
        return MODE, "ms"                                   # no value anywhere: said by the records' reasons
    if named[0] in HIGHER_IS_BETTER:
        raise SpaceError(f"{source}: its objective {named[0]!r} is higher-is-better and it measures no time; "
                         "the tuner minimizes (lower is better)")
    unit = next((m["unit"] for m in measured() if m.get("name") == named[0] and isinstance(m.get("unit"), str)), "")
    return named[0], unit[:20] or "units"


def _t4_value(result: dict[str, Any], quantity: str, where: str) -> Any:
    """A T4 result's ``quantity``, or why it has none: Kernel Tuner's marker for T4's ``invalidity``."""
    invalidity = str(result.get("invalidity", "correct"))
    if invalidity != "correct":
        return T4_INVALIDITY.get(invalidity, invalidity[:40])
    measurements = result.get("measurements", [])
    if not isinstance(measurements, list):
        raise SpaceError(f"{where}: measurements must be a list")
    return next((m.get("value") for m in measurements if isinstance(m, dict) and m.get("name") == quantity),
                NO_VALUE.format(quantity))


def t4_result(config: dict[str, Any], values: dict[str, float | None], unit: str, correct: bool, failure: str | None,
              runtimes: list[float] | None = None) -> dict[str, Any]:
    """One configuration's T4 result: ``values`` by mode (the first the objective; ``None`` where it has none),
    whether it passed the problem's check, ``failure``, why it has no value: a search's reason, ``"timeout"``
    for a run killed at its time limit, or ``None`` (not known); ``runtimes``: every measurement of the objective's
    value where it was measured repeatedly (its median is the value)."""
    objective = next(iter(values))
    if values[objective] is not None:
        invalidity = "correct" if correct else "correctness"
    elif failure == "timeout":
        invalidity = "timeout"
    else:
        invalidity = next((category for category, marker in FAILURE_CATEGORIES if failure and marker in failure), "runtime")
    return {"configuration": config, "times": {"runtimes": runtimes} if runtimes else {}, "invalidity": invalidity,
            "correctness": 1 if correct else 0,
            "measurements": [{"name": mode, "value": value, "unit": unit} for mode, value in values.items() if value is not None],
            "objectives": [objective]}


def _t4(data: dict[str, Any], source: str) -> tuple[Space, Records, str, str]:
    """The records of a T4 results file, the space their configurations span (each knob's values sorted), and what
    their values are, with the unit (:func:`_t4_quantity`)."""
    results = data.get("results")
    if not isinstance(results, list) or not results:
        raise SpaceError(f"{source}: a T4 results file needs a non-empty results list")
    quantity, unit = _t4_quantity(results, source)
    out: Records = []
    for i, result in enumerate(results):
        config = result.get("configuration") if isinstance(result, dict) else None
        if not isinstance(config, dict) or not config:
            raise SpaceError(f"{source}: results[{i}] has no configuration object")
        if out and config.keys() != out[0][0].keys():
            raise SpaceError(f"{source}: results[{i}] configures {sorted(config)[:MAX_NAMED]}, results[0] {sorted(out[0][0])[:MAX_NAMED]}")
        for name, value in config.items():
            if not isinstance(value, int | float | str | bool):
                raise SpaceError(f"{source}: results[{i}]: knob {str(name)[:40]!r}: {str(value)[:40]!r} is not a number, string or boolean")
        out.append((config, _t4_value(result, quantity, f"{source}: results[{i}]")))
    values = {name: [v for _, v in sorted({(type(c[name]).__name__, c[name]) for c, _ in out},     # 1, True and 1.0 are three values,
                                          key=lambda tv: (isinstance(tv[1], str), tv[1], tv[0]))]      # ordered by type when equal
              for name in out[0][0]}
    return space_from_tune_params(values, list(values), Path(source).stem, source), out, quantity, unit


def _outside(space: Space, config: dict[str, Any]) -> str:
    """How a record's configuration lies outside ``space``: its first knob whose value is not one of the knob's
    (values as JSON, where the type shows: ``32`` is not ``"32"``, nor ``1`` ``1.0``)."""
    for knob in space.knobs:
        value = config.get(knob.name)
        try:
            knob.index(value)
        except ValueError:
            return (f"a record has {knob.name} = {json.dumps(value)[:40]}, "
                    f"the space's values are {json.dumps(list(knob.choices))[:120]}")
    return "a record names other knobs"


def _closed(text: str) -> str:
    """A Kernel Tuner cache closed as Kernel Tuner closes one it finds open: it appends each record with a comma
    after it and the closing braces only when tuning ends, so an interrupted (or running) tuning leaves a file
    that is not JSON until its last comma becomes ``}\\n}`` (``kernel_tuner.util.correct_open_cache``)."""
    return text.rstrip().removesuffix(",") + "}\n}"


class CacheObjective:
    """Scores configurations by looking up their recorded value in a measured cache: the time (ms), or a T4 file's
    objective where it measures no time (lower is better)."""

    def __init__(self, path: str | Path, space_path: str | Path | None = None) -> None:
        path = Path(path)
        stored = read_stored(path, "cache file")          # read once, as a pipe can only be: its digest names the objective
        data = read_json(path, "cache file", _closed, stored=stored)
        if not isinstance(data, dict):
            raise SpaceError(f"cache file {path.name!r} must hold a JSON object")
        space, records, quantity, self.unit = (_t4 if "results" in data and "cache" not in data else _kernel_tuner)(data, path.name)
        if space_path is not None:
            declared = load_space(space_path)
            if set(declared.names) != set(space.names):
                raise SpaceError(f"space file {Path(space_path).name!r} names knobs {sorted(declared.names)}, "
                                 f"the cache {sorted(space.names)}")
            space = declared
        self.space = space
        self.modes = (quantity[:MODE_CHARS],)             # what the values are: the recorded time, for Kernel Tuner
        self.source = path.name
        self.label = f"cache {path.name}"
        self._time: dict[bytes, float] = {}
        self._reason: dict[bytes, str] = {}
        outside = ""                                      # how the first record outside the space lies outside it
        for config, time in records:
            try:
                key = space.encode(config).tobytes()
            except (ValueError, KeyError):
                outside = outside or _outside(space, config)
                continue
            if math.isfinite(value := as_float(time)) and value > 0:
                self._time[key] = value
            else:
                self._reason[key] = time if time in ERROR_MARKERS else OTHER_FAILURE.format(brief(str(time))[:60])
        keys = list(self._time)
        allowed = space.allowed(np.frombuffer(b"".join(keys), dtype=np.int16).reshape(len(keys), len(space.knobs)))
        ruled_out = [key for key, ok in zip(keys, allowed, strict=True) if not ok]
        for key in ruled_out:                             # measured, but not a configuration of this space: no value
            del self._time[key]
        if not self._time and not (ruled_out and space.unsatisfiable()):   # none at all: the searches say so
            where = f"space file {Path(space_path).name!r}" if space_path is not None else "its tune_params"
            held = Counter(self._reason.values()).most_common(MAX_REASONS)
            raise SpaceError(f"cache file {path.name!r} holds no successful measurement"
                             + (f" of a configuration the restrictions of {where} allow (they rule out all "
                                f"{len(ruled_out):,} that have a time)" if ruled_out else
                                f" of a configuration in {where}: {outside}" if outside else "")
                             + (f" (its records: {', '.join(f'{why} {count:,}' for why, count in held)})" if held else ""))
        digest = hashlib.sha256(stored).hexdigest()[:12]
        # where records are ruled out, a new scorer: an older version gave them their times, and a history keeps what
        # an objective of its name scored
        self.name = f"cache:{digest}:{space.fingerprint}" + (":allowed" if ruled_out else "")
        self.optimum: float | None = min(self._time.values(), default=None)    # the best recorded time (ms) the space allows
        self.measures = None                               # replaying is free: nothing to carry over

    def feasible(self, idx: np.ndarray) -> np.ndarray:
        return self.space.allowed(idx)

    @property
    def linked(self) -> tuple[tuple[int, ...], ...]:
        return self.space.linked

    def cycles(self, idx: np.ndarray, mode: str = MODE) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int16)
        return np.array([self._time.get(row.tobytes(), np.inf) for row in idx], dtype=np.float64)

    def reason(self, row: np.ndarray) -> str | None:
        """Why a configuration has no value (``None`` when it has one)."""
        key = np.asarray(row, dtype=np.int16).tobytes()
        if key in self._time:
            return None
        if not self.space.allowed(np.asarray(row)[None])[0]:
            return ruled_out(self.space, row)
        return self._reason.get(key, NOT_MEASURED)

    def evaluate(self, idx: np.ndarray, mode: str = MODE) -> Evaluations:
        cycles = self.cycles(idx, mode)
        reasons = [None if np.isfinite(c) else self.reason(row) for c, row in zip(cycles, np.asarray(idx), strict=True)]
        return Evaluations(cycles=cycles, correct=np.isfinite(cycles), max_abs=np.full(len(cycles), np.nan), reasons=reasons)

    def report(self, plan: Config, mode: str = MODE) -> dict[str, Any]:
        row = self.space.encode(plan)
        time = float(self.cycles(row[None])[0])
        feasible = math.isfinite(time)
        out: dict[str, Any] = {"mode": self.modes[0], "source": self.source, "configuration": plan, "feasible": feasible,
                               value_key(self.modes[0], self.unit): time if feasible else None, "correct": feasible}
        if not feasible:
            out["reason"] = self.reason(row)
        return out
