"""The service layer: one function per tool name. Adapters (CLI, MCP) only translate arguments.

Every function takes a :class:`Context` and plain arguments and returns a JSON-ready ``dict``;
bad input raises :class:`ServiceError` (or a subclass of ``ValueError``) with a message that names
the argument, the value and what is allowed.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from functools import cached_property
from itertools import compress
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from tuner import gate, noise, package_version
from tuner.claims import studies_at_work
from tuner.history import History, resolve_url, sqlite_file
from tuner.objectives import Objective
from tuner.objectives.base import brief, reason_group, ruled_out, runs_program, value_key
from tuner.objectives.builtin import BuiltinObjective
from tuner.objectives.cache import T4_VERSION, CacheObjective, t4_result
from tuner.objectives.command import CommandObjective, ProgramObjective, repeats_of
from tuner.plan import PROFILE_DIR, Plan, PlanError, plan_hash
from tuner.plan import SPACE as PLAN_SPACE
from tuner.search import Outcome, Search, Spec, number, of_optimum, shown
from tuner.space import Config, Profile, SpaceError, load_profile, load_space, profile_names
from tuner.strategies import STRATEGIES
from tuner.task.benchmark import case_indicators, infeasibility
from tuner.task.suites import MODES
from tuner.task.trace import COMPONENTS
from tuner.workspace import (
    LIMITS,
    MANIFEST,
    OUTPUT_DIR,
    RESULT_PATH,
    SERVER_DIR,
    TELEMETRY,
    WRITE_KINDS,
    Workspace,
    WorkspaceError,
    check_name,
    json_reason,
    loads,
    quoted,
    read_text,
)

REPORT = f"{OUTPUT_DIR}/report.html"                  # the report's default path
RUN_BEST = f"{OUTPUT_DIR}/tuner_run_best.json"       # the main job's winner: the tensor plan's applied one in fixture form, another
                                                     # problem's best configuration (either usable as --plan)
RUN_LOCAL_EVALS, RUN_QUICK_EVALS = 3000, 500         # the main job's evaluation budgets for its local and its quick search
MAX_REASON_FILTER = 500                             # characters of the reason remeasure_failures picks failures by
RECHECKED = 5                                        # the main job on a noisy program: best configurations measured again


class ServiceError(ValueError):
    """Bad arguments: the message names the argument, the value and what is allowed."""


LARGE_SWEEP = 10_000_000                # configurations past which a sweep with no budget says so as it starts
SEARCH_WRITES = frozenset({"history"})
SEARCH_TOOLS = ("local_neighborhood_search", "bounded_exhaustive_search", "search_plans")
STUDY_TOOLS = (*SEARCH_TOOLS, "remeasure_failures")    # every tool that runs a study: it fails where nothing ran
WRITES: dict[str, frozenset[str]] = {
    # what each tool may write: "history" (adds evaluations, studies and sweeps), or a workspace write kind
    # (tuner.workspace.WRITE_KINDS: "plan" through the gate, a new "fixture", the "result" file); none: read-only
    **dict.fromkeys(("run_objective", "trace_summary", "validate_plan", "benchmark_plan", "candidate_diff", "repeated_evaluation",
                     "resume_search_history", "compare_history", "rank_experiments"), frozenset()),
    **dict.fromkeys(STUDY_TOOLS, SEARCH_WRITES),
    **dict.fromkeys(("apply_candidate", "apply_best_verified", "rollback"), frozenset({"plan"})),
    "export_candidate_fixture": frozenset({"fixture"}),
    "record_result": frozenset({"result"}),
    "run": frozenset({"history", "plan", "output"}),
    **dict.fromkeys(("report", "export_results"), frozenset({"output"})),
}


SearchWorkers = Callable[[str, dict[str, Any], str], dict[str, Any]]
"""Runs search tool ``TOOL`` with its keyword arguments in worker processes on one study, and returns the combined
result ranked in the mode given (:func:`tuner.workers.combine`)."""


@dataclass
class Context:
    """Where the tools work: a workspace, a history database and an objective (``builtin``, ``command``,
    ``cache:PATH`` of measured results with an optional T1 ``space`` file, or ``command:PROGRAM [ARGS]``, a
    program of the workspace that measures the configurations of the T1 ``space`` file it needs)."""

    workspace: Workspace
    history_url: str
    objective_kind: str = "builtin"
    progress: Callable[[int, int, str], None] | None = None
    should_stop: Callable[[], bool] | None = None
    space_path: str | None = None
    writes_history: bool = True
    log: Callable[[str], None] | None = None            # a line as each step of the main job ends
    timeout_s: float = 120.0                            # the command objective: seconds one benchmark run may take
    objective_repeats: int = 1                          # the command objective: runs per plan, valued by their median
    outage_s: float | None = None                       # seconds a failing history is tried again (None: History's default)
    checking: bool = False                              # a search checks its arguments and returns before it runs
    search_workers: SearchWorkers | None = None         # runs the main job's searches in worker processes (run --workers)
    worker: int | None = None                           # this process's number among the workers of --workers
    measured: dict[str, dict[str, Any]] = field(default_factory=dict)   # plan hash -> its metrics, measured once per context

    @classmethod
    def create(cls, workspace: str | Path = ".", history: str | None = None, objective: str = "builtin",
               space: str | None = None, tool: str | None = None, **kw: Any) -> Context:
        """The context of one call of ``tool`` (its declared :data:`WRITES` only; ``None``: a library user's, every write)."""
        measured = objective.startswith(("cache:", "command:"))
        if objective not in ("builtin", "command") and not (measured and objective.partition(":")[2].strip()):
            raise ServiceError(f"objective {quoted(objective)} is not allowed (allowed: builtin, command, cache:PATH, command:PROGRAM)")
        if space is not None and not measured:
            raise ServiceError("--space applies to a cache:PATH or command:PROGRAM objective only (the tensor plan's space is built in)")
        if space is None and objective.startswith("command:"):
            raise ServiceError(f"objective {quoted(objective)} needs --space: a T1 file of the knobs the program takes")
        runs_programs = objective == "command" or objective.startswith("command:")
        if not runs_programs and (kw.get("timeout_s", cls.timeout_s) != cls.timeout_s or kw.get("objective_repeats", 1) != 1):
            raise ServiceError(f"--timeout-s and --repeats apply to a command or command:PROGRAM objective only "
                               f"(objective {quoted(objective)} runs no program, and its values do not vary)")
        writes = WRITES[tool] if tool is not None else frozenset({"history", *WRITE_KINDS})
        ws = Workspace.at(workspace, writes & frozenset(WRITE_KINDS))   # history and objective: the operator's choice, not arguments
        if objective == "command" and not (ws.root / "benchmark.py").is_file():
            raise ServiceError("objective 'command' runs the workspace's benchmark.py, and the workspace holds none "
                               "(objective 'builtin' scores the same model in this process)")
        if history is not None:
            _check_history_folder(history, ws.root / "studies")
        ctx = cls(ws, resolve_url(history if history is not None else ws.root / "studies" / "history.db"), objective,
                  space_path=space, writes_history="history" in writes, **kw)
        if measured:
            _ = ctx.objective                 # read (and check) the cache, the program and the space before any work
        return ctx

    @cached_property
    def history(self) -> History:
        history = History(self.history_url, read_only=not self.writes_history, log=self.log, outage_s=self.outage_s)
        if adopted := history.adopt(self.objective):
            _log(self, f"the history holds {counted(adopted, 'measurement')} of this program under another space of the same "
                       "knobs: they are this space's too, and none is measured again")
        return history

    @cached_property
    def objective(self) -> Objective:
        if self.objective_kind.startswith("cache:"):
            return CacheObjective(self.objective_kind.removeprefix("cache:"), self.space_path)
        if self.objective_kind.startswith("command:"):
            return ProgramObjective(self.workspace.root, _program(self.workspace, self.objective_kind.removeprefix("command:")),
                                    load_space(self.space_path), timeout_s=self.timeout_s, repeats=self.objective_repeats)
        if self.objective_kind == "builtin":
            return BuiltinObjective()
        return CommandObjective(self.workspace.root, timeout_s=self.timeout_s, repeats=self.objective_repeats)

    def close(self) -> None:
        """Close the history if this context opened it."""
        if "history" in self.__dict__:
            self.history.close()

    @property
    def is_plan(self) -> bool:
        """Whether the problem is the tensor plan (a workspace with kernel_plan.json, fixtures, trace)."""
        return self.objective.space is PLAN_SPACE

    @property
    def unit(self) -> str:
        """What the objective's values count: the tensor plan's cycles, or a measured time's ms (lower is better)."""
        return self.objective.unit

    def shown(self, value: float | None) -> str:
        """A value as the summaries show it: ``178,866 cycles``, ``68.1166 ms`` (six significant digits); ``-`` for none."""
        return "-" if value is None else f"{shown(value)} {self.unit}"

    def tensor_plan_only(self, tool: str) -> None:
        if not self.is_plan:
            raise ServiceError(f"{tool} works on the tensor-plan problem only (objective builtin or command), "
                               f"not on {self.objective_kind}")


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """``1 evaluation``, ``2,000 evaluations`` (``plural`` where the noun's is not the noun and an s: ``studies``)."""
    return f"{number:,} {noun if number == 1 else plural or noun + 's'}"


def _log(ctx: Context, line: str) -> None:
    if ctx.log is not None:
        ctx.log(line)


def _studies_elsewhere(ctx: Context, history: History | None = None) -> str:
    """Where the history (``ctx``'s, or ``history``) holds no study of the objective but some of others, what they are,
    to end a sentence: those of the same program measured another number of times with the ``--repeats`` that reads
    them, else how many there are; empty otherwise."""
    counts = Counter(s["objective"] for s in (history or ctx.history).sweeps())
    if counts[ctx.objective.name] or not counts:
        return ""
    base = repeats_of(ctx.objective.name)[0]
    if same := sorted((repeats_of(name)[1], name) for name in counts if repeats_of(name)[0] == base):
        return "; it holds " + ", ".join(f"{counted(counts[name], 'study', 'studies')} of {name} (--repeats {k} reads them)"
                                         for k, name in same)
    return (f"; it holds {counted(counts.total(), 'study', 'studies')} of other objectives (another problem's, or this one's "
            "before its scorer changed: resume_search_history lists them)")


def _say_studies_elsewhere(ctx: Context) -> None:
    if elsewhere := _studies_elsewhere(ctx):
        _log(ctx, f"the history holds no study of {ctx.objective.name}{elsewhere}")


def _program(ws: Workspace, command: str) -> list[str]:
    """``command`` as arguments (split as a POSIX shell would, but no shell runs it), the first a program inside the
    workspace (a path from the working folder, as every path the operator gives; it runs in a private copy of the
    workspace): a ``.py`` file (run with this Python) or an executable file. The program becomes workspace-relative."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ServiceError(f"command {quoted(command)} cannot be split into arguments: {exc}") from None
    try:
        path = ws.path(os.path.abspath(argv[0]))
    except WorkspaceError:
        raise ServiceError(f"program {quoted(argv[0])} ({quoted(os.path.abspath(argv[0]))}, from the working folder) is not inside "
                           f"the workspace {quoted(str(ws.root))}, whose private copy it runs in") from None
    if not path.is_file():
        raise ServiceError(f"program {quoted(argv[0])} is not a file of the workspace")
    if not path.name.endswith(".py") and not os.access(path, os.X_OK):
        raise ServiceError(f"program {quoted(argv[0])} is not executable (chmod +x it, or give a .py file, which runs with this Python)")
    return [path.relative_to(ws.root).as_posix(), *argv[1:]]


def _check_history_folder(history: str, studies: Path) -> None:
    """Only the workspace's ``studies`` folder is created on its own: a history file elsewhere needs its folder
    (a typo in a folder's name is refused, not made)."""
    file = sqlite_file(history if "://" in history else f"sqlite:///{history}")     # a path as given, not resolved
    if file is not None and not file.parent.is_dir() and file.parent.resolve() != studies.resolve():
        raise ServiceError(f"history folder {quoted(str(file.parent))} does not exist (only the workspace's studies/ is created)")


def _mode(ctx: Context, mode: str) -> str:
    modes = ctx.objective.modes
    if mode not in modes:
        raise ServiceError(f"mode {quoted(mode)} is not allowed (allowed: {', '.join(modes)})")
    return mode


def _positive(name: str, value: int | float | None, allow_none: bool = True) -> None:
    """Refuse ``value`` unless it is a finite positive number no larger than ``LIMITS[name]``."""
    if value is None and allow_none:
        return
    cap = LIMITS.get(name, float("inf"))
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= cap:
        raise ServiceError(f"{name} must be a positive number up to {cap:,}, got {quoted(value)}")


def _plan(ctx: Context, ref: str | dict[str, Any] | None) -> tuple[Config, str]:
    """A configuration and its label: for the tensor plan, any plan reference of the workspace; for
    another problem, an object, a JSON file in the workspace, or (``None``) the space's default."""
    if ctx.is_plan:
        return ctx.workspace.resolve_plan(ref)
    space = ctx.objective.space
    if ref is None:
        return space.decode(space.default()), "the space's default"
    if isinstance(ref, dict):
        return space.validate(ref, "configuration"), "inline configuration"
    path = ctx.workspace.path(ref)
    try:
        data = loads(read_text(path).removeprefix("\ufeff"))      # a byte-order mark allowed, as in the space's file
    except FileNotFoundError:
        raise ServiceError(f"no configuration file {quoted(ref)} in the workspace (a JSON object of knob values)") from None
    except (OSError, ValueError) as exc:
        raise ServiceError(f"configuration file {quoted(ref)} cannot be read as JSON: {json_reason(exc)}") from None
    try:
        return space.validate(data, "configuration"), ref
    except SpaceError as exc:                           # invalid, as an inline one is (validate_plan tells it)
        raise SpaceError(f"configuration file {quoted(ref)}: {exc}") from None


def _measure(ctx: Context, plan: Plan, recorded: bool = False) -> dict[str, dict[str, Any]]:
    """:func:`tuner.gate.measure` of ``plan``, once per context: a call that looks at the same plan (the current
    plan, a fixture) several times, as the main job does, runs the objective once for it. With ``recorded``, the
    history's evaluations of the plan where it holds one in every mode (:func:`_held`): a look at the history runs no
    benchmark that the history has answered (and values the plan as it values the searches' plans: a run killed at a
    shorter time limit is measured again)."""
    if recorded and (held := _held(ctx, plan)) is not None:
        return held
    key = ctx.objective.space.hash(plan)
    if key not in ctx.measured:
        ctx.measured[key] = gate.measure(ctx.objective, plan)
    return ctx.measured[key]


def _held(ctx: Context, plan: Plan) -> dict[str, dict[str, Any]] | None:
    """What this context measured of ``plan``, else the history's evaluations of it where it holds one in every mode
    (kept for the context), else ``None``: nothing is run."""
    space = ctx.objective.space
    key = space.hash(plan)
    if key not in ctx.measured:
        rows = {m: ctx.history.scored(ctx.objective, m, space.encode(plan)[None], measure=False).get(key) for m in ctx.objective.modes}
        if all(rows.values()):
            ctx.measured[key] = {m: {"best_cycles": number(r.cycles), "correct": r.correct, "max_abs": r.max_abs}
                                 for m, r in rows.items()}
    return ctx.measured.get(key)


# --- scoring and inspection -------------------------------------------------------------------

def run_objective(ctx: Context, mode: str | None = None, plan: str | dict[str, Any] | None = None) -> dict[str, Any]:
    """The report of the current plan (or ``plan``) in ``mode`` (default: the objective's first; lower is better)."""
    resolved, label = _plan(ctx, plan)
    return {"plan_source": label, **ctx.objective.report(resolved, _mode(ctx, mode or ctx.objective.modes[0]))}


def _repeats(value: Any, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= LIMITS["repeats"]:
        raise ServiceError(f"repeats must be an integer from {least} to {LIMITS['repeats']}, got {quoted(value)}")
    return value


def benchmark_plan(ctx: Context, plan: str | dict[str, Any] | None = None, modes: list[str] | None = None,
                   repeats: int = 1) -> dict[str, Any]:
    """Reports of a plan in each of ``modes`` (default: every mode of the problem) and each mode's value (``best_cycles``
    for the tensor plan, ``time_ms`` for a time in ms: :func:`value_key`); with ``repeats`` > 1, the plan is also scored that many times
    per mode: median, spread and the median's 95% interval."""
    modes = list(modes) if modes is not None else list(ctx.objective.modes)
    if not modes or len(set(modes)) != len(modes):
        raise ServiceError(f"modes must be a non-empty list of distinct modes from {list(ctx.objective.modes)}, got {quoted(modes)}")
    repeats = _repeats(repeats)
    resolved, label = _plan(ctx, plan)
    reports = {m: ctx.objective.report(resolved, _mode(ctx, m)) for m in modes}
    key = "best_cycles" if ctx.is_plan else value_key(ctx.objective.modes[0], ctx.unit)
    out = {"plan_source": label, "plan_hash": ctx.objective.space.hash(resolved), "reports": reports,
           "correct_in_all": all(r.get("correct") for r in reports.values()),
           key: {m: r.get(key) for m, r in reports.items()}}
    if repeats > 1:
        measured = gate.measure(ctx.objective, resolved, repeats, modes)
        out["repeated"] = {m: noise.summary(measured[m]["samples"]) for m in modes}
    return out


def repeated_evaluation(ctx: Context, candidate: str | dict[str, Any], against: str | dict[str, Any] | None = None,
                        repeats: int = 5) -> dict[str, Any]:
    """Measure a candidate and a plan (default: the current one) ``repeats`` times in every mode: per mode
    both summaries (median, spread, the median's 95% interval) and whether the candidate is significantly
    faster (a bootstrap interval of the ratio of medians); ``candidate_reason``/``against_reason`` say why a plan
    had no value where the objective says."""
    repeats = _repeats(repeats, least=2)
    cand, cand_label = _plan(ctx, candidate)
    base, base_label = _plan(ctx, against)
    cm, bm = gate.measure(ctx.objective, cand, repeats), gate.measure(ctx.objective, base, repeats)
    modes = {}
    for m in ctx.objective.modes:
        a, b = cm[m]["samples"], bm[m]["samples"]
        modes[m] = {"candidate": noise.summary(a), "candidate_correct": cm[m]["correct"],
                    "against": noise.summary(b), "against_correct": bm[m]["correct"]}
        modes[m].update(_reasons(cm, bm, m))
        if None not in a and None not in b:
            modes[m]["comparison"] = noise.compare(a, b).as_dict()
    return {"candidate": cand_label, "against": base_label, "repeats": repeats, "modes": modes}


def validate_plan(ctx: Context, plan: str | dict[str, Any] | None = None) -> dict[str, Any]:
    """Whether a plan is valid (schema) and feasible in each mode, with the reasons when not, running nothing: for the
    tensor plan the model's limits, for another problem the space's restrictions (the ones it fails named)."""
    try:
        resolved, label = _plan(ctx, plan)
    except SpaceError as exc:                       # knobs that break the space's schema (PlanError: the tensor plan's)
        return {"valid": False, "error": str(exc)}
    if ctx.is_plan:
        reasons = {m: infeasibility(resolved, m) for m in MODES}
    else:
        row = ctx.objective.space.encode(resolved)
        reasons = dict.fromkeys(ctx.objective.modes, None if ctx.objective.feasible(row[None])[0] else ruled_out(ctx.objective.space, row))
    return {"valid": True, "plan_source": label, "plan_hash": ctx.objective.space.hash(resolved), "plan": resolved,
            "feasible": {m: r is None for m, r in reasons.items()}, "reasons": {m: r for m, r in reasons.items() if r}}


def trace_summary(ctx: Context, plan: str | dict[str, Any] | None = None, mode: str = "dev") -> dict[str, Any]:
    """Where a plan's cycles go: components per case and overall, the hotspot, and the indicators
    (bank conflicts, register pressure, scratchpad pressure, DMA efficiency, synergies)."""
    ctx.tensor_plan_only("trace_summary")
    resolved, label = _plan(ctx, plan)
    report = ctx.objective.report(resolved, _mode(ctx, mode))
    if not report.get("feasible", True):
        return {"plan_source": label, "feasible": False, "reason": report.get("reason")}
    cases = report["cases"]
    totals = {c: sum(case.get("components", {}).get(c, 0) for case in cases) for c in COMPONENTS}
    total = sum(case["cycles"] for case in cases) or 1
    hotspot = max(cases, key=lambda case: case["cycles"])
    summary: dict[str, Any] = {
        "plan_source": label, "mode": mode, "best_cycles": report["best_cycles"], "correct": report["correct"],
        "components": {c: {"cycles": v, "share": round(v / total, 4)} for c, v in totals.items()},
        "hotspot": {"case": hotspot["name"], "share": round(hotspot["cycles"] / total, 4)},
        "cases": [{"name": case["name"], "cycles": case["cycles"], "max_abs": case["max_abs"],
                   "dominant": max(case.get("components", {"compute": 0}).items(), key=lambda kv: kv[1])[0],
                   "components": case.get("components", {})} for case in cases],
    }
    if isinstance(ctx.objective, BuiltinObjective):
        indicators = case_indicators(resolved, mode)
        summary["indicators"] = indicators
        notes = sorted({n for ind in indicators.values() for n in ind["notes"]})
        summary["findings"] = [f"{c} is {v['share']:.0%} of {mode} cycles" for c, v in summary["components"].items()
                               if c != "compute" and v["share"] >= 0.05] + notes
    return summary


def _reasons(candidate: dict[str, dict[str, Any]], against: dict[str, dict[str, Any]], mode: str) -> dict[str, str]:
    """``candidate_reason`` and ``against_reason`` of two plans' measurements (:func:`tuner.gate.measure`) in ``mode``:
    why a plan had no value, where the objective says."""
    return {f"{who}_reason": measured[mode]["reason"] for who, measured in (("candidate", candidate), ("against", against))
            if "reason" in measured[mode]}


def candidate_diff(ctx: Context, candidate: str | dict[str, Any], against: str | dict[str, Any] | None = None) -> dict[str, Any]:
    """Knobs that differ between ``against`` (default: the current plan) and ``candidate``, and the metric deltas;
    ``candidate_reason``/``against_reason`` say why a plan had no value in a mode where the objective says."""
    cand, cand_label = _plan(ctx, candidate)
    base, base_label = _plan(ctx, against)
    cm, bm = _measure(ctx, cand), _measure(ctx, base)
    delta = {}
    for m in ctx.objective.modes:
        was, now = bm[m]["best_cycles"], cm[m]["best_cycles"]
        delta[m] = {"from": was, "to": now, "speedup": round(was / now, 4) if was and now else None, **_reasons(cm, bm, m)}
    return {"candidate": cand_label, "against": base_label, "changes": ctx.objective.space.diff(base, cand), "metrics": delta,
            "candidate_correct": {m: cm[m]["correct"] for m in ctx.objective.modes}}


# --- searches ---------------------------------------------------------------------------------

def require_some_configuration(ctx: Context) -> None:
    """:class:`ServiceError` when the space's restrictions allow no configuration at all: no search could score one."""
    if ctx.objective.space.conditions and (why := ctx.objective.space.unsatisfiable()):
        raise ServiceError(f"the space's restrictions allow no configuration: {why}")


def _search(ctx: Context, spec: Spec) -> dict[str, Any]:
    require_some_configuration(ctx)
    if ctx.checking:
        return {}
    search = Search(ctx.history, ctx.objective, spec, progress=ctx.progress, should_stop=ctx.should_stop, worker=ctx.worker,
                    log=ctx.log)
    try:                                            # a search that converged before has nothing left to do: it reports
        outcome: Outcome = search.finish(search.top(), "converged") if search.converged else STRATEGIES[spec.strategy](search)
    except KeyboardInterrupt:
        search.flush(state="cancelled")             # what was scored is kept; the same command resumes
        raise
    finally:
        search.close()                              # the study's other workers take over whatever this one held
    return _outcome(ctx, outcome, spec)


def _outcome(ctx: Context, outcome: Outcome, spec: Spec) -> dict[str, Any]:
    best, space, modes, optimum = outcome.best, ctx.objective.space, ctx.objective.modes, ctx.objective.optimum
    result = {"study": outcome.study_name, "strategy": outcome.strategy, "target": spec.target, "mode": spec.mode,
              "evaluations": outcome.evaluations, "new_evaluations": outcome.new_evaluations, "trials": outcome.trials,
              "cached": outcome.cached, "seconds": outcome.seconds, "stopped": outcome.stopped,
              "failed": outcome.failed, "failure_reasons": outcome.failure_reasons, "cached_failed": outcome.cached_failed,
              "best": best.as_dict(space, modes) if best else None}
    if optimum is not None:                                          # the objective's best is known (a replayed cache)
        result |= {"optimum": number(optimum), "of_optimum": of_optimum(optimum, best.value if best else None)}
    result["top"] = [c.as_dict(space, modes) for c in outcome.top[:5]]
    return result


def local_neighborhood_search(ctx: Context, fixture: str | None = None, plan: str | dict[str, Any] | None = None,
                              strategy: str = "checkpoint", include_final: bool = True, max_evals: int = 2000,
                              time_s: float | None = None, seed: int = 0) -> dict[str, Any]:
    """Local search (``checkpoint``: steps through single, coupled and repaired moves, then pairs and a
    bounded grid, until none improves; or ``focused``) around a fixture or plan (default: the current plan)."""
    if strategy not in ("checkpoint", "focused"):
        raise ServiceError(f"strategy {quoted(strategy)} is not allowed here (allowed: checkpoint, focused)")
    if fixture is not None and plan is not None:
        raise ServiceError("give either fixture or plan, not both")
    _positive("max_evals", max_evals, allow_none=False)
    _positive("time_s", time_s)
    if fixture is not None:
        ctx.tensor_plan_only("local_neighborhood_search --fixture")
    space = ctx.objective.space
    start, label = _plan(ctx, check_name(fixture, "fixture") if fixture is not None else plan)
    target = f"fixture:{fixture}" if fixture else f"plan:{space.hash(start)}"
    spec = Spec(strategy=strategy, mode=ctx.objective.modes[0], max_evals=int(max_evals), time_s=time_s, seed=int(seed),
                start=tuple(int(v) for v in space.encode(start)), target=target, include_final=bool(include_final))
    return {"start": label, **_search(ctx, spec)}


def bounded_exhaustive_search(ctx: Context, profile: str, max_evals: int | None = None, include_final: bool = True,
                              time_s: float | None = None) -> dict[str, Any]:
    """Every configuration of a named profile (``studies/NAME.json``, or ``all``: the whole space), scored in
    batches; resumable."""
    prof: Profile = load_profile(profile, ctx.objective.space, *_profile_folders(ctx))
    _positive("max_evals", max_evals)
    _positive("time_s", time_s)
    spec = Spec(strategy="exhaustive", mode=ctx.objective.modes[0], max_evals=int(max_evals or prof.size), time_s=time_s,
                target=f"profile:{profile}", profile=prof, include_final=bool(include_final))
    if max_evals is None and time_s is None and prof.size > LARGE_SWEEP:
        _log(ctx, f"sweeping all {prof.size:,} configurations of profile {profile!r}, with no evaluation or time budget: "
                  "an interrupt stops it and keeps the progress, and the same command resumes it")
    return {"profile": profile, "profile_description": prof.description, "profile_size": prof.size, **_search(ctx, spec)}


def search_plans(ctx: Context, strategy: str = "quick", max_evals: int = 500, time_s: float | None = None, seed: int = 0,
                 include_final: bool = True) -> dict[str, Any]:
    """Broad search: ``quick`` (seeded TPE, then a local polish), ``bayes`` (Gaussian-process Bayesian
    optimisation, seeded) or ``focused`` (deterministic sweep around the best plan the history holds)."""
    if strategy not in ("quick", "bayes", "focused"):
        raise ServiceError(f"strategy {quoted(strategy)} is not allowed (allowed: quick, bayes, focused)")
    _positive("max_evals", max_evals, allow_none=False)
    _positive("time_s", time_s)
    start = None
    space = ctx.objective.space
    require_some_configuration(ctx)                     # before focused reads (and opens) the history for its start
    if strategy == "focused" and not ctx.checking:      # its start is the best seed: measured, so not while checking
        seeds = _seeds(ctx, 1)
        start = tuple(int(v) for v in space.encode(seeds[0]["plan"] if seeds else _plan(ctx, None)[0]))
    spec = Spec(strategy=strategy, mode=ctx.objective.modes[0], max_evals=int(max_evals), time_s=time_s, seed=int(seed),
                start=start, include_final=bool(include_final))
    return _search(ctx, spec)


def remeasure_failures(ctx: Context, reason: str | None = None, max_evals: int | None = None,
                       time_s: float | None = None) -> dict[str, Any]:
    """Run the program again on the configurations whose recorded runs failed in the search's mode (a crash, no time,
    an error it reported, a run killed at the time limit), or only those whose last recorded reason holds ``reason``
    (as kept, or on one line as a search's ``failure_reasons`` show it: its first and last lines), as after mending
    what made them fail (a busy or missing GPU, a full disk): each new result takes the failure's place in the
    history, where every later search and read finds it. A round (a study of its own) measures each such failure
    once, in the order of their hashes; one stopped by ``max_evals``, ``time_s`` or a signal resumes, and a call after
    a finished round starts the next."""
    if not runs_program(ctx.objective):
        raise ServiceError(f"{ctx.objective.label} gives each configuration the same value every time: only a program's "
                           "failed runs are measured again (--objective command or command:PROGRAM runs one)")
    if reason is not None and (not isinstance(reason, str) or not 0 < len(reason) <= MAX_REASON_FILTER):
        raise ServiceError(f"reason must be the text of a failure's reason, 1 to {MAX_REASON_FILTER} characters, got {quoted(reason)}")
    _positive("max_evals", max_evals)
    _positive("time_s", time_s)
    name, mode = ctx.objective.name, ctx.objective.modes[0]
    with closing(History(ctx.history_url, read_only=True, log=ctx.log, outage_s=ctx.outage_s)) as history:   # a refusal writes nothing
        history.adopt(ctx.objective)                    # an edited space's failures under the earlier one, in memory
        failures = {h: why for h, (value, why) in history.failures(name, mode)[1].items() if value is None}
        failed = {h for h, why in failures.items()      # the reason as kept, or on one line as failure_reasons show it
                  if reason is None or (why is not None and (reason in why or reason in brief(why)))}
        if not failed:
            which = f"failed run of {name}" + (f" whose reason holds {quoted(reason)}" if reason is not None else "")
            said = _studies_elsewhere(ctx, history)
            if failures:                                # the reasons there are, for the text to give
                held = Counter(reason_group(why) if why is not None else "no reason kept" for why in failures.values())
                said = (f"; its {counted(len(failures), 'failed run')} {'says' if len(failures) == 1 else 'say'}: "
                        + ", ".join(f"{why} ({n})" for why, n in held.most_common(3)))
            raise ServiceError(f"the history holds no {which}: nothing to measure again{said}")
    if ctx.checking:
        return {}
    rounds = sum(s["objective"] == name and s["strategy"] == "remeasure" and s["mode"] == mode and s["state"] == "done"
                 for s in ctx.history.sweeps())
    spec = Spec(strategy="remeasure", mode=mode, max_evals=int(max_evals or LIMITS["max_evals"]), time_s=time_s,
                target=f"failures:{rounds + 1}", remeasure=frozenset(failed))
    return _search(ctx, spec)


SEARCHES: dict[str, Callable[..., dict[str, Any]]] = {name: globals()[name] for name in SEARCH_TOOLS}


# --- history ----------------------------------------------------------------------------------

def _first_last(ctx: Context) -> tuple[str, str]:
    """The search's mode and the authority (the held-out mode, or the same one where there is none)."""
    return ctx.objective.modes[0], ctx.objective.modes[-1]


def _plan_row(ctx: Context, source: str, plan: Config, metrics: dict[str, dict[str, Any]]) -> dict[str, Any]:
    row = {"source": source, "plan_hash": ctx.objective.space.hash(plan), "plan": plan}
    return row | {m: metrics[m]["best_cycles"] for m in ctx.objective.modes} | {"correct": all(m["correct"] for m in metrics.values())}


def _rank_key(ctx: Context, kept: str | None = None) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """Correct first, then the search's mode, then the authority, then the plan ``kept`` (the current one: a tie is no
    reason to change it), then the hash: ties break the same way every run."""
    first, last = _first_last(ctx)
    inf = float("inf")
    return lambda r: (not r["correct"], r[first] if r[first] is not None else inf, r[last] if r[last] is not None else inf,
                      r["plan_hash"] != kept, r["plan_hash"])


def _fixture_rows(ctx: Context, unreadable: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """A row per fixture (scored in every mode); those that cannot be read as a plan are left out, each with why
    in ``unreadable``."""
    if not ctx.is_plan:
        return []
    rows = []
    for name in ctx.workspace.fixture_names():
        try:
            plan = ctx.workspace.resolve_plan(name)[0]
        except (WorkspaceError, PlanError) as exc:
            if unreadable is not None:
                unreadable[name] = str(exc)
            continue
        rows.append(_plan_row(ctx, f"fixture:{name}", plan, _measure(ctx, plan, recorded=True)))
    return rows


def _history_rows(ctx: Context, limit: int) -> list[dict[str, Any]]:
    """The history's ``4 * limit`` best plans in the search's mode, with their authority value where it holds one that
    stands (a search checks its finalists there; ``None`` elsewhere, and for a run killed at a shorter time limit, as
    for every reader). It runs nothing: measuring the rest in the authority, the slow mode of a real benchmark, would
    cost dozens of runs per call (a read-only tool could not even keep them), and the gate measures the plan it tries
    anyway."""
    name, space = ctx.objective.name, ctx.objective.space
    first, last = _first_last(ctx)
    best = ctx.history.best_cached(name, first, limit * 4)
    if best:                                            # none its restrictions rule out (carried over by an older version)
        best = list(compress(best, space.allowed(np.stack([r.idx for r in best]))))
    held = (ctx.history.scored(ctx.objective, last, np.stack([r.idx for r in best]), measure=False) if best and last != first
            else {r.plan_hash: r for r in best})
    rows = []
    for r in best:
        f = held.get(r.plan_hash)                       # its authority row: None where no search checked it there
        rows.append({"source": "history", "plan_hash": r.plan_hash, "plan": space.decode(r.idx), first: number(r.cycles),
                     last: number(f.cycles) if f else None, "correct": r.correct and (f is None or f.correct)})
    return rows


def _seeds(ctx: Context, limit: int, unreadable: dict[str, str] | None = None) -> list[dict[str, Any]]:
    first = ctx.objective.modes[0]
    rows = [r for r in _fixture_rows(ctx, unreadable) + _history_rows(ctx, limit) if r["correct"] and r[first] is not None]
    unique: dict[str, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (*_rank_key(ctx)(r), r["source"])):
        unique.setdefault(r["plan_hash"], r)
    return list(unique.values())[:limit]


def _profile_folders(ctx: Context) -> tuple[Path, ...]:
    return (ctx.workspace.root / "studies", PROFILE_DIR) if ctx.is_plan else (ctx.workspace.root / "studies",)


def resume_search_history(ctx: Context, limit: int = 5) -> dict[str, Any]:
    """The best seeds (the fixtures, measured in every mode; the history's best, with the authority's value where a
    search checked them there), the searches already run, and how many the history holds of other objectives (another
    problem's, or this one's before its scorer changed: a new version of the model makes a new objective)."""
    _positive("limit", limit, allow_none=False)
    at_work = studies_at_work(ctx.history)
    every = ctx.history.sweeps()
    sweeps = [{k: s[k] for k in ("study_name", "strategy", "target", "mode", "state", "evaluations", "updated")}
              | ({"state": "lost"} if s["state"] == "running" and s["study_name"] not in at_work else {})
              for s in every if s["objective"] == ctx.objective.name]
    others = Counter(s["objective"] for s in every if s["objective"] != ctx.objective.name)
    done_profiles = {s["target"].removeprefix("profile:") for s in sweeps if s["strategy"] == "exhaustive" and s["state"] == "done"}
    unreadable: dict[str, str] = {}
    out = {"seeds": _seeds(ctx, int(limit), unreadable), "searches": sweeps,
           "profiles_not_swept": [p for p in profile_names(ctx.objective.space, *_profile_folders(ctx)) if p not in done_profiles]}
    extra = {"unreadable_fixtures": unreadable, "other_objectives": dict(sorted(others.items()))}
    return out | {k: v for k, v in extra.items() if v}


def _study_bests(ctx: Context, per_study: int = 5) -> list[dict[str, Any]]:
    """The best verified configuration of every study of this objective that has one: among each study's
    ``per_study`` best trials, the one correct in every mode with the best authority value (then the search's
    mode, then the hash), with its evaluations as its search counted them. Reads one query for the studies, one for
    their sweep records and the cache for the values, whatever their size."""
    first, last = _first_last(ctx)
    modes, space = ctx.objective.modes, ctx.objective.space
    tops = ctx.history.study_tops(ctx.objective.name, per_study)
    rows = ctx.history.cached(ctx.objective.name, first, {h for _, hashes in tops.values() for h in hashes})
    if not rows:
        return []
    idx = np.stack([r.idx for r in rows.values()])
    scored = {m: ctx.history.scored(ctx.objective, m, idx) for m in modes}
    evaluations = {s["study_name"]: s["evaluations"] for s in ctx.history.sweeps()}   # a sweep's members: each range's best
    out = []
    for study, (count, hashes) in tops.items():
        verified = [h for h in hashes if h in rows and all(scored[m][h].correct and scored[m][h].cycles is not None for m in modes)]
        if verified:
            best = min(verified, key=lambda h: (scored[last][h].cycles, scored[first][h].cycles, h))
            out.append({"study": study, "plan_hash": best, "plan": space.decode(rows[best].idx),
                        **{m: number(scored[m][best].cycles) for m in modes}, "evaluations": evaluations.get(study, count)})
    return out


def rank_experiments(ctx: Context) -> dict[str, Any]:
    """Studies ranked by their best verified value in the authority mode (among each study's five best trials);
    where the objective's optimum is known (a replayed cache), each study's fraction of it."""
    first, last = _first_last(ctx)
    _say_studies_elsewhere(ctx)
    rows = _study_bests(ctx)
    rows.sort(key=lambda r: (r[last], r[first], r["plan_hash"]))
    ranking = [{"rank": i + 1, **{k: v for k, v in r.items() if k != "plan"}} for i, r in enumerate(rows)]
    if (optimum := ctx.objective.optimum) is None:
        return {"ranking": ranking}
    return {"optimum": number(optimum), "ranking": [r | {"of_optimum": of_optimum(optimum, r[first])} for r in ranking]}


def compare_history(ctx: Context, limit: int = 10) -> dict[str, Any]:
    """The current configuration (the space's default on a problem without a plan file) beside the fixtures and the
    best of every study, by the search's mode,
    then the authority, then the hash; ``best_verified`` (with its plan) is the best one correct in every
    mode that does not regress the authority."""
    _positive("limit", limit, allow_none=False)
    _say_studies_elsewhere(ctx)
    return _compared(ctx, int(limit))


def _compared(ctx: Context, limit: int) -> dict[str, Any]:
    """:func:`compare_history`, for the steps that use it on the way (the report, the main job): it says nothing."""
    last = _first_last(ctx)[1]
    current, label = _plan(ctx, None)
    cm = _measure(ctx, current, recorded=True)
    unreadable: dict[str, str] = {}
    rows = [_plan_row(ctx, "current" if ctx.is_plan else label, current, cm), *_fixture_rows(ctx, unreadable)]
    rows += [{"source": f"study:{b['study']}", "plan_hash": b["plan_hash"], "plan": b["plan"],
              **{m: b[m] for m in ctx.objective.modes}, "correct": True} for b in _study_bests(ctx)]
    rows.sort(key=_rank_key(ctx, kept=ctx.objective.space.hash(current)))
    verified = [r for r in rows if r["correct"] and all(r[m] is not None for m in ctx.objective.modes)
                and (cm[last]["best_cycles"] is None or r[last] <= cm[last]["best_cycles"])]
    best = verified[0] if verified else None
    return {"rows": [{k: v for k, v in r.items() if k != "plan"} for r in rows[:limit]], "best_verified": best,
            "current_is_best": best is not None and best["plan_hash"] == ctx.objective.space.hash(current)} | (
            {"unreadable_fixtures": unreadable} if unreadable else {})


# --- gate, apply, fixtures, results -----------------------------------------------------------

def _dry_run(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ServiceError(f"dry_run must be true or false (a boolean), got {quoted(value)}")
    return value


def apply_candidate(ctx: Context, plan: str | dict[str, Any], dry_run: bool = True, repeats: int = 1) -> dict[str, Any]:
    """Gate a candidate (correct in both modes, better dev, final not worse; with ``repeats`` > 1 both plans are
    measured that many times and the final improvement must be significant) and, unless dry_run, write it."""
    ctx.tensor_plan_only("apply_candidate")
    candidate, label = _plan(ctx, plan)
    return {"candidate_source": label, **gate.apply(ctx.objective, ctx.workspace, candidate, _dry_run(dry_run), repeats=_repeats(repeats))}


def apply_best_verified(ctx: Context, dry_run: bool = True, limit: int = 20, repeats: int = 1) -> dict[str, Any]:
    """Apply the best plan from fixtures and history that passes the gate (dry run unless told otherwise;
    ``repeats`` as for :func:`apply_candidate`)."""
    ctx.tensor_plan_only("apply_best_verified")
    dry, repeats = _dry_run(dry_run), _repeats(repeats)
    current = ctx.workspace.current_plan()
    current_metrics = _measure(ctx, current) if repeats == 1 else gate.measure(ctx.objective, current, repeats)   # once, not per seed
    refused: tuple[dict[str, Any], str] | None = None  # the best-ranked plan other than the current one, and why the gate refused it
    for seed in _seeds(ctx, limit):
        if seed["plan_hash"] == plan_hash(current):
            continue
        report = gate.apply(ctx.objective, ctx.workspace, seed["plan"], dry, (current, current_metrics), repeats)
        if report["passed"] or report["reasons"][-1].startswith(gate.PLAN_CHANGED):    # the rest would be gated against a stale plan
            return {"candidate_source": seed["source"], **report}
        refused = refused or (seed, "; ".join(report["reasons"]))
    if _compared(ctx, 0)["current_is_best"]:            # as compare_history says: no plan ranks above it without a regression
        reasons = ["kernel_plan.json is already the best verified plan of the fixtures and the history"]
        rank = _rank_key(ctx, kept=plan_hash(current))
        if refused and rank(refused[0]) < rank(_plan_row(ctx, "current", current, current_metrics)):
            seed, why = refused
            reasons.append(f"{seed['source']} (plan {seed['plan_hash']}) ranks above it by {ctx.objective.modes[0]} but fails the "
                           f"gate: {why}")
        return {"passed": False, "applied": False, "dry_run": dry, "current_is_best": True, "reasons": reasons}
    reasons = ["no fixture or history plan passes the gate"]
    if refused:
        seed, why = refused
        reasons.append(f"the best of them ({seed['source']}, plan {seed['plan_hash']}): {why}")
    return {"passed": False, "applied": False, "dry_run": dry, "reasons": reasons}


def rollback(ctx: Context, backup: str | None = None, dry_run: bool = False) -> dict[str, Any]:
    """Restore kernel_plan.json from the latest (or a named) backup."""
    ctx.tensor_plan_only("rollback")
    return gate.rollback(ctx.workspace, backup, _dry_run(dry_run))


def export_candidate_fixture(ctx: Context, name: str, plan: str | dict[str, Any] | None = None, note: str = "",
                             overwrite: bool = False) -> dict[str, Any]:
    """Write a new ``fixtures/NAME.json``: the plan, its metrics in both modes and where it came from
    (replacing an existing fixture needs ``overwrite``, and keeps a backup). A fixture seeds the next attempt, so a
    plan that does not run correct in every mode is refused (:class:`ServiceError`), and nothing is written."""
    ctx.tensor_plan_only("export_candidate_fixture")
    check_name(name, "fixture")
    if not isinstance(overwrite, bool):
        raise ServiceError(f"overwrite must be true or false (a boolean), got {quoted(overwrite)}")
    resolved, label = _plan(ctx, plan)
    relative = f"fixtures/{name}.json"
    fixture = _fixture_object(ctx, name, resolved, label, note)
    if reasons := gate.unverified(fixture["metrics"]):
        raise ServiceError(f"{label} cannot seed an attempt: {'; '.join(reasons)}; only a plan that runs correct in every "
                           "mode is exported")
    backup = ctx.workspace.write("fixture", relative, json.dumps(fixture, indent=2) + "\n", replace=overwrite)
    return {"fixture": name, "path": relative, "backup": backup, "metrics": fixture["metrics"]}


def _fixture_object(ctx: Context, name: str, plan: Plan, source: str, note: str) -> dict[str, Any]:
    """A fixture: the plan, its metrics in every mode and where it came from."""
    return {"name": name, "plan": plan, "metrics": _measure(ctx, plan),
            "provenance": {"source": source, "plan_hash": plan_hash(plan), "objective": ctx.objective.name,
                           "exported": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "note": note}}


def _write_output(ctx: Context, relative: str, data: dict[str, Any]) -> dict[str, Any]:
    """Write an output of the main job under results/ (replacing one keeps a backup)."""
    backup = ctx.workspace.write("output", relative, json.dumps(data, indent=2) + "\n")
    return {"path": relative, "backup": backup, "metrics": data.get("metrics")}


def _telemetry_tools(ctx: Context) -> list[str]:
    path = ctx.workspace.root / TELEMETRY
    tools: list[str] = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():     # a line torn by a kill is skipped
            try:
                tool = loads(line).get("tool")
            except (ValueError, AttributeError):
                continue
            if isinstance(tool, str) and tool not in tools:
                tools.append(tool)
    return tools


def _written(ctx: Context, kind: str, path: str, text: str) -> dict[str, Any]:
    """Write ``text`` to workspace file ``path`` as a write of ``kind``: its path in the workspace and the backup kept
    of the file it replaced (``None`` for a new file)."""
    backup = ctx.workspace.write(kind, path, text)
    return {"path": str(PurePosixPath(ctx.workspace.path(path).relative_to(ctx.workspace.root))), "backup": backup}


def export_results(ctx: Context, study: str | None = None, out: str = f"{OUTPUT_DIR}/results.t4.json") -> dict[str, Any]:
    """Write the evaluations of ``study`` (default: the objective's study updated last; the start of one study's name
    will do), in the order it made them, to ``out`` under results/ as a T4 results file: the community's format of
    tuning results, which Kernel Tuner writes too and ``cache:PATH`` replays. Each result is a configuration, its
    value in each mode the history holds (in the objective's unit; every measurement as ``runtimes`` where it was
    measured repeatedly) and its invalidity: ``correct``, ``correctness`` (a value that failed the problem's check),
    ``timeout``, ``compile``, ``constraints`` or ``runtime`` (any other failure). An ``exhaustive`` sweep keeps its
    ranges' best only: those are what it exports (none: refused). The same history gives the same bytes."""
    if not isinstance(out, str) or not out.endswith(".json"):
        raise ServiceError(f"out must name a .json file under {OUTPUT_DIR}/, got {quoted(out)}")
    studies = {s["study_name"]: s for s in ctx.history.sweeps() if s["objective"] == ctx.objective.name}
    if study is None and not studies:
        raise ServiceError(f"the history holds no study of {ctx.objective.name}: nothing to export{_studies_elsewhere(ctx)}")
    if study is None:
        name = max(studies.values(), key=lambda s: (s["updated"], s["study_name"]))["study_name"]
    else:                                                # a study's name, or the start of one name only
        named = [study] if study in studies else [n for n in studies if n.startswith(study)]
        if len(named) != 1:
            which = f"{len(named)} studies, such as {', '.join(quoted(n, 200) for n in named[:3])}" if named else "no study"
            raise ServiceError(f"{quoted(study)} names {which} of {ctx.objective.name} (resume_search_history lists them)")
        name = named[0]
    first, objective = _first_last(ctx)[0], ctx.objective.name
    members = list(dict.fromkeys(h for h, _ in ctx.history.outcomes(name)))        # each plan once, in the order first seen
    rows = {mode: ctx.history.cached(objective, mode, members) for mode in ctx.objective.modes}
    killed = ctx.history.timed_out(objective, first)
    kept = {t.user_attrs["plan_hash"]: t.user_attrs for t in ctx.history.trials(name)}      # repeated measurements
    reasons = {h: why for h, (_, why) in ctx.history.failures(objective, first)[1].items() if why is not None}
    runtimes = {h: attrs["samples"] for h, attrs in kept.items() if "samples" in attrs}
    if ctx.objective_repeats > 1 and any(h not in runtimes for h in members):    # found in the history: another study's runs
        runtimes = ctx.history.samples(objective) | runtimes
    known = reasons.keys() | killed.keys()
    unknown = [h for h in members if h in rows[first] and rows[first][h].cycles is None and h not in known]
    if unknown and not runs_program(ctx.objective):      # one an older history kept no reason for, where asking
        result = ctx.objective.evaluate(np.stack([rows[first][h].idx for h in unknown]), first)    # again is a lookup, not a run
        reasons |= {h: why for h, why in zip(unknown, result.reasons, strict=False) if why is not None}
    results = []
    for h in (h for h in members if h in rows[first]):
        row = rows[first][h]
        values = {mode: number(rows[mode][h].cycles) if h in rows[mode] else None for mode in ctx.objective.modes}
        failure = "timeout" if h in killed else reasons.get(h)
        results.append(t4_result(ctx.objective.space.decode(row.idx), values, ctx.unit,
                                 all(rows[mode][h].correct for mode in ctx.objective.modes if h in rows[mode]), failure,
                                 runtimes.get(h)))
    if not results:                                    # a file of no result, which no replay reads, is not written
        kept = ": a sweep keeps each range's best only, and none of them has a value" if studies[name]["strategy"] == "exhaustive" else ""
        raise ServiceError(f"study {quoted(name, 200)} holds no evaluation to export{kept}")
    metadata = {"tuner": f"tensor-plan-optimizer {package_version()}", "study": name, "objective": objective,
                **({"timeunit": "milliseconds"} if ctx.unit == "ms" else {"unit": ctx.unit})}
    text = json.dumps({"schema_version": T4_VERSION, "metadata": metadata, "results": results}, indent=1) + "\n"
    return _written(ctx, "output", out, text) | {"study": name, "results": len(results),
                                                 "failed": sum(r["invalidity"] != "correct" for r in results)}


def record_result(ctx: Context, path: str = RESULT_PATH, tools: list[str] | None = None) -> dict[str, Any]:
    """Run the final benchmark on the current plan and write the iteration result JSON
    (``metrics.best_cycles`` = ``metrics.score`` = final best_cycles) with the tools used."""
    ctx.tensor_plan_only("record_result")
    if tools is not None and (not isinstance(tools, list) or len(tools) > LIMITS["tools"]):
        raise ServiceError(f"tools must be a list of at most {LIMITS['tools']} tool names, got {quoted(tools)}")
    for tool in tools or []:
        check_name(tool, "tool")
    if not isinstance(path, str) or not path.endswith(".json"):
        raise ServiceError(f"path must name a .json file, got {quoted(path)}")
    ctx.workspace.path(path)                           # confined, before the benchmark runs
    plan = ctx.workspace.current_plan()
    final = ctx.objective.report(plan, "final")
    dev = ctx.objective.report(plan, "dev")
    used = _telemetry_tools(ctx)
    used += [t for t in tools or [] if t not in used]
    artifacts = [p for p in (MANIFEST, f"{SERVER_DIR}/tensor_plan_server.py")
                 if (ctx.workspace.root / p).is_file()]
    result = {"metrics": {"best_cycles": final["best_cycles"], "score": final["best_cycles"],
                          "correct": bool(final["correct"] and dev["correct"]), "max_abs": final["max_abs"],
                          "dev_best_cycles": dev["best_cycles"]},
              "mode": "final", "plan_hash": plan_hash(plan), "plan": plan,
              "used_harness_tools": used, "used_harness_artifacts": artifacts}
    return _written(ctx, "result", path, json.dumps(result, indent=2) + "\n") | result


# --- the report ---------------------------------------------------------------------------------

REPORT_PLANS = {"baseline": "baseline_row_major", "iteration-2": "tensor_plan_iteration2_neighborhood_best"}   # fixtures, when present


def report(ctx: Context, out: str = REPORT) -> dict[str, Any]:
    """Write the HTML report of the history (plotly, works offline) to ``out`` under results/: the best configuration
    beside the current plan or the space's default (the speedup), convergence,
    knob importance, per-knob marginals and, where the problem has them, the dev/final scatter, the
    winner's trace against the baseline and iteration-2, the configurations without a value by reason, and a noisy
    program's spread of runs. Returns its path and
    the sections it holds."""
    return _report(ctx, out)


def _report(ctx: Context, out: str, rechecked: tuple[dict[str, Any], dict[str, Any]] | None = None) -> dict[str, Any]:
    """:func:`report`; ``rechecked``: the main job's winner and the space's default as its re-check measured them (a noisy
    program), for the summary to say what the job said."""
    from tuner.report import page

    if not isinstance(out, str) or not out.endswith(".html"):
        raise ServiceError(f"out must name an .html file under {OUTPUT_DIR}/, got {quoted(out)}")
    _say_studies_elsewhere(ctx)
    info = report_info(ctx, rechecked)
    title = f"Tuning report: {ctx.objective.label} ({ctx.objective.name})"
    return _written(ctx, "output", out, page(title, info, ctx.unit, ctx.objective.optimum)) | {
        "sections": [k for k, v in info.items() if v]}


def report_info(ctx: Context, rechecked: tuple[dict[str, Any], dict[str, Any]] | None = None) -> dict[str, Any]:
    """The data of every report section that applies to the problem (tuner.report's ``*_info``); ``rechecked`` as for
    :func:`_report`."""
    from tuner import report as figures

    first, last = _first_last(ctx)
    name, space, history = ctx.objective.name, ctx.objective.space, ctx.history
    best = (rechecked[0] if rechecked else _compared(ctx, 1)["best_verified"] if ctx.is_plan
            else min(({**b, "source": f"study:{b['study']}", "correct": True} for b in _study_bests(ctx)),
                     key=_rank_key(ctx, kept=space.hash(_plan(ctx, None)[0])), default=None))    # as compare_history ranks
    info: dict[str, Any] = {"summary": _summary(ctx, best, rechecked and rechecked[1]) if best is not None else {},
                            "convergence": figures.convergence_info(history, name),
                            "importance": figures.importance_info(history, name, first, space),
                            "marginals": figures.marginals_info(history, name, first, space),
                            "failures": figures.failures_info(history, name, first)}
    if info["failures"] and runs_program(ctx.objective):     # a program's runs: they can run again
        info["failures"]["program"] = True
    if last != first:
        info["scatter"] = figures.scatter_info(history, name, first, last)
    if ctx.objective_repeats > 1:
        info["noise"] = figures.noise_info(history, name)
    if ctx.is_plan:
        plans = {"winner": best["plan"] if best else ctx.workspace.current_plan()}
        plans |= {label: ctx.workspace.resolve_plan(f)[0] for label, f in REPORT_PLANS.items() if f in ctx.workspace.fixture_names()}
        info["trace"] = figures.trace_info({label: {m: ctx.objective.report(plan, m) for m in ctx.objective.modes}
                                            for label, plan in plans.items()})
    return info


def _summary(ctx: Context, best: dict[str, Any], baseline: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report's summary: ``best`` (the best verified configuration: the winner) beside ``baseline`` (default: the
    current plan or the space's default), and the speedup in each mode. A program is not run for it: a default the
    history does not hold is left out."""
    modes = ctx.objective.modes
    summary: dict[str, Any] = {"modes": list(modes), "best": {k: best[k] for k in ("source", "plan_hash", "plan", *modes)}}
    if ctx.objective.optimum is not None:                       # a replayed cache: its best is known
        summary["of_optimum"] = of_optimum(ctx.objective.optimum, best[modes[0]])
    if baseline is None:
        current, label = _plan(ctx, None)
        # a program's default only as held (kernel_plan.json is: compare_history measured it to choose the winner)
        if (metrics := _held(ctx, current) if runs_program(ctx.objective) else _measure(ctx, current, recorded=True)) is None:
            return summary
        baseline = _plan_row(ctx, label, current, metrics)
    speedup = {m: round(baseline[m] / best[m], 3) for m in modes if baseline[m] is not None and best[m]}
    return summary | {"baseline": baseline, "speedup": speedup}


__all__ = [
    "WRITES", "Context", "ServiceError", "apply_best_verified", "apply_candidate", "benchmark_plan", "bounded_exhaustive_search",
    "candidate_diff", "compare_history", "export_candidate_fixture", "local_neighborhood_search", "rank_experiments",
    "record_result", "repeated_evaluation", "report", "report_info", "resume_search_history", "rollback", "run_objective", "search_plans",
    "trace_summary", "validate_plan",
]


# --- the main job -----------------------------------------------------------------------------

def run_workflow(ctx: Context, time_s: float = 120.0, apply: bool = False, seed: int = 0) -> dict[str, Any]:
    """The main job, its searches within ``time_s`` seconds in all; ``seconds``: what the whole job took. On the
    tensor plan, the seed's workflow, steps 1-10: score, trace, resume, local search, both profiles and quick search,
    verify, apply (dry run unless ``apply``), export (when applied) and compare. On any other problem
    (:func:`_run_space`): the space's default scored, a local search from it and quick search, the best configuration
    of the history written to results/, and the comparison and report."""
    _positive("time_s", time_s, allow_none=False)
    if not isinstance(apply, bool):
        raise ServiceError(f"apply must be a boolean, got {quoted(apply)}")
    started = time.monotonic()
    if not ctx.is_plan:
        if apply:
            raise ServiceError(f"run --apply writes kernel_plan.json, the tensor plan's; on {ctx.objective_kind} the best "
                               f"configuration is written to {RUN_BEST} without it")
        return _run_space(ctx, started, float(time_s), seed)
    baseline = ctx.workspace.current_plan()
    base = _measure(ctx, baseline)
    steps: list[dict[str, Any]] = [{"step": "run_objective", "dev": base["dev"]["best_cycles"]}]
    trace = trace_summary(ctx, None, "dev")
    steps.append({"step": "trace_summary", "findings": trace.get("findings", [])[:5]})
    resumed = resume_search_history(ctx)
    steps.append({"step": "resume_search_history", "seeds": len(resumed["seeds"]), "searches": len(resumed["searches"])})
    for name, reason in resumed.get("unreadable_fixtures", {}).items():
        _log(ctx, f"fixture {name!r} left out, not a plan: {reason}")
    seeds = resumed["seeds"]
    # the local search starts from the best fixture (fixed inputs), so a rerun resumes the same search and,
    # having nothing new to explore, proposes the same winner; the history's seeds compete at the gate
    best_fixture = min((r for r in _fixture_rows(ctx) if r["correct"]), key=_rank_key(ctx), default=None)
    start = best_fixture["source"].removeprefix("fixture:") if best_fixture else None     # None: the current plan
    _log(ctx, f"baseline: dev {ctx.shown(base['dev']['best_cycles'])}; {len(seeds)} seed(s), {len(resumed['searches'])} earlier search(es)")
    steps += _run_searches(ctx, started + float(time_s), float(time_s), [
        ("checkpoint", lambda left: _search_step(ctx, "local_neighborhood_search", plan=start, include_final=True,
                                                 max_evals=RUN_LOCAL_EVALS, time_s=left)),
        *((f"exhaustive ({profile})", lambda left, p=profile: _search_step(ctx, "bounded_exhaustive_search", profile=p,
                                                                           include_final=True, time_s=left))
          for profile in ("iteration3_dev_core", "iteration3_layout_relaxed")),
        ("quick", lambda left: _search_step(ctx, "search_plans", strategy="quick", max_evals=RUN_QUICK_EVALS, time_s=left,
                                            seed=seed))])
    _log(ctx, "verifying the best plans through the gate")
    verified = apply_best_verified(ctx, dry_run=not apply)
    winner = ctx.workspace.current_plan() if verified.get("applied") else None
    candidate_hash = verified.get("candidate_hash")
    outcome: dict[str, Any] = {"baseline": {"plan_hash": plan_hash(baseline), **{m: base[m]["best_cycles"] for m in MODES}},
                               "gate": verified, "steps": steps}
    failing = [m for m in MODES if base[m]["best_cycles"] is None]     # a plan edited into one that cannot run
    if failing:
        outcome["baseline"]["reason"] = base[failing[0]].get("reason")
    if verified.get("passed"):
        cand = verified["candidate"]
        outcome["best"] = {"plan_hash": candidate_hash, **{m: cand[m]["best_cycles"] for m in MODES},
                           "correct": cand["dev"]["correct"] and cand["final"]["correct"]}
        outcome["speedup"] = {m: round(base[m]["best_cycles"] / cand[m]["best_cycles"], 3) for m in MODES
                              if base[m]["best_cycles"] is not None}                      # none over a baseline that cannot run
        best_plan = baseline | {knob: change["to"] for knob, change in verified["diff"].items()}    # gated against the baseline
        outcome["winner_trace"] = {k: v for k, v in trace_summary(ctx, best_plan, "final").items()
                                   if k in ("components", "hotspot", "findings")}
        outcome["would_apply" if not apply else "applied"] = verified["diff"]
        if winner is not None:
            fixture = _fixture_object(ctx, "tuner_run_best", winner, "python -m tuner run --apply", "the main job's applied winner")
            outcome["fixture"] = _write_output(ctx, RUN_BEST, fixture)
    _log(ctx, "comparing with the history and writing the report")
    outcome["history"] = _compared(ctx, 5)
    outcome["report"] = report(ctx)
    outcome["seconds"] = round(time.monotonic() - started, 2)          # all of it, the verification and report too
    return outcome


def _recheck(ctx: Context, default: Config, searched: float | None) -> tuple[dict[str, Any], dict[str, Any] | None, float | None]:
    """The history's ``RECHECKED`` best configurations and the space's default (``searched``: its value in the history)
    measured again, ``repeats`` runs each (not stored): with noisy timings the searches' best is the one their noise
    favoured most, so the winner is the one with the lowest median of these fresh runs, compared with the default's.
    The re-check, its winner as a row of :func:`compare_history` valued by that median (``None`` where none ran again),
    and the default's median (``None`` where it did not run again)."""
    space, mode = ctx.objective.space, ctx.objective.modes[0]
    rows = {r["plan_hash"]: r for r in _seeds(ctx, RECHECKED)}
    key = space.hash(default)
    _log(ctx, f"measuring the {counted(len(rows), 'best configuration')}" + ("" if key in rows else " and the space's default")
              + f" again, {ctx.objective_repeats} runs each (noise favours the searches' best)")
    rows.setdefault(key, {"source": "the space's default", "plan_hash": key, "plan": default, mode: searched})
    measured = ctx.objective.evaluate(space.encode_many([r["plan"] for r in rows.values()]), mode)
    samples = dict(zip(rows, measured.samples, strict=True))               # empty where a run failed this time
    summaries = {h: noise.summary(samples[h]) for h in rows}
    again = {h: summary["median"] for h, summary in summaries.items()}
    recheck: dict[str, Any] = {"repeats": ctx.objective_repeats, "configurations": [
        {"plan_hash": h, "source": r["source"], "searched": r[mode], "again": summaries[h]} for h, r in rows.items()]}
    ran = [h for h in rows if again[h] is not None]
    if not ran:
        return recheck, None, None
    winner = min(ran, key=lambda h: again[h])                   # ties: the better searched value, listed first
    if winner != key and again[key] is not None:
        recheck["against_default"] = noise.compare(samples[winner], samples[key]).as_dict()
    best = rows[winner] | {mode: again[winner], "source": f"{rows[winner]['source']}, measured again"}
    return recheck, best, again[key]


def _search_step(ctx: Context, tool: str, **kwargs: Any) -> dict[str, Any]:
    """One of the main job's searches: ``tool`` called with ``kwargs`` here, or in worker processes on one study
    (``ctx.search_workers``), whose combined result has the same fields the steps read."""
    if ctx.search_workers is not None:
        return ctx.search_workers(tool, kwargs, ctx.objective.modes[0])
    return SEARCHES[tool](ctx, **kwargs)


def _run_searches(ctx: Context, deadline: float, time_s: float,
                  runs: list[tuple[str, Callable[[float], dict[str, Any]]]]) -> list[dict[str, Any]]:
    """The main job's searches in turn, each given the seconds left before ``deadline`` (``time.monotonic``), as its
    steps; those the time budget (``time_s``) leaves unrun make one ``not run`` step."""
    mode, steps = ctx.objective.modes[0], []
    for done, (_, run) in enumerate(runs):
        left = deadline - time.monotonic()
        if left <= 0:
            skipped = [name for name, _ in runs[done:]]
            reason = f"the time budget ({time_s:g} s) was spent"
            steps.append({"step": "not run", "searches": skipped, "reason": reason})
            _log(ctx, f"not run, {reason}: {', '.join(skipped)}")
            break
        s = run(left)
        best = s["best"][mode] if s["best"] else None
        steps.append({"step": s["strategy"], "target": s["target"], "study": s["study"], "evaluations": s["evaluations"],
                      "resumed_from": s["evaluations"] - s["new_evaluations"], "stopped": s["stopped"], f"best_{mode}": best,
                      "workers": s.get("workers", 1), "failed": s["failed"], "failure_reasons": s["failure_reasons"]})
        scored = counted(s["evaluations"], "evaluation")
        _log(ctx, f"{s['strategy']} ({s['target']}): {scored}, best {mode} {ctx.shown(best)} ({s['stopped']})")
    return steps


def _run_space(ctx: Context, started: float, time_s: float, seed: int) -> dict[str, Any]:
    """The main job on a problem other than the tensor plan (a measured cache, your kernel's program): the space's
    default scored (``None`` where it cannot run), ``checkpoint`` from it (within half the time) and ``quick``, then the best configuration
    of the history (as ``compare_history`` finds it) beside the default, written to results/ as a configuration
    file (usable as ``--plan``), and the report."""
    require_some_configuration(ctx)
    space, mode = ctx.objective.space, ctx.objective.modes[0]
    default = _plan(ctx, None)[0]
    key = space.hash(default)
    row = ctx.history.scored(ctx.objective, mode, space.encode(default)[None])[key]    # the searches from it find it there
    value = number(row.cycles)
    outcome: dict[str, Any] = {"baseline": {"plan_hash": key, "plan": default, mode: value}}
    if value is None:
        outcome["baseline"]["reason"] = (row.reason or ctx.history.reasons(ctx.objective.name, mode, [key]).get(key)
                                         or "it failed in an earlier run (an older version kept no reason in the history)")
    _log(ctx, f"the space's default: {mode} {ctx.shown(value)}" if value is not None else
              f"the space's default cannot run: {brief(outcome['baseline']['reason'])}")
    outcome["steps"] = [{"step": "run_objective", mode: value}, *_run_searches(ctx, started + time_s, time_s, [
        ("checkpoint", lambda left: _search_step(ctx, "local_neighborhood_search", max_evals=RUN_LOCAL_EVALS,
                                                 time_s=left / 2)),                                 # half: quick too
        ("quick", lambda left: _search_step(ctx, "search_plans", strategy="quick", max_evals=RUN_QUICK_EVALS, time_s=left,
                                            seed=seed))])]
    _log(ctx, "comparing with the history and writing the report")
    history, rechecked = _compared(ctx, 5), None
    if (best := history["best_verified"]) is not None and ctx.objective_repeats > 1:
        outcome["recheck"], again, fresh = _recheck(ctx, default, value)
        if again is not None:                       # else every one failed this time: the history's best stands
            best, value = again, fresh
            rechecked = (best, {"source": "the space's default, measured again", "plan_hash": key, "plan": default, mode: value})
    if best is not None:
        outcome["best"] = {"plan_hash": best["plan_hash"], mode: best[mode], "source": best["source"]}
        if value is not None:
            outcome["speedup"] = round(value / best[mode], 3)
        if ctx.objective.optimum is not None:
            outcome["of_optimum"] = of_optimum(ctx.objective.optimum, best[mode])
        outcome["changes"] = space.diff(default, best["plan"])
        outcome["configuration"] = _write_output(ctx, RUN_BEST, best["plan"])
    outcome["history"] = history
    outcome["report"] = _report(ctx, REPORT, rechecked)
    outcome["seconds"] = round(time.monotonic() - started, 2)
    return outcome
