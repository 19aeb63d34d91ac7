"""The verification gate and the only writer of the workspace's plan file (``kernel_plan.json``).

A candidate passes when it is correct in every mode of the objective, improves the first (the
search objective, e.g. dev) and does not regress the others (the held-out authority, e.g. final)
against the current plan. For noisy benchmarks both plans can be measured K times: values are then
medians, and the improvement in the authority must also be significant (:mod:`tuner.noise`).
Applying is a dry run unless asked; the real write keeps a timestamped backup and is atomic;
:func:`rollback` restores the latest backup. Nothing here knows a knob.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tuner import noise
from tuner.objectives import Objective
from tuner.search import number
from tuner.space import Config
from tuner.workspace import BACKUP_DIR, PLAN_FILE, Workspace, WorkspaceError, quoted

PLAN_CHANGED = f"{PLAN_FILE} changed while the candidate was gated"     # the reason an apply that lost a race gives first


def measure(objective: Objective, plan: Config, repeats: int = 1, modes: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Per mode (default: every mode of ``objective``): ``best_cycles`` (the value, lower is better), ``correct``
    and ``max_abs``, and ``reason`` where a run had no value and the objective says why. With ``repeats`` > 1 the
    plan is scored that many times: the value is the median, correct means correct every time, and ``samples``
    keeps every value (a noisy benchmark's spread)."""
    idx = objective.space.encode(plan)[None]
    out = {}
    for mode in modes or objective.modes:
        results = [objective.evaluate(idx, mode) for _ in range(repeats)]
        values = [float(r.cycles[0]) for r in results]
        errors = [float(r.max_abs[0]) for r in results if not np.isnan(r.max_abs[0])]
        out[mode] = {"best_cycles": number(float(np.median(values))), "correct": all(bool(r.correct[0]) for r in results),
                     "max_abs": max(errors) if errors else None}
        if repeats > 1:
            out[mode]["samples"] = [number(v) for v in values]
        if why := next((r.reasons[0] for r in results if r.reasons and r.reasons[0] is not None), None):
            out[mode]["reason"] = why
    return out


def unverified(metrics: dict[str, dict[str, Any]]) -> list[str]:
    """Why a plan's metrics (per mode, :func:`measure`) do not verify it: a mode it cannot run in, or one it is not
    correct in; empty when it runs correct in every mode."""
    infeasible = [m for m in metrics if metrics[m]["best_cycles"] is None]
    if infeasible:
        why = metrics[infeasible[0]].get("reason")
        return [f"infeasible ({', '.join(infeasible)})" + (f": {why}" if why else "")]
    return [f"not correct in {m} mode (max_abs {metrics[m]['max_abs']})" for m in metrics if not metrics[m]["correct"]]


def verdict(candidate: dict[str, dict[str, Any]], current: dict[str, dict[str, Any]]) -> tuple[bool, list[str]]:
    """Whether ``candidate`` may replace ``current`` (metrics per mode, the search's mode first), and the
    reasons when it may not."""
    modes = list(candidate)
    reasons = unverified(candidate)
    if any(candidate[m]["best_cycles"] is None for m in modes):
        return False, reasons
    first, before = candidate[modes[0]]["best_cycles"], current[modes[0]]["best_cycles"]
    if before is not None and first >= before:
        reasons.append(f"does not improve {modes[0]} ({first} >= {before})")
    for m in modes[1:]:
        if current[m]["best_cycles"] is not None and candidate[m]["best_cycles"] > current[m]["best_cycles"]:
            reasons.append(f"regresses {m} ({candidate[m]['best_cycles']} > {current[m]['best_cycles']})")
    return not reasons, reasons


