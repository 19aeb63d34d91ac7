"""``python -m tuner``: a subcommand per service function, ``--json`` on each.

Exit status 0 on success, 2 for bad input (with one clear message on stderr), 1 when the
objective itself fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from tuner import service
from tuner.history import HistoryError
from tuner.objectives import ObjectiveError
from tuner.plan import PlanError
from tuner.space import ProfileError, SpaceError
from tuner.workspace import RESULT_PATH, WorkspaceError

INPUT_ERRORS = (service.ServiceError, WorkspaceError, PlanError, ProfileError, SpaceError)


def _bool(text: str) -> bool:
    if text.lower() in ("true", "yes", "1"):
        return True
    if text.lower() in ("false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _positive(kind: type[int] | type[float]) -> Callable[[str], int | float]:
    """An argparse type: a positive ``kind`` (int or float)."""
    what = "a positive integer" if kind is int else "a positive number"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


_positive_int, _positive_float = _positive(int), _positive(float)


Command = tuple[Callable[..., dict[str, Any]], Callable[[argparse.ArgumentParser], None], str]


def _plan_arg(p: argparse.ArgumentParser, help_: str = "fixture name or JSON file (default: kernel_plan.json)") -> None:
    p.add_argument("--plan", default=None, help=help_)


def _search_args(p: argparse.ArgumentParser, evals: int | None) -> None:
    p.add_argument("--max-evals", type=_positive_int, default=evals, help="evaluation budget (new plans scored)")
    p.add_argument("--time-s", type=_positive_float, default=None, help="time budget in seconds")
    p.add_argument("--include-final", type=_bool, default=True, help="check dev winners in final mode (default true)")


COMMANDS: dict[str, Command] = {
    "run": (service.run_workflow, lambda p: (
        p.add_argument("--time-s", type=_positive_float, default=120.0, help="time budget in seconds (default 120)"),
        p.add_argument("--apply", action="store_true", help="write the verified winner to kernel_plan.json"),
        p.add_argument("--seed", type=int, default=0)), "run the seed's workflow end to end"),
    "run_objective": (service.run_objective, lambda p: (p.add_argument("--mode", default=None), _plan_arg(p)),
                      "benchmark report of the current plan"),
    "trace_summary": (service.trace_summary, lambda p: (_plan_arg(p), p.add_argument("--mode", default="dev")),
                      "where the cycles go, with indicators"),
    "validate_plan": (service.validate_plan, lambda p: _plan_arg(p), "schema and feasibility of a plan"),
    "benchmark_plan": (service.benchmark_plan, lambda p: (_plan_arg(p), p.add_argument("--modes", nargs="+", default=None)),
                       "reports of a plan in several modes"),
    "candidate_diff": (service.candidate_diff, lambda p: (p.add_argument("--candidate", required=True),
                                                          p.add_argument("--against", default=None)), "knob changes and metric deltas"),
    "resume_search_history": (service.resume_search_history, lambda p: p.add_argument("--limit", type=_positive_int, default=5),
                              "best seeds and searches already run"),
    "local_neighborhood_search": (service.local_neighborhood_search, lambda p: (
        p.add_argument("--fixture", default=None), _plan_arg(p, help_="plan to start from (default: current)"),
        p.add_argument("--strategy", default="checkpoint"), p.add_argument("--seed", type=int, default=0),
        _search_args(p, 2000)), "checkpoint local search"),
    "bounded_exhaustive_search": (service.bounded_exhaustive_search, lambda p: (
        p.add_argument("--profile", required=True), _search_args(p, None)), "every plan of a profile"),
    "search_plans": (service.search_plans, lambda p: (
        p.add_argument("--strategy", default="quick"), p.add_argument("--seed", type=int, default=0), _search_args(p, 500)),
        "quick (TPE) or focused search"),
    "apply_candidate": (service.apply_candidate, lambda p: (p.add_argument("--plan", required=True),
                                                            p.add_argument("--dry-run", type=_bool, default=True)),
                        "gate and (with --dry-run false) apply a plan"),
    "apply_best_verified": (service.apply_best_verified, lambda p: p.add_argument("--dry-run", type=_bool, default=True),
                            "gate and apply the best verified plan"),
    "rollback": (service.rollback, lambda p: (p.add_argument("--backup", default=None),
                                              p.add_argument("--dry-run", type=_bool, default=False)), "restore the latest backup"),
    "export_candidate_fixture": (service.export_candidate_fixture, lambda p: (
        p.add_argument("--name", required=True), _plan_arg(p), p.add_argument("--note", default=""),
        p.add_argument("--overwrite", action="store_true", help="replace an existing fixture (a backup is kept)")),
        "write a new fixtures/NAME.json"),
    "compare_history": (service.compare_history, lambda p: p.add_argument("--limit", type=_positive_int, default=10),
                        "current plan vs fixtures and studies"),
    "rank_experiments": (service.rank_experiments, lambda p: None, "studies ranked by best verified final"),
    "record_result": (service.record_result, lambda p: (p.add_argument("--path", default=RESULT_PATH),
                                                        p.add_argument("--tools", nargs="*", default=None)),
                      "write the iteration result JSON"),
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="tuner", description="Tune kernel_plan.json against benchmark.py (best_cycles: lower is better).")
    top.add_argument("--workspace", default=".", help="folder holding kernel_plan.json (default: .)")
    top.add_argument("--history", default=None, help="history file or SQLAlchemy URL (default: WORKSPACE/studies/history.db)")
    top.add_argument("--objective", default="builtin", metavar="builtin|command|cache:PATH",
                     help="builtin: the tensor-plan task (fast); command: the workspace's own benchmark.py; "
                          "cache:PATH: replay measured results (a Kernel Tuner cache .json/.json.gz or a T4 results file)")
    top.add_argument("--space", default=None, metavar="T1.json",
                     help="with a cache objective: a T1 tuning-problem file naming the same knobs (adds restrictions and defaults)")
    top.add_argument("--json", action="store_true", help="print the result as JSON")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, add, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the result as JSON")
        add(p)
    from tuner.mcp_install import add_parser as add_mcp

    add_mcp(sub)
    return top


def _render_run(result: dict[str, Any]) -> str:
    base = result["baseline"]
    lines = [f"baseline  dev {base['dev']:>10}  final {base['final']:>10}  ({base['plan_hash']})"]
    for step in result["steps"]:
        if "study" in step:
            lines.append(f"  {step['step']:<11} {step['evaluations']:>9} evals  best dev {step['best_dev']}  ({step['stopped']})")
    if "best" in result:
        best, speed = result["best"], result["speedup"]
        lines.append(f"best      dev {best['dev']:>10}  final {best['final']:>10}  ({best['plan_hash']}, correct in both modes)")
        lines.append(f"speedup   dev {speed['dev']:.2f}x  final {speed['final']:.2f}x")
        comps = result["winner_trace"]["components"]
        lines.append("winner's final trace: " + ", ".join(f"{k} {v['share']:.0%}" for k, v in comps.items() if v["share"] >= 0.01))
        key = "applied" if "applied" in result else "would_apply"
        lines.append(("applied to kernel_plan.json: " if key == "applied" else "would apply (use --apply): ")
                     + ", ".join(f"{k} {v['from']}->{v['to']}" for k, v in result[key].items()))
    else:
        lines.append("no candidate passed the gate: " + "; ".join(result["gate"].get("reasons", [])))
    lines.append(f"{result['seconds']} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "mcp":
        return args.handler(args)
    function, _, _ = COMMANDS[args.command]
    kwargs = {k: v for k, v in vars(args).items() if k not in ("workspace", "history", "objective", "space", "json", "command")}
    try:
        ctx = service.Context.create(args.workspace, args.history, args.objective, args.space, tool=args.command)
        try:
            result = function(ctx, **kwargs)
        finally:
            ctx.close()
    except INPUT_ERRORS as exc:
        print(f"tuner {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (ObjectiveError, HistoryError) as exc:
        print(f"tuner {args.command}: failed: {exc}", file=sys.stderr)
        return 1
    print(_render_run(result) if args.command == "run" and not args.json else json.dumps(result, indent=2))
    return 0
