"""The gate, atomic apply with backups, rollback, fixtures and the result JSON."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import BEST_DEV, BEST_DEV_FASTER_FINAL, OVERFLOWING, ROOT, toy_cache, where_nothing_can_be_written, workspace_files

from tuner import gate, service
from tuner.history import Row, rows_of
from tuner.objectives import Evaluations
from tuner.objectives.builtin import BuiltinObjective
from tuner.plan import plan_hash
from tuner.workspace import BACKUP_DIR, OUTPUT_BACKUPS, Workspace, WorkspaceError, atomic_write


def test_apply_is_a_dry_run_unless_told(ctx, workspace):
    before = (workspace / "kernel_plan.json").read_bytes()
    report = service.apply_candidate(ctx, "tensor_plan_iteration2_neighborhood_best")
    assert report["passed"] and report["dry_run"] and not report["applied"]
    assert (workspace / "kernel_plan.json").read_bytes() == before
    assert report["diff"]["num_warps"] == {"from": 4, "to": 6}


@pytest.mark.parametrize("value", ["false", 0, None, "no"])
def test_dry_run_accepts_only_a_real_boolean(ctx, workspace, value):
    before = (workspace / "kernel_plan.json").read_bytes()
    with pytest.raises(service.ServiceError, match="dry_run"):
        service.apply_candidate(ctx, "tensor_plan_iteration2_neighborhood_best", dry_run=value)
    assert (workspace / "kernel_plan.json").read_bytes() == before


def test_real_apply_backs_up_and_rollback_restores(ctx, workspace):
    before = (workspace / "kernel_plan.json").read_text()
    report = service.apply_candidate(ctx, "tensor_plan_attempt1_best", dry_run=False)
    assert report["applied"] and (workspace / report["backup"]).read_text() == before
    assert json.loads((workspace / "kernel_plan.json").read_text())["num_warps"] == 4
    second = service.apply_candidate(ctx, "tensor_plan_iteration2_neighborhood_best", dry_run=False)
    assert second["applied"]
    applied = (workspace / "kernel_plan.json").read_text()
    undone = service.rollback(ctx)
    assert json.loads((workspace / "kernel_plan.json").read_text())["num_warps"] == 4
    assert (workspace / undone["kept"]).read_text() == applied               # the plan it replaced, named in the result
    service.rollback(ctx, backup=undone["kept"])                             # undoes the rollback
    assert (workspace / "kernel_plan.json").read_text() == applied
    last = service.rollback(ctx)                                            # the stack holds the first apply's backup
    assert (workspace / "kernel_plan.json").read_text() == before
    with pytest.raises(WorkspaceError) as empty:                             # the way back from there is named
        service.rollback(ctx)
    assert str(empty.value) == (f"no backups of kernel_plan.json in {BACKUP_DIR}: nothing to roll back; the plan the latest "
                                f"rollback replaced is {last['kept']} (give it as the backup to undo that rollback)")


def test_rollback_restores_only_from_a_backup(ctx, workspace):
    """A rollback deletes the backup it restores: a file of the workspace that is not a backup (a fixture, the plan
    itself, a file in a folder under the backups) is refused by name, and nothing changes."""
    with pytest.raises(WorkspaceError) as empty:                             # before any apply
        service.rollback(ctx)
    assert str(empty.value) == f"no backups of kernel_plan.json in {BACKUP_DIR}: nothing to roll back"
    service.apply_candidate(ctx, "tensor_plan_attempt1_best", dry_run=False)
    (workspace / BACKUP_DIR / "nested").mkdir()
    (workspace / BACKUP_DIR / "nested" / "old.json").write_text((workspace / "kernel_plan.json").read_text())
    before = workspace_files(workspace)
    for other in ("fixtures/tensor_plan_iteration2_neighborhood_best.json", "kernel_plan.json", f"{BACKUP_DIR}/nested/old.json",
                  f"{BACKUP_DIR}/missing.json"):
        with pytest.raises(WorkspaceError, match=f"'{re.escape(other)}' is not a backup in {BACKUP_DIR}"):
            service.rollback(ctx, backup=other, dry_run=False)
    assert workspace_files(workspace) == before


class EditedMeanwhile(BuiltinObjective):
    """The model, whose first evaluation also rewrites the workspace's plan as ``edit``: another apply, or a person's
    edit, that lands while the gate measures."""

    def __init__(self, plan: Path, edit: str) -> None:
        super().__init__()
        self.plan, self.edit = plan, edit

    def evaluate(self, idx, mode):
        if self.edit:
            self.plan.write_text(self.edit)
            self.edit = ""
        return super().evaluate(idx, mode)


def test_an_apply_leaves_a_plan_that_changed_while_it_was_gated(ctx, workspace):
    """attempt-1 beats the baseline it is gated against, but iteration-2, better than attempt-1, is the plan by the time
    it would be written: writing attempt-1 would make the plan worse."""
    edit = (workspace / "fixtures" / "tensor_plan_iteration2_neighborhood_best.json").read_text()
    edit = json.dumps(json.loads(edit)["plan"])
    candidate, _ = ctx.workspace.resolve_plan("tensor_plan_attempt1_best")
    report = gate.apply(EditedMeanwhile(workspace / "kernel_plan.json", edit), ctx.workspace, candidate, dry_run=False)
    assert not report["passed"] and not report["applied"] and report["reasons"][-1].startswith(gate.PLAN_CHANGED)
    assert (workspace / "kernel_plan.json").read_text() == edit and not gate.backups(ctx.workspace)
    again = service.apply_candidate(ctx, "tensor_plan_attempt1_best", dry_run=False)      # gated again: against the edit
    assert not again["applied"] and again["reasons"][0] == "does not improve dev (293411 >= 262009)"


def test_an_apply_works_on_a_file_system_without_locks(ctx, workspace, monkeypatch):
    import fcntl

    def no_locks(*_):
        raise OSError(37, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    assert service.apply_candidate(ctx, "tensor_plan_attempt1_best", dry_run=False)["applied"]
    assert service.rollback(ctx)["rolled_back"]


def test_apply_best_verified_stops_at_a_plan_changed_while_it_gated(ctx, workspace, monkeypatch):
    """The change lands while the current plan is measured: the first candidate's apply finds it, and no other
    candidate is gated against the plan that is gone."""
    edit = json.dumps(json.loads((workspace / "fixtures" / "tensor_plan_attempt1_best.json").read_text())["plan"])
    monkeypatch.setitem(ctx.__dict__, "objective", EditedMeanwhile(workspace / "kernel_plan.json", edit))
    gated = []
    monkeypatch.setattr(gate, "apply", lambda *args, real=gate.apply, **kw: gated.append(args[2]) or real(*args, **kw))
    report = service.apply_best_verified(ctx, dry_run=False)
    assert len(gated) == 1 and not report["applied"] and report["reasons"][-1].startswith(gate.PLAN_CHANGED)
    assert (workspace / "kernel_plan.json").read_text() == edit and not gate.backups(ctx.workspace)


def test_an_output_keeps_its_newest_backups_and_no_other_backup_is_touched(workspace):
    """A report is made again by every run (5 MB each): its backups are bounded, the plan's and other files' are not."""
    ws = Workspace.at(workspace)
    for i in range(6):
        ws.write("plan", "kernel_plan.json", (workspace / "kernel_plan.json").read_text())
        ws.write("output", "results/report.html", f"<p>{i}</p>")
        ws.write("output", "results/report.old.html", f"<p>old {i}</p>")    # a name that starts like the report's
    kept = {p.name: p.read_text() for p in (workspace / BACKUP_DIR).iterdir()}
    reports = [text for name, text in sorted(kept.items()) if name.startswith("results__report.2")]
    assert reports == [f"<p>{i}</p>" for i in range(5)][-OUTPUT_BACKUPS:]                  # the newest replaced ones
    assert sum(name.startswith("results__report.old.") for name in kept) == OUTPUT_BACKUPS
    assert sum(name.startswith("kernel_plan.") for name in kept) == 6                     # every plan backup stays


def test_a_backup_another_run_pruned_first_is_no_error(workspace, monkeypatch):
    """Two runs that end together both write the report and prune its backups: one finds gone what it listed."""
    ws = Workspace.at(workspace)
    for i in range(OUTPUT_BACKUPS + 1):
        ws.write("output", "results/report.html", f"<p>{i}</p>")
    gone = workspace / BACKUP_DIR / "results__report.20000101T000000000000Z.html"      # listed, then pruned by the other run
    listed = Path.iterdir
    monkeypatch.setattr(Path, "iterdir", lambda self: [*listed(self), gone] if self == workspace / BACKUP_DIR else listed(self))
    ws.write("output", "results/report.html", "<p>last</p>")
    assert (workspace / "results" / "report.html").read_text() == "<p>last</p>"
    assert len(list((workspace / BACKUP_DIR).glob("results__report.*"))) == OUTPUT_BACKUPS


def test_gate_refuses_regressions_and_incorrect_plans(ctx):
    service.apply_candidate(ctx, "tensor_plan_iteration2_neighborhood_best", dry_run=False)
    worse = service.apply_candidate(ctx, "tensor_plan_attempt1_best", dry_run=False)
    assert not worse["passed"] and not worse["applied"] and any("does not improve dev" in r for r in worse["reasons"])
    plan = service.validate_plan(ctx, "tensor_plan_iteration2_neighborhood_best")["plan"]
    overfit = dict(plan, accum="sequential", softmax="approx_poly", scratchpad_kb=128)
    report = service.apply_candidate(ctx, overfit, dry_run=False)
    assert not report["passed"] and any("not correct in final" in r for r in report["reasons"])


class _Runs:
    """An objective whose every run of a configuration gives the next of ``runs``: (value, correct, max_abs, reason)."""

    modes = ("dev", "final")

    def __init__(self, runs: list[tuple[float, bool, float, str | None]]) -> None:
        self.space, self.runs = BuiltinObjective.space, iter(runs)

    def evaluate(self, idx: np.ndarray, mode: str) -> Evaluations:
        value, correct, max_abs, why = next(self.runs)
        return Evaluations(np.array([value]), np.array([correct]), np.array([max_abs]), [why])


def test_repeated_measurements_give_the_median_correct_only_if_every_run_is_and_the_largest_error(iteration2, tmp_path):
    runs = [(300.0, True, 1e-5, None), (100.0, False, 3e-4, None), (200.0, True, 2e-5, None),
            (np.inf, False, np.nan, None), (np.inf, False, np.nan, "no scratchpad"), (np.inf, False, np.nan, "later")]
    metrics = gate.measure(_Runs(runs), iteration2, repeats=3)
    assert metrics["dev"] == {"best_cycles": 200, "correct": False, "max_abs": 3e-4, "samples": [300, 100, 200]}
    assert metrics["final"] == {"best_cycles": None, "correct": False, "max_abs": None, "samples": [None] * 3,
                                "reason": "no scratchpad"}              # the first run that says why
    assert gate.significance(metrics, metrics) is None                 # no interval of runs that had no value
    current = {mode: {"best_cycles": value, "correct": True, "max_abs": 1e-5} for mode, value in (("dev", 200), ("final", 900))}
    candidate = _Runs([(150.0, True, 1e-5, None), (900.0, True, 1e-5, None)])      # its dev and final runs: nothing else runs
    assert gate.gate(candidate, Workspace.at(tmp_path), iteration2, measured=(iteration2, current))["passed"]
    current["final"]["samples"] = [900, 910]
    candidate = _Runs([(150.0, True, 1e-5, None), (160.0, True, 1e-5, None), (800.0, True, 1e-5, None), (805.0, True, 1e-5, None)])
    report = gate.gate(candidate, Workspace.at(tmp_path), iteration2, measured=(iteration2, current), repeats=2)
    assert report["significance"]["mode"] == "final"                   # two runs each are enough for the test


def test_a_candidate_must_run_in_every_mode_and_any_that_does_improves_on_a_plan_that_cannot_run(iteration2, tmp_path):
    """A candidate that cannot run in one mode fails for that alone (its missing value is compared with nothing); one
    that runs correct in every mode replaces a current plan that cannot run (a cache that never measured it, say)."""
    workspace, fast, slow = Workspace.at(tmp_path), (150.0, True, 1e-5, None), (900.0, True, 1e-5, None)
    unrunnable = (np.inf, False, np.nan, "no scratchpad")
    current = {mode: {"best_cycles": 200, "correct": True, "max_abs": 1e-5} for mode in ("dev", "final")}
    for runs, mode in (([fast, unrunnable], "final"), ([unrunnable, fast], "dev")):
        report = gate.gate(_Runs(runs), workspace, iteration2, measured=(iteration2, current))
        assert not report["passed"] and report["reasons"] == [f"infeasible ({mode}): no scratchpad"]
    cannot_run = {mode: {"best_cycles": None, "correct": False, "max_abs": None} for mode in ("dev", "final")}
    report = gate.gate(_Runs([fast, slow]), workspace, iteration2, measured=(iteration2, cannot_run))
    assert report["passed"] and report["reasons"] == []
    assert report["candidate"]["dev"] == {"best_cycles": 150, "correct": True, "max_abs": 1e-5}    # one run: no samples


def test_the_gate_says_why_a_plan_cannot_run(ctx):
    plan = service.validate_plan(ctx, "tensor_plan_iteration2_neighborhood_best")["plan"]
    unrunnable = dict(plan, block_m=128, block_n=128, block_k=128, dma_stages=4, scratchpad_kb=48)
    report = service.apply_candidate(ctx, unrunnable)
    assert not report["passed"]
    (why,) = report["reasons"]
    assert why.startswith("infeasible (dev, final): scratchpad footprint ") and "raise scratchpad_kb" in why, why
    assert "exceeds scratchpad_kb=48 on final_" in report["candidate"]["final"]["reason"]
    repeated = service.repeated_evaluation(ctx, unrunnable, repeats=2)["modes"]
    assert "exceeds scratchpad_kb=48 on dev_" in repeated["dev"]["candidate_reason"]
    assert repeated["dev"]["candidate"]["median"] is None and "against_reason" not in repeated["dev"]


def test_apply_best_verified_picks_a_gated_improvement(ctx, workspace):
    service.local_neighborhood_search(ctx, fixture="tensor_plan_iteration2_neighborhood_best", max_evals=300)
    report = service.apply_best_verified(ctx, dry_run=False)
    assert report["passed"] and report["applied"]
    assert report["candidate"]["dev"]["best_cycles"] < report["current"]["dev"]["best_cycles"]
    assert report["candidate"]["final"]["best_cycles"] <= report["current"]["final"]["best_cycles"]


def test_where_no_plan_passes_the_gate_the_best_ones_reasons_say_why(ctx, workspace):
    """A plan that ties the current one on dev and is faster on final ranks above it, yet the gate wants dev better:
    the refusal names that plan and the gate's reason, not only that no plan passed (which read as a failure after a
    plan a person picked among equals on dev)."""
    best, tied = BEST_DEV, BEST_DEV_FASTER_FINAL
    (workspace / "kernel_plan.json").write_text(json.dumps(best))
    (workspace / "fixtures" / "tied.json").write_text(json.dumps({"name": "tied", "plan": tied}))
    dev, final = ({name: service.run_objective(ctx, mode, plan)["best_cycles"] for name, plan in (("best", best), ("tied", tied))}
                  for mode in ("dev", "final"))
    assert dev["tied"] == dev["best"] == 178866 and final["tied"] < final["best"]
    result = service.apply_best_verified(ctx)
    assert result["passed"] is False and "current_is_best" not in result
    assert result["reasons"] == ["no fixture or history plan passes the gate",
                                 f"the best of them (fixture:tied, plan {plan_hash(tied)}): does not improve dev (178866 >= 178866)"]


def test_a_fixture_that_is_not_a_plan_is_left_out_and_named(ctx, workspace):
    (workspace / "fixtures" / "typo.json").write_text('{"plan": {"block_m": 64,}}')
    (workspace / "fixtures" / "partial.json").write_text('{"plan": {"block_m": 3}}')
    compared, resumed = service.compare_history(ctx), service.resume_search_history(ctx)
    for result in (compared, resumed):
        assert sorted(result["unreadable_fixtures"]) == ["partial", "typo"]
        assert "cannot be read as JSON" in result["unreadable_fixtures"]["typo"]
        assert "knob 'block_m': value 3 is not allowed" in result["unreadable_fixtures"]["partial"]
    assert {r["source"] for r in compared["rows"]} >= {"fixture:tensor_plan_attempt1_best", "fixture:baseline_row_major"}
    (workspace / "fixtures" / "typo.json").unlink()
    (workspace / "fixtures" / "partial.json").unlink()
    assert "unreadable_fixtures" not in service.compare_history(ctx)


def test_export_fixture_and_record_result(ctx, workspace):
    exported = service.export_candidate_fixture(ctx, "next_seed", "tensor_plan_iteration2_neighborhood_best", note="t")
    fixture = json.loads((workspace / exported["path"]).read_text())
    assert fixture["metrics"]["dev"]["best_cycles"] == service.run_objective(ctx, "dev", "next_seed")["best_cycles"]
    assert fixture["provenance"]["source"] == "fixture tensor_plan_iteration2_neighborhood_best"
    (workspace / ".harnessgym" / "mcp_calls.jsonl").write_text('{"tool": "run_objective"}\n{"tool": "trace_summary"}\n')
    result = service.record_result(ctx, tools=["search_plans"])
    written = json.loads((workspace / result["path"]).read_text())
    final = service.run_objective(ctx, "final")["best_cycles"]
    assert written["metrics"]["best_cycles"] == written["metrics"]["score"] == final
    assert written["used_harness_tools"] == ["run_objective", "trace_summary", "search_plans"]


@pytest.mark.parametrize(("changes", "why"), [
    ({"accum": "sequential", "softmax": "approx_poly"}, "not correct in final mode (max_abs 0.000336675)"),
    ({"block_m": 128, "block_n": 192, "scratchpad_kb": 48}, "infeasible (final): scratchpad footprint 56.0 KB exceeds scratchpad_kb=48"),
])
def test_a_plan_that_does_not_run_correct_in_every_mode_is_not_exported(ctx, workspace, baseline, changes, why):
    """A fixture seeds the next attempt: a plan incorrect in final mode (approx_poly with sequential accumulation, the
    seed's known trap) or one that cannot run there was written as a fixture like any other."""
    (workspace / "candidate.json").write_text(json.dumps({**baseline, **changes}))
    before = sorted(p.name for p in (workspace / "fixtures").iterdir())
    with pytest.raises(service.ServiceError, match=rf"^candidate\.json cannot seed an attempt: {re.escape(why)}.*only a plan that runs "
                                                   "correct in every mode is exported$"):
        service.export_candidate_fixture(ctx, "next_seed", "candidate.json")
    assert sorted(p.name for p in (workspace / "fixtures").iterdir()) == before and not gate.backups(ctx.workspace)


def test_a_fixture_made_meanwhile_by_another_export_is_not_replaced(ctx, workspace, monkeypatch):
    """Two exports of one name at once: both find no file, and the second used to replace the first's without a backup."""
    theirs = workspace / "fixtures" / "next_seed.json"
    theirs.write_text('{"theirs": true}')
    found = Path.exists
    monkeypatch.setattr(Path, "exists", lambda self: False if self == theirs else found(self))     # checked before they wrote it
    with pytest.raises(WorkspaceError, match=r"next_seed\.json exists"):
        service.export_candidate_fixture(ctx, "next_seed", "tensor_plan_iteration2_neighborhood_best")
    assert theirs.read_text() == '{"theirs": true}' and not gate.backups(ctx.workspace)
    assert {p.name for p in theirs.parent.iterdir()} == {p.name for p in (ROOT / "fixtures").iterdir()} | {"next_seed.json"}  # no temp file


def test_a_fixture_that_cannot_be_written_is_named_by_its_own_path(workspace):
    """A fixtures folder that cannot be written (a read-only mount): one line naming the fixture, not the temp file."""
    fixtures = workspace / "fixtures"
    command = [sys.executable, "-m", "tuner", "--workspace", str(workspace), "export_candidate_fixture", "--name", "next_seed",
               "--plan", "tensor_plan_iteration2_neighborhood_best"]
    out = subprocess.run(where_nothing_can_be_written(fixtures, command), capture_output=True, text=True, timeout=300, cwd=ROOT)
    fixtures.chmod(0o755)
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.endswith(f"{str(fixtures / 'next_seed.json')!r}\n") and not (fixtures / "next_seed.json").exists(), out.stderr


SLOWER_DEV_FASTER_FINAL = dict(BEST_DEV_FASTER_FINAL, dma_burst=256)      # dev 190,847, final 1,021,968
WRONG_ON_FINAL = dict(BEST_DEV_FASTER_FINAL, softmax="approx_poly")      # dev 178,866 correct; final 1,143,631 incorrect


def _recorded(ctx, plans: list[dict]) -> list[str]:
    """``plans`` scored in every mode into the history, as a search would have left them; their plan hashes."""
    space = ctx.objective.space
    idx = np.stack([space.encode(plan) for plan in plans])
    hashes = [space.hash_idx(row) for row in idx]
    for mode in ctx.objective.modes:
        ctx.history.write(ctx.objective.name, mode, rows_of(ctx.objective.evaluate(idx, mode), hashes, idx))
    return hashes


def test_each_study_is_ranked_by_its_best_plan_in_the_authority(ctx):
    """A plan faster on final but slower on dev is its study's best, and ranks that study first: final is the
    authority; dev only breaks its ties. A study whose plans are incorrect in a mode has no best to rank."""
    name = ctx.objective.name
    hashes = _recorded(ctx, [BEST_DEV_FASTER_FINAL, SLOWER_DEV_FASTER_FINAL, WRONG_ON_FINAL])
    dev = ctx.history.cached(name, "dev", hashes)
    for study, held in (("first-only", [0]), ("both", [0, 1]), ("incorrect", [2])):
        members = [(hashes[i], dev[hashes[i]].cycles) for i in held]
        ctx.history.write(name, "dev", [], ctx.history.study(f"{study}@{name}")._study_id, members=members)
    ranking = service.rank_experiments(ctx)["ranking"]
    assert [(r["study"], r["plan_hash"], r["final"]) for r in ranking] == [
        (f"both@{name}", hashes[1], 1021968), (f"first-only@{name}", hashes[0], 1143631)]


def test_the_best_verified_plan_never_makes_the_current_plans_final_worse(ctx, workspace):
    """A fixture ranks first by dev but is slower on final than the current plan: the current plan is the best verified,
    as compare_history and apply_best_verified both say (the second named the fixture, yet said that no plan passed and
    exited 1). A fixture incorrect in a mode ranks after every correct plan."""
    current = SLOWER_DEV_FASTER_FINAL
    (workspace / "kernel_plan.json").write_text(json.dumps(current))
    (workspace / "fixtures" / "faster_dev.json").write_text(json.dumps(BEST_DEV_FASTER_FINAL))    # 178,866, 1,143,631
    (workspace / "fixtures" / "wrong_on_final.json").write_text(json.dumps(WRONG_ON_FINAL))         # the same, incorrect
    compared = service.compare_history(ctx)
    ranked = ["fixture:faster_dev", "current", "fixture:tensor_plan_iteration2_neighborhood_best",
              "fixture:tensor_plan_attempt1_best", "fixture:baseline_row_major", "fixture:wrong_on_final"]
    assert [(r["source"], r["correct"]) for r in compared["rows"]] == [(source, source != ranked[-1]) for source in ranked]
    assert compared["best_verified"]["plan_hash"] == plan_hash(current) and compared["current_is_best"]
    for recorded in (False, True):                      # the gate's seeds without the current plan, then with it (second of them)
        if recorded:
            _recorded(ctx, [current])
        applied = service.apply_best_verified(ctx)      # the gate refuses the fixture, and says why
        assert applied["current_is_best"] and applied["reasons"] == [
            "kernel_plan.json is already the best verified plan of the fixtures and the history",
            f"fixture:faster_dev (plan {plan_hash(BEST_DEV_FASTER_FINAL)}) ranks above it by dev but fails the gate: "
            "regresses final (1143631 > 1021968)"]


def test_a_search_best_that_ties_with_the_current_configuration_leaves_it_the_best(tmp_path):
    """The space's default (128, 2) and (32, 1) both take 2 ms: a search's best is (32, 1), whose plan hash sorts first,
    and compare_history still calls the default the best: a tie is no reason to change it."""
    times = {(bx, tile): 3.0 for bx in (128, 64, 32) for tile in (2, 1)} | {(128, 2): 2.0, (32, 1): 2.0}
    cache = toy_cache(tmp_path, times, tune_params={"bx": [128, 64, 32], "tile": [2, 1]})
    ctx = service.Context.create(tmp_path, objective=f"cache:{cache}")
    service.search_plans(ctx, "quick", max_evals=6, seed=0)
    compared = service.compare_history(ctx)
    default, other = (ctx.objective.space.hash({"bx": bx, "tile": tile}) for bx, tile in ((128, 2), (32, 1)))
    assert [(r["plan_hash"], r["time"]) for r in compared["rows"]] == [(default, 2), (other, 2)] and other < default
    assert compared["current_is_best"] and compared["best_verified"]["plan"] == {"bx": 128, "tile": 2}
    ctx.close()


def test_a_write_that_fails_midway_leaves_no_partial_backup_and_the_plan_as_it_was(workspace, monkeypatch):
    """A full disk while the backup is written: the backup is whole or absent (a rollback restores it as the plan)."""
    before = (workspace / "kernel_plan.json").read_text()

    def disk_full(_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        Workspace.at(workspace).write("plan", "kernel_plan.json", before.replace("row_major", "blocked"))
    assert (workspace / "kernel_plan.json").read_text() == before
    assert not list((workspace / BACKUP_DIR).iterdir())


def test_atomic_write_creates_on_a_file_system_without_hard_links(tmp_path, monkeypatch):
    def refused(*_):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", refused)
    atomic_write(tmp_path / "new.json", "{}", replace=False)
    with pytest.raises(FileExistsError):
        atomic_write(tmp_path / "new.json", "[]", replace=False)
    assert (tmp_path / "new.json").read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == ["new.json"]


@pytest.mark.parametrize("bad", ["../outside", "/etc/passwd", "a/../../b"])
def test_paths_are_confined_to_the_workspace(ctx, bad):
    with pytest.raises((WorkspaceError, service.ServiceError)):
        service.export_candidate_fixture(ctx, bad)
    with pytest.raises((WorkspaceError, service.ServiceError)):
        service.record_result(ctx, path=bad + ".json")
    with pytest.raises(WorkspaceError):
        service.run_objective(ctx, "dev", bad + ".json")


@pytest.mark.parametrize("bad", ["", "a\x00b.json", "p" * 5000 + ".json"])
def test_a_path_that_is_empty_malformed_or_too_long_is_refused_by_name(ctx, workspace, bad):
    before = workspace_files(workspace)
    with pytest.raises(WorkspaceError, match="is empty, malformed or longer than 512 characters"):
        service.run_objective(ctx, "dev", bad)
    if bad:                                                         # a result's path must name a .json file first
        with pytest.raises(WorkspaceError, match="is empty, malformed or longer than 512 characters"):
            service.record_result(ctx, path=bad)
    assert workspace_files(workspace) == before


@pytest.mark.parametrize(("call", "said"), [
    (lambda c: service.benchmark_plan(c, modes=[]), "modes must be a non-empty list of distinct modes from ['dev', 'final'], got []"),
    (lambda c: service.benchmark_plan(c, modes=["dev", "dev"]), "modes must be a non-empty list of distinct modes"),
    (lambda c: service.benchmark_plan(c, repeats=0), "repeats must be an integer from 1 to"),
    (lambda c: service.local_neighborhood_search(c, fixture="tensor_plan_attempt1_best", plan="kernel_plan.json"),
     "give either fixture or plan, not both"),
    (lambda c: service.search_plans(c, max_evals=True), "max_evals must be a positive number up to"),
    (lambda c: service.search_plans(c, max_evals=10**12), "max_evals must be a positive number up to"),
    (lambda c: service.search_plans(c, max_evals=None), "max_evals must be a positive number up to 10,000,000, got None"),
    (lambda c: service.search_plans(c, time_s=0), "time_s must be a positive number up to 86,400, got 0"),
    (lambda c: service.repeated_evaluation(c, "baseline_row_major", repeats=1), "repeats must be an integer from 2 to 100, got 1"),
    (lambda c: service.export_candidate_fixture(c, "mine", overwrite="yes"), "overwrite must be true or false (a boolean), got 'yes'"),
    (lambda c: service.export_results(c, out="results/out.csv"), "out must name a .json file under results/, got 'results/out.csv'"),
    (lambda c: service.report(c, out="results/report.txt"), "out must name an .html file under results/"),
    (lambda c: service.record_result(c, path="notes.txt"), "path must name a .json file, got 'notes.txt'"),
    (lambda c: service.run_workflow(c, apply="yes"), "apply must be a boolean, got 'yes'"),
])
def test_a_library_or_mcp_callers_out_of_bounds_argument_is_refused_by_name_and_writes_nothing(ctx, workspace, call, said):
    """What the command line's parser refuses first, a caller of the service (an agent through MCP, a notebook) can
    still pass: each is a ServiceError that names the argument and the value, before anything runs or is written."""
    before = workspace_files(workspace)
    with pytest.raises(service.ServiceError) as caught:
        call(ctx)
    assert said in str(caught.value)
    assert workspace_files(workspace) == before


def test_symlinks_out_of_the_workspace_are_refused(ctx, workspace, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text((workspace / "kernel_plan.json").read_text())
    (workspace / "link.json").symlink_to(outside)
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        service.run_objective(ctx, "dev", "link.json")


def test_tied_plans_break_by_hash_whatever_order_the_history_holds_them(tmp_path):
    from conftest import copy_workspace, fixture_plan

    from tuner.plan import SPACE

    base = fixture_plan("tensor_plan_iteration2_neighborhood_best") | {"dma_stages": 1}
    tied = [base | {"prefetch_distance": 0}, base | {"prefetch_distance": 1}]       # no lookahead either way: same cycles
    winners = set()
    for n, order in enumerate((tied, tied[::-1])):
        workspace = copy_workspace(tmp_path / f"ws{n}")
        for fixture in (workspace / "fixtures").glob("*.json"):
            fixture.unlink()
        ctx = service.Context.create(workspace)
        hashes = _recorded(ctx, order)
        assert len({row.cycles for row in ctx.history.cached(ctx.objective.name, "dev", hashes).values()}) == 1
        winners.add(service.apply_best_verified(ctx)["candidate_hash"])
        ctx.close()
    assert winners == {min(SPACE.hash(p) for p in tied)}


def test_a_sweep_ranks_tied_configurations_by_hash_not_by_where_they_lie_in_the_space(tmp_path):
    grid = [(bx, tile) for bx in (32, 64, 128) for tile in (1, 2)]
    ctx = service.Context.create(tmp_path, objective=f"cache:{toy_cache(tmp_path, dict.fromkeys(grid, 1.0))}")
    top = [row["plan_hash"] for row in service.bounded_exhaustive_search(ctx, "all")["top"]]
    hashes = sorted(ctx.objective.space.hash({"bx": bx, "tile": tile}) for bx, tile in grid)
    assert top == hashes[:len(top)] and len(top) >= 2
    ctx.close()


def test_resuming_says_how_many_studies_the_history_holds_of_other_objectives(ctx, workspace, tmp_path):
    """Another problem's studies, or this one's before its scorer changed (a new version of the model is a new
    objective): resuming counts them, where it used to show an empty history."""
    assert "other_objectives" not in service.resume_search_history(ctx)
    other = service.Context.create(workspace, objective=f"cache:{toy_cache(tmp_path, {(32, 1): 3.0, (64, 1): 2.0})}")
    service.search_plans(other, max_evals=2)
    other.close()
    resumed = service.resume_search_history(ctx)
    assert resumed["other_objectives"] == {other.objective.name: 1} and resumed["searches"] == []


def test_resuming_lists_the_profiles_no_sweep_of_this_objective_finished(workspace, tmp_path):
    """A sweep stopped by its budget resumes, so its profile is still to sweep; a finished one is not; a profile of the
    studies folder that lists another space's knobs is none of this space's."""
    (workspace / "studies" / "small.json").write_text(json.dumps({"knobs": {"bx": [32, 64], "tile": [1]}}))
    (workspace / "studies" / "plan_only.json").write_text(json.dumps({"knobs": {"block_m": [64]}}))
    ctx = service.Context.create(workspace, objective=f"cache:{toy_cache(tmp_path, {(32, 1): 3.0, (64, 1): 2.0, (128, 2): 1.0})}")
    assert service.resume_search_history(ctx)["profiles_not_swept"] == ["all", "small"]
    assert service.bounded_exhaustive_search(ctx, "all", max_evals=2)["stopped"] == "evaluation budget"
    assert service.resume_search_history(ctx)["profiles_not_swept"] == ["all", "small"]
    assert service.bounded_exhaustive_search(ctx, "small")["stopped"] == "exhausted"
    assert service.resume_search_history(ctx)["profiles_not_swept"] == ["all"]
    ctx.close()


def test_the_history_seeds_run_nothing_and_the_gate_measures_the_one_it_tries(ctx):
    """The gate's seeds from the history carry the authority's value where a search checked the plan there, and
    ``None`` elsewhere: listing them runs no benchmark (with a real one, the final mode of 80 plans per call, which a
    read-only tool could not even keep); the gate measures the plan it tries."""
    service.local_neighborhood_search(ctx, fixture="tensor_plan_iteration2_neighborhood_best", include_final=False, max_evals=60)
    final = ctx.objective.name, "final"
    assert ctx.history.cached(*final) == {}
    seeds = [s for s in service.resume_search_history(ctx)["seeds"] if s["source"] == "history"]
    assert seeds and all(s["final"] is None for s in seeds) and ctx.history.cached(*final) == {}
    report = service.apply_best_verified(ctx)
    assert report["passed"] and report["candidate_source"] == "history" and report["candidate"]["final"]["best_cycles"] > 0
    service.local_neighborhood_search(ctx, fixture="tensor_plan_iteration2_neighborhood_best", max_evals=60)
    seeds = [s for s in service.resume_search_history(ctx)["seeds"] if s["source"] == "history"]
    assert seeds[0]["final"] == ctx.history.cached(*final)[seeds[0]["plan_hash"]].cycles     # the finalists are checked


def test_a_diff_with_a_plan_that_cannot_run_names_its_changes_and_why_and_gives_no_speedup(ctx, iteration2):
    crowded = dict(iteration2, **OVERFLOWING)
    for candidate, against in ((iteration2, crowded), (crowded, iteration2)):
        diff = service.candidate_diff(ctx, candidate, against)
        assert set(diff["changes"]) == {knob for knob, value in OVERFLOWING.items() if iteration2[knob] != value}
        assert all(m["speedup"] is None and (m["from"] is None) != (m["to"] is None) for m in diff["metrics"].values()), diff
        assert diff["candidate_correct"] == {"dev": candidate is iteration2, "final": candidate is iteration2}
        who = "candidate" if candidate is crowded else "against"
        assert {mode: set(m) - {"from", "to", "speedup"} for mode, m in diff["metrics"].items()} == {
            "dev": {f"{who}_reason"}, "final": {f"{who}_reason"}}, diff
        assert all(m[f"{who}_reason"] == ctx.objective.report(crowded, mode)["reason"] for mode, m in diff["metrics"].items())


def test_a_diff_measures_both_plans_whatever_the_history_holds_of_them(ctx, iteration2):
    """What the history holds of a plan is what a search saw (a noisy run, a failure at a shorter time limit): a diff,
    like the gate, measures the plans it compares."""
    space = ctx.objective.space
    for mode in ctx.objective.modes:
        ctx.history.write(ctx.objective.name, mode, [Row(space.hash(iteration2), 1.0, True, 0.0, space.encode(iteration2))])
    diff = service.candidate_diff(ctx, iteration2)
    assert [m["to"] for m in diff["metrics"].values()] == [ctx.objective.report(iteration2, m)["best_cycles"] for m in diff["metrics"]]
    assert all(m["to"] > 1 for m in diff["metrics"].values())


def test_a_plan_that_runs_correct_in_dev_only_is_not_correct_in_all_modes(ctx, workspace):
    plan = json.loads((workspace / "kernel_plan.json").read_text()) | {"block_m": 80, "block_n": 32, "block_k": 64, "dma_stages": 3,
                                                                         "accum": "pairwise", "scratchpad_kb": 48}
    bench = service.benchmark_plan(ctx, plan)
    assert bench["reports"]["dev"]["correct"] and not bench["reports"]["final"]["feasible"] and bench["correct_in_all"] is False


def test_focused_starts_from_the_best_configuration_the_history_holds(tmp_path):
    """Not from the space's default, (32, 1), the slowest here."""
    grid = [(bx, tile) for bx in (32, 64, 128) for tile in (1, 2)]
    ctx = service.Context.create(tmp_path, objective=f"cache:{toy_cache(tmp_path, {c: 10.0 - i for i, c in enumerate(grid)})}")
    best = service.bounded_exhaustive_search(ctx, "all")["best"]
    focused = service.search_plans(ctx, strategy="focused", max_evals=1)
    assert best["plan"] == {"bx": 128, "tile": 2} and ctx.history.outcomes(focused["study"])[0][0] == best["plan_hash"]
    ctx.close()