def significance(candidate: dict[str, dict[str, Any]], current: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """With repeated measurements (``samples``), whether the candidate's improvement in the authority (the last
    mode) is significant (:func:`tuner.noise.compare`); ``None`` without samples or with infeasible ones."""
    mode = list(candidate)[-1]
    a, b = candidate[mode].get("samples"), current[mode].get("samples")
    if not a or not b or None in a or None in b:
        return None
    return {"mode": mode, **noise.compare(a, b).as_dict()}


def gate(objective: Objective, workspace: Workspace, candidate: Config,
         measured: tuple[Config, dict[str, dict[str, Any]]] | None = None, repeats: int = 1) -> dict[str, Any]:
    """The gate's report for ``candidate`` against the workspace's current plan (``measured``: that plan as the
    caller read it, and its :func:`measure`). With ``repeats`` > 1 both are measured that many
    times, compared by their medians, and the candidate must also be significantly better in the authority."""
    space = objective.space
    current, current_metrics = measured or (workspace.current_plan(), None)
    cand_metrics = measure(objective, candidate, repeats)
    current_metrics = current_metrics or measure(objective, current, repeats)
    passed, reasons = verdict(cand_metrics, current_metrics)
    report = {"passed": passed, "reasons": reasons, "candidate_hash": space.hash(candidate), "current_hash": space.hash(current),
              "candidate": cand_metrics, "current": current_metrics, "diff": space.diff(current, candidate)}
    if repeats > 1 and (test := significance(cand_metrics, current_metrics)) is not None:
        report["significance"] = test
        if not test["better"]:
            reasons.append(f"the {test['mode']} improvement is not significant at {test['confidence']:.0%} ({test['test']}: "
                           f"ratio {test['ratio']:.4f}, interval [{test['low']:.4f}, {test['high']:.4f}])")
            report["passed"] = False
    return report


def apply(objective: Objective, workspace: Workspace, candidate: Config, dry_run: bool = True,
          measured: tuple[Config, dict[str, dict[str, Any]]] | None = None, repeats: int = 1) -> dict[str, Any]:
    """Gate ``candidate`` (measured ``repeats`` times; ``measured`` as for :func:`gate`) and, unless ``dry_run``, write
    it as ``kernel_plan.json`` (backup kept), provided the plan is still the one it was gated against: one that
    another apply, a rollback or an edit changed meanwhile is left as it is, and the candidate fails."""
    report = gate(objective, workspace, candidate, measured, repeats)
    report |= {"dry_run": dry_run, "applied": False, "backup": None}
    if report["passed"] and not dry_run:
        with workspace.plan_lock():
            now = objective.space.hash(workspace.current_plan())
            if now != report["current_hash"]:
                report["passed"] = False
                report["reasons"].append(f"{PLAN_CHANGED} (plan {report['current_hash']}, now {now}): gate it again")
                return report
            backup = workspace.write("plan", PLAN_FILE, objective.space.to_json(candidate), backup_name="kernel_plan")
        report |= {"applied": True, "backup": backup}
    return report


def backups(workspace: Workspace) -> list[Path]:
    """Backups of ``kernel_plan.json``, oldest first."""
    folder = workspace.root / BACKUP_DIR
    return sorted(folder.glob("kernel_plan.*.json")) if folder.is_dir() else []


def rollback(workspace: Workspace, backup: str | None = None, dry_run: bool = True) -> dict[str, Any]:
    """Restore ``kernel_plan.json`` from ``backup`` (default: the latest, so repeated rollbacks walk back).

    The restored backup leaves the stack; the plan it replaces is kept as ``rolled-back.*.json`` (``kept``: naming it
    as ``backup`` undoes the rollback).
    """
    with workspace.plan_lock():                             # two rollbacks never restore one backup twice
        if backup is None:
            found = backups(workspace)
            if not found:
                undo = sorted((workspace.root / BACKUP_DIR).glob("rolled-back.*.json"))
                raise WorkspaceError(f"no backups of {PLAN_FILE} in {BACKUP_DIR}: nothing to roll back" + (
                    f"; the plan the latest rollback replaced is {BACKUP_DIR}/{undo[-1].name} (give it as the backup to undo "
                    "that rollback)" if undo else ""))
            source = found[-1]
        else:
            source = workspace.path(backup)
            if not source.is_file() or source.parent != (workspace.root / BACKUP_DIR).resolve():
                raise WorkspaceError(f"{quoted(backup)} is not a backup in {BACKUP_DIR}")
        text = source.read_text(encoding="utf-8")
        report: dict[str, Any] = {"restored_from": str(Path(source).relative_to(workspace.root)), "dry_run": dry_run, "rolled_back": False}
        if not dry_run:
            report["kept"] = workspace.write("plan", PLAN_FILE, text, backup_name="rolled-back")
            source.unlink()
            report["rolled_back"] = True
    return report
