"""``python -m tuner``: a subcommand per service function; readable output, or JSON with ``--json``.

Exit status: 0 done; 1 the tool refused (the gate failed, the plan is invalid) or the objective
failed (a search in which no configuration ran); 2 bad input, with one clear line on stderr; 130 interrupted
(Ctrl-C), 143 terminated (SIGTERM, as sent by ``timeout``, a job scheduler or ``kill``), 129 hung up (SIGHUP: the
terminal or SSH session closed), each with one line saying the progress is saved and how to resume. No user-reachable
path prints a traceback: a failure none of the checks foresaw (a bug) is one line too, and exit status 1
(``TUNER_TRACEBACK=1`` prints its traceback first).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from tuner import Parser, package_version, positive_number, service, stopping, workers
from tuner.history import OUTAGE_S, History, HistoryError, HistoryUnavailable, first_line, shown_url
from tuner.objectives import ObjectiveError
from tuner.objectives.base import brief
from tuner.plan import PlanError
from tuner.space import ProfileError, SpaceError
from tuner.stopping import Terminated
from tuner.workers import WorkersError
from tuner.workspace import LIMITS, MAX_PATH_CHARS, OUTPUT_DIR, RESULT_PATH, WorkspaceError, json_reason, loads

INPUT_ERRORS = (service.ServiceError, WorkspaceError, PlanError, ProfileError, SpaceError, HistoryUnavailable, WorkersError)
MAX_WORKERS = 256
TRACEBACK_ENV = "TUNER_TRACEBACK"   # set: a bug's traceback is printed before its one line
GLOBAL_OPTIONS = ("workspace", "history", "outage_s", "objective", "space", "timeout_s", "objective_repeats", "json", "command",
                  "workers", "worker_env")   # not tool arguments
NAMED_SIGNALS = frozenset(signal.Signals)
PLAN_HELP = ("a fixture name, a JSON file inside the workspace or a JSON object of knob values (default: kernel_plan.json; on a cache "
             "or a program, the space's default)")
CANDIDATE_HELP, AGAINST_HELP = "the candidate: " + PLAN_HELP.split(" (")[0], "the plan to compare with: " + PLAN_HELP


def _stopped(command: str, exc: KeyboardInterrupt, where: str) -> int:
    """The one line an interrupted command prints, and its exit status (128 + the signal). A worker of ``--workers``
    prints none while the command that started it lives: that one got the same Ctrl-C, or passed its signal on, and
    says it once for every worker."""
    signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
    if workers.COORDINATED_WORKER.is_set() and not workers.ORPHANED.is_set():
        return 128 + signum
    how = ("stopped: the command that started this worker (--workers) is gone" if workers.ORPHANED.is_set()
           else stopping.described(signum))
    with contextlib.suppress(OSError):              # after SIGHUP the terminal may be gone
        print(f"\ntuner {command}: {how}; {where}: run the same command again to resume", file=sys.stderr)
    return 128 + signum


def _bool(text: str) -> bool:
    if text.lower() in ("true", "yes", "1"):
        return True
    if text.lower() in ("false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to {2**31 - 1}, got {text[:40]!r}")
    return value


_evals, _seconds = positive_number(int, LIMITS["max_evals"]), positive_number(float, LIMITS["time_s"])
_rows = positive_number(int, LIMITS["limit"])
Command = tuple[Callable[..., dict[str, Any]], Callable[[argparse.ArgumentParser], None], str]


def _reference(text: str) -> str | dict[str, Any]:
    """A plan or configuration as the service takes it: a text that starts with ``{`` is one given inline, as a JSON
    object; any other is the fixture or file it names."""
    if not text.lstrip().startswith("{"):
        return text
    try:
        return loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a fixture name, a file or a JSON object, got {text[:40]!r}: "
                                         f"{json_reason(exc)}") from None


def _plan_arg(p: argparse.ArgumentParser, help_: str = PLAN_HELP, flag: str = "--plan", required: bool = False) -> None:
    p.add_argument(flag, type=_reference, required=required, default=None, metavar="REF", help=help_)


def _mode_arg(p: argparse.ArgumentParser, default: str | None) -> None:
    p.add_argument("--mode", default=default, metavar="MODE",
                   help=f"dev (the fast objective) or final (the held-out authority); a cache objective: time (default {default or 'dev'})")


def _seed_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=_seed, default=0, help="random seed; the same seed repeats the same search (default 0)")


def _dry_run_arg(p: argparse.ArgumentParser, default: bool) -> None:
    p.add_argument("--dry-run", type=_bool, default=default, metavar="true|false",
                   help=f"true: only report what would happen; false: write it (default {str(default).lower()})")


def _budget_args(p: argparse.ArgumentParser, evals: int | None, what: str = "new plans the search may score",
                 everything: str = "the whole profile") -> None:
    p.add_argument("--max-evals", type=_evals, default=evals, metavar="N",
                   help=f"{what}, at most {LIMITS['max_evals']:,} (default {evals or everything})")
    p.add_argument("--time-s", type=_seconds, default=None, metavar="SECONDS",
                   help=f"time budget in seconds, at most {LIMITS['time_s']:,} (default: none)")


def _search_args(p: argparse.ArgumentParser, evals: int | None) -> None:
    _budget_args(p, evals)
    p.add_argument("--include-final", type=_bool, default=True, metavar="true|false",
                   help="check the dev winners in final mode too, except by benchmark runs past the time budget "
                        "(default true)")
    _workers_args(p)


def _workers_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=positive_number(int, MAX_WORKERS), default=1, metavar="N",
                   help=f"worker processes on this machine, at most {MAX_WORKERS}; they share the study through the history, as the "
                        "same command started on other hosts against the same --history does (default 1)")
    p.add_argument("--worker-env", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable for each worker, '{slot}' in VALUE becoming its number from 0, e.g. "
                        "CUDA_VISIBLE_DEVICES={slot}; this process's own runs (with one worker, all of them) have slot 0's (repeatable)")


def _repeats_arg(p: argparse.ArgumentParser, default: int, least: int = 1) -> None:
    p.add_argument("--repeats", type=positive_number(int, LIMITS["repeats"]), default=default, metavar="K",
                   help=f"measurements per plan and mode, {least} to {LIMITS['repeats']}; above 1, values are medians and the gate "
                        f"needs a final improvement significant at 95%% (for noisy benchmarks; default {default})")


def _limit_arg(p: argparse.ArgumentParser, default: int, what: str) -> None:
    p.add_argument("--limit", type=_rows, default=default, metavar="N", help=f"{what}, at most {LIMITS['limit']} (default {default})")


COMMANDS: dict[str, Command] = {
    "run": (service.run_workflow, lambda p: (
        p.add_argument("--time-s", type=_seconds, default=120.0, metavar="SECONDS",
                       help="seconds the searches may take (default 120); verifying the winners and writing the report "
                            "follow (with --objective command, or a program's --repeats, benchmark runs of their own)"),
        p.add_argument("--apply", action="store_true", help="write the verified winner to kernel_plan.json (a backup is kept; "
                                                            "the tensor plan only)"),
        _seed_arg(p), _workers_args(p)), "run the seed's workflow end to end: score, trace, search, verify, apply, report; on a cache or "
                       "your kernel's program: score the space's default, search from it and across the space, write the "
                       "best configuration and the report"),
    "run_objective": (service.run_objective, lambda p: (_mode_arg(p, None), _plan_arg(p)),
                      "benchmark report of a plan in one mode (best_cycles: lower is better)"),
    "trace_summary": (service.trace_summary, lambda p: (_plan_arg(p), _mode_arg(p, "dev")), "where a plan's cycles go, with indicators"),
    "validate_plan": (service.validate_plan, _plan_arg, "schema and feasibility of a plan (exit 1 when invalid)"),
    "benchmark_plan": (service.benchmark_plan, lambda p: (_plan_arg(p), p.add_argument(
        "--modes", nargs="+", default=None, metavar="MODE", help="modes to score (default: dev final)"), _repeats_arg(p, 1)),
        "reports of a plan in several modes"),
    "repeated_evaluation": (service.repeated_evaluation, lambda p: (
        _plan_arg(p, CANDIDATE_HELP, "--candidate", required=True), _plan_arg(p, AGAINST_HELP, "--against"),
        _repeats_arg(p, 5, least=2)), "measure two plans K times: medians, spreads, intervals, and whether the candidate is faster"),
    "candidate_diff": (service.candidate_diff, lambda p: (
        _plan_arg(p, CANDIDATE_HELP, "--candidate", required=True), _plan_arg(p, AGAINST_HELP, "--against")),
        "knob changes and metric deltas between two plans"),
    "resume_search_history": (service.resume_search_history, lambda p: _limit_arg(p, 5, "seeds to list"),
                              "best seeds (fixtures and history) and the searches already run"),
    "local_neighborhood_search": (service.local_neighborhood_search, lambda p: (
        p.add_argument("--fixture", default=None, metavar="NAME", help="fixture to start from (default: --plan)"),
        _plan_arg(p, help_="plan to start from: " + PLAN_HELP),
        p.add_argument("--strategy", default="checkpoint", metavar="checkpoint|focused",
                       help="checkpoint: first-improvement steps, then wider neighbourhoods; focused: a sweep around the start "
                            "(default checkpoint)"),
        _seed_arg(p), _search_args(p, 2000)), "local search around a plan or fixture"),
    "bounded_exhaustive_search": (service.bounded_exhaustive_search, lambda p: (
        p.add_argument("--profile", required=True, metavar="NAME",
                       help="a profile: the workspace's studies/NAME.json, the tensor plan's iteration3_dev_core or "
                            "iteration3_layout_relaxed, or 'all': the whole space"),
        _search_args(p, None)), "score every plan of a profile (resumable)"),
    "search_plans": (service.search_plans, lambda p: (
        p.add_argument("--strategy", default="quick", metavar="quick|bayes|focused",
                       help="quick: seeded TPE and local polish of the best basins; bayes: Gaussian-process Bayesian "
                            "optimisation (small measured spaces); focused: a sweep around the best plan of the history "
                            "(default quick)"),
        _seed_arg(p), _search_args(p, 500)), "broad search over the whole space"),
    "remeasure_failures": (service.remeasure_failures, lambda p: (
        p.add_argument("--reason", default=None, metavar="TEXT",
                       help="only the failures whose last recorded reason holds TEXT, as a search's failure_reasons and "
                            "the report show them, e.g. 'CUDA error' (default: every failure)"),
        _budget_args(p, None, "failed configurations to run again", "all of them"), _workers_args(p)),
        "run your kernel's program again on the configurations whose runs failed (after a busy or missing GPU, a full "
        "disk...): the new results replace the failures in the history"),
    "apply_candidate": (service.apply_candidate, lambda p: (
        _plan_arg(p, CANDIDATE_HELP, required=True),
        _dry_run_arg(p, True), _repeats_arg(p, 1)),
        "gate a plan and (with --dry-run false) write it to kernel_plan.json (exit 1 when the gate fails)"),
    "apply_best_verified": (service.apply_best_verified, lambda p: (_dry_run_arg(p, True), _repeats_arg(p, 1)),
                            "gate and apply the best verified plan of fixtures and history (exit 1 when none passes)"),
    "rollback": (service.rollback, lambda p: (
        p.add_argument("--backup", default=None, metavar="PATH", help="a backup in .harnessgym/backups (default: the latest)"),
        _dry_run_arg(p, False)), "restore kernel_plan.json from a backup"),
    "export_candidate_fixture": (service.export_candidate_fixture, lambda p: (
        p.add_argument("--name", required=True, metavar="NAME", help="fixture name: letters, digits, '_', '-', '.'"),
        _plan_arg(p), p.add_argument("--note", default="", metavar="TEXT", help="provenance note"),
        p.add_argument("--overwrite", action="store_true", help="replace an existing fixture (a backup is kept)")),
        "write a new fixtures/NAME.json (a plan that runs correct in both modes)"),
    "compare_history": (service.compare_history, lambda p: _limit_arg(p, 10, "rows"),
                        "the current plan beside fixtures and the best of every study"),
    "rank_experiments": (service.rank_experiments, lambda p: None,
                         "studies ranked by their best verified value (the tensor plan: final cycles; a cache or a program: its time)"),
    "record_result": (service.record_result, lambda p: (
        p.add_argument("--path", default=RESULT_PATH, metavar="PATH",
                       help=f"result JSON inside the workspace: a new file or an earlier result (default {RESULT_PATH})"),
        p.add_argument("--tools", nargs="*", default=None, metavar="NAME", help="extra tool names to record as used")),
        "write the iteration result JSON"),
    "report": (service.report, lambda p: p.add_argument(
        "--out", default=service.REPORT, metavar="PATH", help=f"an HTML file under {OUTPUT_DIR}/ (default %(default)s)"),
        "write the HTML report of the history (plotly, works offline)"),
    "export_results": (service.export_results, lambda p: (
        p.add_argument("--study", default=None, metavar="NAME",
                       help="a study of the objective, or the start of its name (resume_search_history lists them; "
                            "default: the one updated last)"),
        p.add_argument("--out", default=f"{OUTPUT_DIR}/results.t4.json", metavar="PATH",
                       help=f"a JSON file under {OUTPUT_DIR}/ (default %(default)s)")),
        "write a study's evaluations as a T4 results file (the community's tuning-results format, which cache:PATH replays)"),
}


def _problem_options(p: argparse.ArgumentParser | argparse._ArgumentGroup, defaults: bool, repeats: bool = True) -> None:
    """The options that say which problem and history a command works on. The top parser holds their defaults;
    each command accepts them too (``defaults`` false: a value given there replaces the top one), ``--repeats``
    only where the command has no ``--repeats`` of its own (the gate's)."""
    def default(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    p.add_argument("--workspace", default=default("."), metavar="DIR",
                   help="folder holding kernel_plan.json, or your kernel's program (default: .)")
    p.add_argument("--history", default=default(None), metavar="PATH|URL",
                   help="history file (a path from the current folder) or SQLAlchemy URL (default: WORKSPACE/studies/history.db, "
                        "created when missing; another file's folder must exist)")
    p.add_argument("--outage-s", type=_seconds, default=default(OUTAGE_S), metavar="SECONDS",
                   help="how long a history that fails (a server that restarts or fails over) is waited for before the command "
                        f"ends, its progress saved; a worker silent for twice this (at least {2 * OUTAGE_S:g} s) is taken for dead, "
                        f"so give every worker of a study the same (default {OUTAGE_S:g})")
    p.add_argument("--objective", default=default("builtin"), metavar="builtin|command|cache:PATH|command:PROGRAM",
                   help="builtin: the tensor-plan task (fast); command: the workspace's own benchmark.py; "
                        "cache:PATH: replay measured results (a Kernel Tuner cache .json/.json.gz or a T4 results file; a path from the "
                        "current folder, as --space and --history are); "
                        "command:PROGRAM [ARGS]: a program of the workspace measures each configuration of --space (it reads "
                        "the configuration as JSON on stdin and prints its time in ms, or {\"error\": ...}, as its last line)")
    p.add_argument("--space", default=default(None), metavar="T1.json",
                   help="with cache:PATH (optional): a T1 tuning-problem file naming the same knobs (adds restrictions, defaults "
                        "and Coupled groups); with command:PROGRAM (required): the space the program measures, a T1 file "
                        "or a Kernel Tuner cache (its tune_params)")
    p.add_argument("--timeout-s", type=_seconds, default=default(120.0), metavar="SECONDS",
                   help="with a command objective: seconds one benchmark run may take; a run past it is killed with "
                        "everything it started and counts as a failed evaluation, which a later search with a longer "
                        "timeout measures again (default 120)")
    if repeats:
        p.add_argument("--repeats", dest="objective_repeats", type=positive_number(int, LIMITS["repeats"]), default=default(1), metavar="K",
                       help="with a command objective: runs per configuration in searches, valued by their median; every sample "
                            "is kept in the trial (noisy timings; default 1)")


class _Parser(Parser):
    """The parser of ``tuner`` and of each command. An argument no parser recognizes is refused by the command it
    follows (argparse's own refusal names only ``tuner``)."""

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:
        args = sys.argv[1:] if args is None else list(args)
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            commands = next(a for a in self._actions if isinstance(a, argparse._SubParsersAction)).choices
            command = getattr(parsed, "command", None)
            after = command in args and extras[0] in args[args.index(command) + 1:]      # not before the command
            (commands[command] if after else self).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="tuner", description=(
        "Tune a kernel: the tensor plan (kernel_plan.json against benchmark.py, best_cycles), a measured cache (cache:PATH) "
        "or your own kernel's program over a T1 space (command:PROGRAM); lower is better. "
        "Exit status: 0 done, 1 refused or failed (no configuration of a search ran), 2 bad input, 130 interrupted, "
        "143 terminated (SIGTERM), 129 hung up (SIGHUP)."))
    _problem_options(top, defaults=True)
    top.add_argument("--json", action="store_true", help="print the result as JSON (default: readable text)")
    top.add_argument("--version", action="version", version=f"tuner (tensor-plan-optimizer) {package_version()}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, add, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the result as JSON")
        add(p)
        _problem_options(p.add_argument_group("the problem and history (also accepted before the command)"), defaults=False,
                         repeats=p.get_default("repeats") is None)
    from tuner.mcp_install import add_parser as add_mcp

    add_mcp(sub)
    return top


def _scalar(value: Any) -> str:
    """One value on its line: a number with thousands separators, a text without the line breaks around it."""
    if isinstance(value, float):
        return f"{value:,.6g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "-" if value is None else str(value).lower() if isinstance(value, bool) else str(value).strip("\r\n")


def _word(item: Any) -> bool:
    """Whether a list's item goes on one line with the others: a number, a boolean, ``None`` or a text with no space or
    comma in it (a sentence, or a list of them, goes on a line of its own)."""
    return not isinstance(item, dict | list) and not (isinstance(item, str) and any(mark in item.strip() for mark in " ,"))


def readable(value: Any, indent: int = 0) -> list[str]:
    """``value`` (a tool's result) as indented ``key: value`` lines; a list of numbers or words on one line, of
    objects or sentences (a text with a space or a comma) as items; a text of several lines as its lines, indented
    under ``key: |``."""
    pad = " " * indent
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if isinstance(item, dict | list) and item:
                lines += [f"{pad}{key}:", *readable(item, indent + 2)]
            elif isinstance(item, str) and "\n" in item.strip():      # a program's stderr: its lines, under the key
                lines += [f"{pad}{key}: |", *(f"{pad}  {line}" for line in item.strip().splitlines())]
            else:
                lines.append(f"{pad}{key}: {_scalar(item) if not isinstance(item, dict | list) else '-'}")
        return lines
    if isinstance(value, list):
        if all(_word(item) for item in value):
            return [f"{pad}{', '.join(_scalar(item) for item in value)}"]
        lines = []
        for item in value:
            inner = readable(item, indent + 2)
            lines += [f"{pad}- {inner[0].lstrip()}", *inner[1:]] if inner else [f"{pad}-"]
        return lines
    return [f"{pad}{_scalar(value)}"]


def _render_run(result: dict[str, Any], ctx: service.Context) -> str:
    """The main job's summary: the baseline, each search, the winner and what changes, where the history and report are."""
    mode = ctx.objective.modes[0]

    def value(v: float | None) -> str:
        return ctx.shown(v) if v is not None else "cannot run"

    base = result["baseline"]
    if ctx.is_plan:
        lines = [f"baseline: dev {value(base['dev'])}, final {value(base['final'])} (plan {base['plan_hash']})"
                 + (f": {brief(base['reason'])}" if base.get("reason") else "")]
    else:
        lines = [f"the space's default: {mode} {value(base[mode])} (configuration {base['plan_hash']})" if base[mode] is not None
                 else f"the space's default cannot run: {brief(base['reason'])} (configuration {base['plan_hash']})"]
    for step in result["steps"]:
        if step["step"] == "not run":
            lines.append(f"  not run, {step['reason']}: {', '.join(step['searches'])} (a larger --time-s runs them; "
                         "what ran resumes)")
        if "study" not in step:
            continue
        target = step.get("target", "")
        what = f"{step['step']} ({target})" if target and target != "space" else step["step"]
        resumed = f", resumed after {step['resumed_from']:,}" if step.get("resumed_from") else ""
        found = step[f"best_{mode}"]
        best = f"best {mode} {value(found)}" if found is not None else "nothing correct" if ctx.is_plan else "nothing ran"
        by = f" by {step['workers']} workers" if step["workers"] > 1 else ""
        which = "of the new ones" if step.get("resumed_from") else "of them"
        failed = (f", {step['failed']:,} {which} failed ({'; '.join(f'{why}: {n:,}' for why, n in step['failure_reasons'].items())})"
                  if step["failed"] else "")
        lines.append(f"  {what}: {service.counted(step['evaluations'], 'evaluation')}{by}{resumed}{failed}, {best}, "
                     f"stopped: {step['stopped']}")
    lines += _render_tensor_winner(result, ctx) if ctx.is_plan else _render_best(result, mode, value)
    lines.append(f"history: {shown_url(ctx.history_url)}")
    if result.get("report"):
        lines.append(f"report: {ctx.workspace.root / result['report']['path']}")
    lines.append(f"took {result['seconds']:.1f} seconds")
    return "\n".join(lines)


def _render_tensor_winner(result: dict[str, Any], ctx: service.Context) -> list[str]:
    if "best" not in result:
        return ["no candidate passed the gate: " + "; ".join(result["gate"].get("reasons", []))]
    best, speed = result["best"], result["speedup"]
    lines = [f"best: dev {best['dev']:,} cycles, final {best['final']:,} cycles (plan {best['plan_hash']}, correct in both modes)",
             "speedup: " + (", ".join(f"{mode} {ratio:.2f}x" for mode, ratio in speed.items()) or "- (the baseline cannot run)")]
    comps = result["winner_trace"]["components"]
    lines.append("winner's final trace: " + ", ".join(f"{k} {v['share']:.0%}" for k, v in comps.items() if v["share"] >= 0.01))
    applied = "applied" in result
    lines.append("applied to kernel_plan.json:" if applied else "would apply (use --apply):")
    lines += _changes(result["applied" if applied else "would_apply"])
    if applied:
        lines.append(f"undo with: python -m tuner --workspace {ctx.workspace.root} rollback")
    return lines


def _changes(diff: dict[str, dict[str, Any]]) -> list[str]:
    return [f"  {knob}: {change['from']} -> {change['to']}" for knob, change in diff.items()]


def _render_best(result: dict[str, Any], mode: str, value: Callable[[float | None], str]) -> list[str]:
    if "best" not in result:
        return ["no configuration ran: every one scored failed (failure_reasons in a search's result say why; a failure the "
                "history holds is not measured again, cached_failed counts them: a new --history measures afresh)"]
    best = result["best"]
    lines = [f"best: {mode} {value(best[mode])} (configuration {best['plan_hash']}, from {best['source']})"]
    if "recheck" in result:
        again = result["recheck"]["configurations"]
        lines.append(f"measured again, {result['recheck']['repeats']} runs each (median; the searches' value in brackets):")
        lines += [f"  {c['plan_hash']}: {value(c['again']['median'])} ({value(c['searched'])})" for c in again]
    if "speedup" in result:
        lines.append(f"speedup over the default: {result['speedup']:.2f}x")
    if comparison := result.get("recheck", {}).get("against_default"):
        significant = "significant" if comparison["better"] else "not significant"
        lines.append(f"  {comparison['confidence']:.0%} interval {1 / comparison['high']:.2f}x-{1 / comparison['low']:.2f}x: "
                     f"{significant}")
    if "of_optimum" in result:
        lines.append(f"of the cache's optimum: {result['of_optimum']:.3f} (1.0: the best time it holds)")
    lines.append("changes from the default:" if result["changes"] else "the default is the best configuration found")
    lines += _changes(result["changes"])
    lines.append(f"written to {result['configuration']['path']} (usable as --plan)")
    return lines


def _arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The command's own arguments (the service function's keywords)."""
    return {k: v for k, v in vars(args).items() if k not in GLOBAL_OPTIONS}


def _run_workers(args: argparse.Namespace, argv: list[str]) -> int:
    """The search of ``argv`` in ``args.workers`` local processes on one study; the input, and that the history opens,
    are checked once, here, by the command itself in a context that only checks (so a bad argument is one line, not one
    per worker). Where no worker gave a result (each failed or was stopped, and said why), none is printed."""
    try:
        ctx = service.Context.create(args.workspace, args.history, args.objective, args.space, tool=args.command, checking=True,
                                     outage_s=args.outage_s)
        try:
            mode = ctx.objective.modes[0]
            COMMANDS[args.command][0](ctx, **_arguments(args))
            History(ctx.history_url, read_only=True, outage_s=args.outage_s).close()     # opens, writing nothing
        finally:
            ctx.close()
        result, code = workers.run(argv, args.workers, args.worker_env, mode)
    except INPUT_ERRORS as exc:
        return _bad_input(args.command, exc)
    except KeyboardInterrupt as exc:
        return _stopped(args.command, exc, "every worker saved its progress")
    _say_signalled_workers(args.command, result)
    if any(worker["new_evaluations"] is not None for worker in result["per_worker"]):
        print(json.dumps(result, indent=2) if args.json else "\n".join(readable(result)), flush=True)
        _say_nothing_new(args.command, result)
    return code


def _say_nothing_new(command: str, result: dict[str, Any]) -> None:
    """Say on stderr why a search run again on a study none of whose evaluations has a value gave nothing: its ``failed``
    and ``failure_reasons`` are this run's, and it made no evaluation."""
    if command in service.SEARCH_TOOLS and result.get("evaluations") and not (
            result["best"] or result["new_evaluations"] or result["cached"]):
        print(f"tuner {command}: nothing new was scored, and none of the study's {result['evaluations']:,} evaluations "
              "(its earlier runs') has a value: `report` lists their reasons", file=sys.stderr)


def _bad_input(command: str, exc: Exception) -> int:
    """Say what was wrong with the input on one line of stderr (a message that quotes a value holding line breaks
    has them as spaces); the exit status of bad input, 2."""
    print(f"tuner {command}: error: {' '.join(str(exc).splitlines())[:MAX_PATH_CHARS * 2]}", file=sys.stderr)
    return 2


def _say_signalled_workers(command: str, result: dict[str, Any]) -> None:
    """A line for each worker that a signal to it alone stopped or killed (it says nothing itself: :func:`_stopped`)."""
    for worker in result["per_worker"]:
        if (stop := worker["exit"] - 128) in NAMED_SIGNALS:
            print(f"tuner {command}: worker {worker['slot']} {stopping.described(stop)}; it saved its progress", file=sys.stderr)
        elif -worker["exit"] in NAMED_SIGNALS:
            print(f"tuner {command}: worker {worker['slot']} was killed by {signal.Signals(-worker['exit']).name}; "
                  "the others took over its claims", file=sys.stderr)


def _problem_argv(args: argparse.Namespace) -> list[str]:
    """The options of ``args`` that say which problem and history a command works on (:func:`_problem_options`, where
    each is defined once), as a command line for another command on the same problem."""
    options = argparse.ArgumentParser(add_help=False)
    _problem_options(options, defaults=True)
    return [word for action in options._actions if (value := getattr(args, action.dest)) is not None
            for word in (action.option_strings[0], str(value))]


def _search_in_workers(args: argparse.Namespace, tool: str, kwargs: dict[str, Any], mode: str) -> dict[str, Any]:
    """One search of ``run --workers N``: ``tool`` with ``kwargs`` as the same command with ``--workers N`` runs it, on the
    problem and history of ``args``. A worker that failed (its own line says why) fails the main job."""
    argv = [*_problem_argv(args), tool]
    for name, value in kwargs.items():
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    result, _ = workers.run(argv, args.workers, args.worker_env, mode)
    _say_signalled_workers(f"run ({tool})", result)
    for worker in result["per_worker"]:
        if worker["new_evaluations"] is None and worker["exit"] > 0 and worker["exit"] - 128 not in NAMED_SIGNALS:
            raise workers.WorkerFailed(f"worker {worker['slot']} of {tool} ended with exit status {worker['exit']}, "
                                       "for the reason it gave above")
    return result


def _refused(command: str, result: dict[str, Any]) -> bool:
    """Whether the tool refused (an invalid plan, a gate that did not pass: not a plan that already is the best) or the
    objective failed: a search, or the main job on a cache or a program, in which no configuration ran (exit status 1)."""
    nothing_ran = ((command in service.STUDY_TOOLS and result.get("best") is None)
                   or (command == "run" and not {"best", "gate"} & result.keys()))
    refused = ((command == "validate_plan" and not result.get("valid"))
               or (command.startswith("apply_") and not result.get("passed") and not result.get("current_is_best")))
    return refused or nothing_ran


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status. Ctrl-C, SIGTERM and SIGHUP stop it, once it is out of the database
    (:mod:`tuner.stopping`; in the main thread)."""
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    try:
        if threading.current_thread() is not threading.main_thread():
            return _command(args, argv)
        with stopping.on():
            return _command(args, argv)
    except Exception as exc:                        # none of the failures foreseen above: a bug of the tuner's
        if os.environ.get(TRACEBACK_ENV):
            traceback.print_exc()
        print(f"tuner {args.command}: internal error, a bug of the tuner's ({TRACEBACK_ENV}=1 shows where): "
              f"{exc.__class__.__name__}: {first_line(exc)[:300]}", file=sys.stderr)
        return 1


def _command(args: argparse.Namespace, argv: list[str]) -> int:
    if args.command == "mcp":
        return args.handler(args)
    in_workers = getattr(args, "workers", 1) > 1
    if in_workers:
        try:
            workers.check_readable_again(args.objective, args.space)
        except WorkersError as exc:
            return _bad_input(args.command, exc)
    if in_workers and args.command != "run":
        return _run_workers(args, argv)
    function, _, _ = COMMANDS[args.command]
    kwargs = _arguments(args)
    ctx = None
    try:
        slot = workers.stop_with_coordinator()
        if getattr(args, "worker_env", None) and slot is None:    # this process measures as slot 0 (checked here first)
            os.environ.update(workers.slot_environments(1, args.worker_env)[0])
        ctx = service.Context.create(args.workspace, args.history, args.objective, args.space, tool=args.command,
                                     log=lambda line: print(line, file=sys.stderr, flush=True), timeout_s=args.timeout_s,
                                     objective_repeats=args.objective_repeats, outage_s=args.outage_s, worker=slot,
                                     search_workers=functools.partial(_search_in_workers, args) if in_workers else None)
        result = function(ctx, **kwargs)
        if args.json:
            print(json.dumps(result, indent=2), flush=True)
        else:
            print(_render_run(result, ctx) if args.command == "run" else "\n".join(readable(result)), flush=True)
        if slot is None:                                # a worker's command says it once, for them all (_run_workers)
            _say_nothing_new(args.command, result)
    except INPUT_ERRORS as exc:
        return _bad_input(args.command, exc)
    except (ObjectiveError, HistoryError, SQLAlchemyError, OSError, workers.WorkerFailed) as exc:
        if isinstance(exc, BrokenPipeError):           # the reader (head, less) stopped reading: nothing is lost
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        print(f"tuner {args.command}: failed: {exc.__class__.__name__}: {first_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        return _stopped(args.command, exc, f"the progress is saved in {shown_url(ctx.history_url) if ctx is not None else 'the history'}")
    finally:
        if ctx is not None:
            ctx.close()
    return 1 if _refused(args.command, result) else 0
