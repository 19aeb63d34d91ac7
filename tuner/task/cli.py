"""Command-line faces of the task: ``benchmark.py`` and ``verifier.py`` (design section 1).

Exit status 0 for a scored plan (feasible or not), 2 for bad input with one message on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuner.plan import PlanError, load_plan
from tuner.task.benchmark import benchmark_report, verifier_report
from tuner.task.suites import MODES
from tuner.task.trace import COMPONENTS


def _parser(prog: str, what: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=what)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--mode", choices=MODES, default="dev", help="dev: fast objective; final: held-out authority")
    parser.add_argument("--plan", type=Path, default=Path("kernel_plan.json"), help="plan file (default: ./kernel_plan.json)")
    return parser


def _table(report: dict[str, Any]) -> str:
    lines = [f"mode {report['mode']}  plan {report['plan_hash']}"]
    if not report["feasible"]:
        return "\n".join([*lines, f"infeasible: {report['reason']}"])
    verdict = "correct" if report["correct"] else "INCORRECT"
    lines.append(f"best_cycles {report['best_cycles']}  {verdict} (max_abs {report['max_abs']:.3e}, tolerance {report['tolerance']:.1e})")
    widths = [max(len(p) + 2, 10) for p in COMPONENTS]
    lines.append(f"{'case':<30}{'cycles':>10}{'max_abs':>11}" + "".join(f"{p:>{w}}" for p, w in zip(COMPONENTS, widths, strict=True)))
    for case in report["cases"]:
        row = f"{case['name']:<30}{case['cycles']:>10}{case['max_abs']:>11.2e}"
        lines.append(row + "".join(f"{case['components'][p]:>{w}}" for p, w in zip(COMPONENTS, widths, strict=True)))
    return "\n".join(lines)


def _verifier_table(report: dict[str, Any]) -> str:
    lines = [f"mode {report['mode']}  plan {report['plan_hash']}  {'correct' if report['correct'] else 'INCORRECT'} "
             f"(max_abs {report['max_abs']:.3e}, tolerance {report['tolerance']:.1e})"]
    lines += [f"  {c['name']:<30}{c['max_abs']:>11.2e}  {'pass' if c['passed'] else 'FAIL'}" for c in report["cases"]]
    return "\n".join(lines)


def _main(prog: str, what: str, build: Callable[[Any, str], dict[str, Any]], table: Callable[[dict[str, Any]], str],
          argv: list[str] | None) -> int:
    args = _parser(prog, what).parse_args(argv)
    try:
        plan = load_plan(args.plan)
    except PlanError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    report = build(plan, args.mode)
    print(json.dumps(report) if args.json else table(report))
    return 0


def benchmark_main(argv: list[str] | None = None) -> int:
    """``benchmark.py``: score a plan in deterministic cycles (lower is better) and check correctness."""
    return _main("benchmark.py", benchmark_main.__doc__ or "", benchmark_report, _table, argv)


def verifier_main(argv: list[str] | None = None) -> int:
    """``verifier.py``: emulate the plan's numerics and compare with float64 (max_abs <= 2.5e-4)."""
    return _main("verifier.py", verifier_main.__doc__ or "", verifier_report, _verifier_table, argv)
