"""``python -m tuner``: subcommands, JSON output, clear input errors, and the main job."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest
from conftest import BEST_DEV, ROOT, scored_in, until


def tuner(workspace, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", "tuner", "--workspace", str(workspace), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def test_every_service_function_has_a_subcommand():
    from tuner import service
    from tuner.cli import COMMANDS

    tools = {"run_objective", "trace_summary", "validate_plan", "resume_search_history", "local_neighborhood_search",
             "bounded_exhaustive_search", "search_plans", "candidate_diff", "benchmark_plan", "apply_candidate",
             "apply_best_verified", "export_candidate_fixture", "compare_history", "rank_experiments", "record_result"}
    assert tools <= set(COMMANDS) and all(hasattr(service, t) for t in tools)


def test_json_output_of_read_only_commands(workspace):
    out = tuner(workspace, "--json", "run_objective", "--mode", "final")
    assert out.returncode == 0 and json.loads(out.stdout)["mode"] == "final"
    trace = json.loads(tuner(workspace, "--json", "trace_summary").stdout)
    assert trace["hotspot"]["case"].startswith("dev_") and trace["findings"]
    assert abs(sum(c["share"] for c in trace["components"].values()) - 1) < 1e-3
    bench = json.loads(tuner(workspace, "benchmark_plan", "--json", "--plan", "tensor_plan_attempt1_best",
                             "--modes", "dev", "final").stdout)
    assert set(bench["reports"]) == {"dev", "final"} and bench["correct_in_all"]
    diff = json.loads(tuner(workspace, "--json", "candidate_diff", "--candidate", "tensor_plan_iteration2_neighborhood_best",
                            "--against", "tensor_plan_attempt1_best").stdout)
    assert set(diff["changes"]) == {"num_warps", "prefetch_distance", "epilogue", "scratchpad_kb"}
    assert diff["metrics"]["dev"]["speedup"] > 1


@pytest.mark.parametrize(("args", "fragment"), [
    (("run_objective", "--mode", "fast"), "mode 'fast' is not allowed"),
    (("run_objective", "--plan", "../../etc/passwd"), "outside the workspace"),
    (("run_objective", "--plan", "no_such_fixture"), "unknown fixture 'no_such_fixture'"),
    (("bounded_exhaustive_search", "--profile", "nope"), "unknown profile 'nope'"),
    (("search_plans", "--strategy", "grid"), "strategy 'grid' is not allowed"),
    (("search_plans", "--max-evals", "-5"), "positive integer"),
    (("apply_candidate", "--plan", "tensor_plan_attempt1_best", "--dry-run", "maybe"), "expected true or false"),
    (("export_candidate_fixture", "--name", "../escape"), "not allowed"),
    (("export_candidate_fixture", "--name", "n" * 300), "'nnnnnnnnnnnnnnnnnnnnnnn...nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn' (300 characters)"),
    (("export_candidate_fixture", "--name", "baseline_row_major"), "replacing it needs overwrite=true (--overwrite on the command line"),
    (("report", "--out", "elsewhere.html"), "an output write may not touch 'elsewhere.html'"),
    (("mcp",), "tuner mcp: error: the following arguments are required: install"),          # not argparse's dest
    (("search_plans", "--strategi", "quick"), "tuner search_plans: error: unrecognized arguments: --strategi quick"),
    (("--bogus", "search_plans"), "tuner: error: unrecognized arguments: --bogus"),                 # before any command
    (("--repeats", "3", "search_plans"), "--timeout-s and --repeats apply to a command or command:PROGRAM objective only"),
    (("search_plans", "--repeats", "3"), "--timeout-s and --repeats apply to a command or command:PROGRAM objective only"),
    (("--timeout-s", "5", "run_objective"), "(objective 'builtin' runs no program, and its values do not vary)"),
    (("record_result", "--path", "/tmp/elsewhere.json"), "outside the workspace"),
    (("local_neighborhood_search", "--fixture", "tensor_plan_attempt1_best", "--strategy", "quick"), "not allowed here"),
    (("record_result", "--tools", "t" * 1000), "(1000 characters) is not allowed"),                 # was written as it came
    (("record_result", "--tools", *map(str, range(51))), "tools must be a list of at most 50 tool names"),
    (("--history", "h" * 300 + ".db", "search_plans"), "h.db': File name too long"),                # was OSError, exit 1
    (("--history", "h" * 300 + ".db", "rank_experiments"), "h.db': File name too long"),
    (("--workspace", "w" * 300, "rank_experiments"), "(300 characters) cannot be read: File name too long"),
    (("remeasure_failures",), "gives each configuration the same value every time: only a program's failed runs"),
    (("--workspace", str(ROOT / "kernel_plan.json"), "rank_experiments"), "kernel_plan.json' is not a folder"),
    (("search_plans", "--seed", "-1"), "argument --seed: expected an integer from 0 to 2147483647, got '-1'"),
    (("search_plans", "--seed", "2147483648"), "got '2147483648'"),
    (("search_plans", "--seed", "1e3"), "got '1e3'"),
    (("--space", "perf/spaces/gemm.t1.json", "run_objective"), "--space applies to a cache:PATH or command:PROGRAM objective only"),
])
def test_bad_input_exits_2_with_one_clear_line(workspace, args, fragment):
    out = tuner(workspace, *args)
    assert out.returncode == 2, out.stderr
    said, = out.stderr.splitlines()                                 # argparse's own errors too: no usage before them
    assert fragment in said and said.startswith("tuner"), out.stderr


def test_the_main_job_says_why_no_plan_passes_the_gate(workspace):
    """On a plan already at the best dev cycles the main job applies nothing, and its summary says which plan came
    closest and the gate's reason, not only that no plan passed. The history holds a plan of those cycles already (its
    local search from the best fixture, which the main job resumes): 5 s of search found one or not by the machine's load."""
    (workspace / "kernel_plan.json").write_text(json.dumps(BEST_DEV))
    assert tuner(workspace, "local_neighborhood_search", "--fixture", "tensor_plan_iteration2_neighborhood_best", "--max-evals",
                 "300").returncode == 0
    out = tuner(workspace, "run", "--time-s", "5")
    assert out.returncode == 0, out.stderr
    said = next(line for line in out.stdout.splitlines() if line.startswith("no candidate passed the gate: "))
    assert said.startswith("no candidate passed the gate: no fixture or history plan passes the gate; the best of them (history, plan ")
    assert said.endswith("): does not improve dev (178866 >= 178866)")
    assert json.loads((workspace / "kernel_plan.json").read_text()) == BEST_DEV


def test_a_history_under_a_file_is_bad_input_for_readers_and_writers(workspace):
    """A file named ``studies`` where the default history's folder should be: a search said "FileExistsError: [Errno
    17] File exists", and the commands that read the history took it for an empty one."""
    shutil.rmtree(workspace / "studies", ignore_errors=True)
    (workspace / "studies").write_text("not a folder")
    for command in ("search_plans", "rank_experiments"):
        out = tuner(workspace, command)
        assert out.returncode == 2 and out.stderr.endswith("studies/history.db': Not a directory\n"), out.stderr
    assert (workspace / "studies").read_text() == "not a folder"


@pytest.mark.parametrize("name", ["h{SCHEMA_VERSION}.db", 'h{"x": 1}.db', "h{}.db", "h?x.db", "h?mode=ro.db", "h%20x.db", "h#x.db"])
def test_a_history_file_is_the_path_given_whatever_its_name_holds(workspace, name):
    """A path became a URL as written: what follows ``?`` was read as the URL's query (the history was the file ``h``)
    and ``%20`` as a space. Optuna fills ``{SCHEMA_VERSION}`` into its storage URL with str.format: other braces
    failed with a traceback, and that one made Optuna open another file (``h12.db``)."""
    history = str(workspace / name)
    searched = tuner(workspace, "--history", history, "--json", "search_plans", "--max-evals", "3", "--seed", "1")
    assert searched.returncode == 0 and "Traceback" not in searched.stderr, searched.stderr
    assert sorted(p.name for p in workspace.iterdir() if p.name.startswith("h")) == [name]
    ranked = tuner(workspace, "--history", history, "--json", "rank_experiments")
    assert ranked.returncode == 0 and json.loads(ranked.stdout)["ranking"][0]["study"] == json.loads(searched.stdout)["study"]


def test_reading_a_history_that_holds_only_other_objectives_studies_says_so(workspace):
    """The ranking, the comparison and the report came out empty without saying that the history holds studies, only
    not of this objective (another problem's, or this one's before its model changed)."""
    cache = ROOT / "perf" / "caches" / "convolution-RTX_2080Ti.json.gz"
    assert tuner(workspace, "rank_experiments").stderr == ""                      # an empty history: nothing to say
    assert tuner(workspace, "--objective", f"cache:{cache}", "search_plans", "--max-evals", "3").returncode == 0
    for command in ("rank_experiments", "compare_history", "report"):
        out = tuner(workspace, command)
        assert out.returncode == 0 and out.stderr.endswith(
            "; it holds 1 study of other objectives (another problem's, or this one's before its scorer changed: "
            "resume_search_history lists them)\n"), (command, out.stderr)
        assert out.stderr.count("the history holds no study of builtin:") == 1, out.stderr        # said once
    assert tuner(workspace, "--objective", f"cache:{cache}", "rank_experiments").stderr == ""


def test_bad_input_whose_message_quotes_line_breaks_is_still_one_line(workspace, capsys, monkeypatch):
    from tuner.cli import COMMANDS, main
    from tuner.space import SpaceError

    def refuse(*args, **kwargs):
        raise SpaceError("a record says 'first\nsecond'")          # as a file's own text may, where no quote escapes it

    monkeypatch.setitem(COMMANDS, "rank_experiments", (refuse, *COMMANDS["rank_experiments"][1:]))
    assert main(["--workspace", str(workspace), "rank_experiments"]) == 2
    assert capsys.readouterr().err == "tuner rank_experiments: error: a record says 'first second'\n"


def test_a_failure_no_check_foresaw_is_one_line_and_its_traceback_only_when_asked(workspace, capsys, monkeypatch):
    """A bug of the tuner's printed Python's traceback; now one line naming it, and exit status 1. ``TUNER_TRACEBACK=1``
    prints the traceback first, for whoever reports the bug."""
    from tuner.cli import COMMANDS, TRACEBACK_ENV, main

    def broken(*args, **kwargs):
        return {}["missing"]

    monkeypatch.setitem(COMMANDS, "rank_experiments", (broken, *COMMANDS["rank_experiments"][1:]))
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    assert main(["--workspace", str(workspace), "rank_experiments"]) == 1
    assert capsys.readouterr().err == ("tuner rank_experiments: internal error, a bug of the tuner's (TUNER_TRACEBACK=1 shows "
                                       "where): KeyError: 'missing'\n")
    monkeypatch.setenv(TRACEBACK_ENV, "1")
    assert main(["--workspace", str(workspace), "rank_experiments"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and 'return {}["missing"]' in err, err
    assert err.endswith("internal error, a bug of the tuner's (TUNER_TRACEBACK=1 shows where): KeyError: 'missing'\n"), err


def test_repeats_after_a_search_command_is_the_objective_s_and_after_a_gate_command_the_gate_s():
    from tuner.cli import parser

    for argv in (["--repeats", "3", "search_plans"], ["search_plans", "--repeats", "3"]):
        assert parser().parse_args(argv).objective_repeats == 3, argv
    gate = parser().parse_args(["apply_candidate", "--plan", "p", "--repeats", "3"])
    assert gate.repeats == 3 and gate.objective_repeats == 1


def test_malformed_current_plan_is_an_input_error(workspace):
    (workspace / "kernel_plan.json").write_text('{"block_m": 3}')
    out = tuner(workspace, "run_objective")
    assert out.returncode == 2 and "block_m" in out.stderr and "Traceback" not in out.stderr


def test_the_main_job_in_a_folder_without_a_plan_says_what_a_workspace_holds(tmp_path):
    out = tuner(tmp_path, "run")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == ("tuner run: error: the workspace holds no kernel_plan.json: the tensor plan's commands read it "
                                  "there (run them in a copy of this repository, or name one with --workspace DIR)")
    assert sorted(p.name for p in tmp_path.iterdir()) == []                    # nothing written
    shutil.copy2(ROOT / "kernel_plan.json", tmp_path / "kernel_plan.json")
    out = tuner(tmp_path, "--objective", "command", "run_objective")          # a plan, but no benchmark.py to run it
    assert out.returncode == 2 and out.stderr.strip() == ("tuner run_objective: error: objective 'command' runs the workspace's "
                                                          "benchmark.py, and the workspace holds none (objective 'builtin' "
                                                          "scores the same model in this process)")


def test_a_fixture_that_is_not_json_is_named_and_skipped_where_all_fixtures_are_read(workspace):
    (workspace / "fixtures" / "binary.json").write_bytes(b"\xff\xfe{")
    (workspace / "fixtures" / "folder.json").mkdir()
    out = tuner(workspace, "run_objective", "--plan", "binary")
    assert out.returncode == 2 and "fixture 'binary' cannot be read as JSON: not UTF-8 text" in out.stderr, out.stderr
    listed = tuner(workspace, "--json", "compare_history")
    assert listed.returncode == 0, listed.stderr
    assert {r["source"] for r in json.loads(listed.stdout)["rows"]} >= {"current", "fixture:tensor_plan_attempt1_best"}


def test_a_file_far_larger_than_a_plan_is_refused_unread_and_one_at_the_limit_is_read(workspace):
    from tuner.workspace import MAX_TEXT_BYTES

    plan = (workspace / "kernel_plan.json").read_text()
    (workspace / "limit.json").write_text(plan + " " * (MAX_TEXT_BYTES - len(plan.encode())))   # a plan padded to the limit
    (workspace / "big.json").write_text(plan + " " * (MAX_TEXT_BYTES + 1 - len(plan.encode())))
    shutil.copy2(workspace / "big.json", workspace / "fixtures" / "huge.json")
    assert tuner(workspace, "validate_plan", "--plan", "limit.json").returncode == 0
    out = tuner(workspace, "validate_plan", "--plan", "big.json")
    assert out.returncode == 1 and "cannot read plan 'big.json': larger than 1 MiB" in out.stdout, out.stdout
    out = tuner(workspace, "run_objective", "--plan", "huge")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "fixture 'huge' cannot be read as JSON: larger than 1 MiB" in out.stderr, out.stderr


def test_a_telemetry_line_torn_by_a_kill_is_skipped_when_the_result_is_recorded(workspace):
    log = workspace / ".harnessgym" / "mcp_calls.jsonl"
    log.parent.mkdir(exist_ok=True)
    log.write_bytes(b'{"tool": "trace_summary"}\n{"tool": "compare_hist\xc3')        # the last write cut inside a character
    out = tuner(workspace, "--json", "record_result")
    assert out.returncode == 0, out.stderr
    assert "trace_summary" in json.loads(out.stdout)["used_harness_tools"]


def test_main_job_improves_the_baseline_at_least_five_times_and_a_rerun_proposes_the_same_winner(workspace):
    first = tuner(workspace, "--json", "run", "--time-s", "120", timeout=600)
    assert first.returncode == 0, first.stderr
    proposed = json.loads(first.stdout)["best"]["plan_hash"]
    out = tuner(workspace, "run", "--apply", "--time-s", "120", timeout=600)        # the rerun resumes the same searches
    assert out.returncode == 0, out.stderr
    assert "speedup" in out.stdout and "applied to kernel_plan.json" in out.stdout and f"(plan {proposed}," in out.stdout
    assert out.stderr.startswith("baseline: dev 2,324,424 cycles; ") and ", best dev 178,866 cycles (" in out.stderr, out.stderr
    after = json.loads(tuner(workspace, "--json", "benchmark_plan").stdout)
    assert after["plan_hash"] == proposed
    fixture = json.loads((workspace / "fixtures" / "baseline_row_major.json").read_text())["metrics"]
    assert after["correct_in_all"]
    assert fixture["dev"]["best_cycles"] >= 5 * after["best_cycles"]["dev"]
    assert after["best_cycles"]["final"] <= fixture["final"]["best_cycles"]
    assert (workspace / "results" / "tuner_run_best.json").is_file() and not (workspace / "fixtures" / "tuner_run_best.json").exists()
    report = next(line for line in out.stdout.splitlines() if line.startswith("report: ")).removeprefix("report: ")
    assert Path(report).is_file() and "rollback" in out.stdout and "history: " in out.stdout
    ranking = json.loads(tuner(workspace, "--json", "rank_experiments").stdout)["ranking"]
    assert ranking and ranking[0]["rank"] == 1 and all(a["final"] <= b["final"] for a, b in pairwise(ranking))
    rerun = tuner(workspace, "--json", "apply_best_verified", "--dry-run", "false")     # nothing better left: done, not refused
    again = json.loads(rerun.stdout)
    assert rerun.returncode == 0 and again["current_is_best"] and not again["passed"], rerun
    assert again["reasons"] == ["kernel_plan.json is already the best verified plan of the fixtures and the history"]
    assert not again["applied"] and json.loads(tuner(workspace, "--json", "benchmark_plan").stdout)["plan_hash"] == proposed


def test_the_main_job_says_which_searches_its_time_budget_left_unrun(workspace):
    out = tuner(workspace, "--json", "run", "--time-s", "0.001")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    (unrun,) = [s for s in result["steps"] if s["step"] == "not run"]
    assert result["seconds"] > 0.001                    # the whole job (a report was written), not the searches' budget
    assert unrun["searches"] == ["checkpoint", "exhaustive (iteration3_dev_core)", "exhaustive (iteration3_layout_relaxed)", "quick"]
    assert "not run, the time budget (0.001 s) was spent: checkpoint, exhaustive (iteration3_dev_core)" in out.stderr
    text = tuner(workspace, "run", "--time-s", "0.001").stdout                 # the summary says it too
    assert ("  not run, the time budget (0.001 s) was spent: checkpoint, exhaustive (iteration3_dev_core), exhaustive "
            "(iteration3_layout_relaxed), quick (a larger --time-s runs them; what ran resumes)\n") in text, text


def test_the_main_job_from_a_plan_that_cannot_run_in_final_says_why_and_finds_a_winner(workspace):
    """An edit left kernel_plan.json valid but unable to run its final cases: the job ended in a TypeError (a speedup
    over no cycles). It says why the baseline cannot run, and gives the speedup where the baseline has cycles."""
    plan = json.loads((workspace / "kernel_plan.json").read_text()) | {"block_m": 80, "block_n": 32, "block_k": 64, "dma_stages": 3,
                                                                         "accum": "pairwise", "scratchpad_kb": 48}
    (workspace / "kernel_plan.json").write_text(json.dumps(plan))
    out = tuner(workspace, "run", "--time-s", "0.001")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    first = out.stdout.splitlines()[0]
    assert first.startswith("baseline: dev ") and ", final cannot run (plan " in first and "scratchpad footprint" in first, first
    assert "\nspeedup: dev " in out.stdout and "x, final" not in out.stdout


def test_version_is_the_installed_package_s(workspace):
    from importlib.metadata import version

    out = tuner(workspace, "--version")
    assert out.returncode == 0 and out.stdout == f"tuner (tensor-plan-optimizer) {version('tensor-plan-optimizer')}\n", out


def test_readable_output_shows_every_item_of_a_list_an_empty_one_as_a_dash():
    from tuner.cli import readable

    result = {"rows": [{}, {"plan": {"x": 1}, "ok": True}], "reason": "first\nlast\n", "none": None, "values": [1.5, 2000],
              "error": "out of memory\n", "errors": ["a\n", "b"],                  # a program's message ending its line
              "findings": ["tail is 6% of cycles", "K tile: 8-way, 2 passes", "spill"]}     # sentences: one a line
    assert readable(result) == ["rows:", "  -", "  - plan:", "      x: 1", "    ok: true", "reason: |", "  first", "  last",
                                "none: -", "values:", "  1.5, 2,000", "error: out of memory", "errors:", "  a, b",
                                "findings:", "  - tail is 6% of cycles", "  - K tile: 8-way, 2 passes", "  - spill"]


def test_every_option_has_help_and_the_default_output_is_readable(workspace):
    from tuner.cli import parser

    parsers, seen = [("tuner", parser())], 0
    while seen < len(parsers):                              # every parser, nested subcommands (mcp install) included
        name, current = parsers[seen]
        seen += 1
        assert current.format_help().startswith(f"usage: {name}"), name       # what --help prints (a stray % breaks it)
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers += [(f"{name} {n}", p) for n, p in action.choices.items()]
            else:
                assert action.help, (name, action.dest)
    assert seen > 18
    out = tuner(workspace, "run_objective", "--mode", "final")
    assert out.returncode == 0 and out.stdout.startswith("plan_source: ") and "best_cycles: " in out.stdout
    with pytest.raises(json.JSONDecodeError):
        json.loads(out.stdout)


def test_a_plan_given_inline_as_a_json_object_is_the_plan_its_file_holds(workspace):
    plan = (workspace / "kernel_plan.json").read_text()
    fixture = json.dumps(json.loads((workspace / "fixtures" / "tensor_plan_attempt1_best.json").read_text())["plan"])
    by_file, inline = (json.loads(tuner(workspace, "--json", "run_objective", "--plan", ref).stdout) for ref in ("kernel_plan.json", plan))
    assert inline["plan_source"] == "inline plan" and inline["best_cycles"] == by_file["best_cycles"] > 0
    diff = tuner(workspace, "--json", "candidate_diff", "--candidate", fixture, "--against", plan)
    named = tuner(workspace, "--json", "candidate_diff", "--candidate", "tensor_plan_attempt1_best")
    assert diff.returncode == 0 and json.loads(diff.stdout)["changes"] == json.loads(named.stdout)["changes"] != {}
    for option, text in (("--plan", '{"block_m": 64,}'), ("--against", '{"block_m": '), ("--candidate", " {1: 2}")):
        bad = tuner(workspace, "candidate_diff" if option != "--plan" else "run_objective", option, text,
                    *(("--candidate", "baseline_row_major") if option == "--against" else ()))
        assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.splitlines()) == 1, bad
        assert f"argument {option}: expected a fixture name, a file or a JSON object, got {text!r}" in bad.stderr, bad.stderr


def test_a_true_or_false_option_takes_either_word_in_any_case_and_yes_no_1_0_too(workspace):
    for text, meant in (("true", True), ("YES", True), ("1", True), ("False", False), ("no", False), ("0", False)):
        out = tuner(workspace, "--json", "apply_candidate", "--plan", "baseline_row_major", "--dry-run", text)
        assert out.returncode == 1 and json.loads(out.stdout)["dry_run"] is meant, (text, out.stderr)    # the current plan


def test_a_refusal_exits_1_and_keeps_the_plan(workspace):
    before = (workspace / "kernel_plan.json").read_bytes()
    (workspace / "bad.json").write_text('{"block_m": 3}')
    out = tuner(workspace, "validate_plan", "--plan", "bad.json")
    assert out.returncode == 1 and "valid: false" in out.stdout
    worse = tuner(workspace, "--json", "apply_candidate", "--plan", "baseline_row_major", "--dry-run", "False")   # any case
    assert worse.returncode == 1 and json.loads(worse.stdout)["passed"] is False
    assert (workspace / "kernel_plan.json").read_bytes() == before


@pytest.mark.parametrize(("history", "fragment"), [
    ("/proc/nowhere/h.db", "does not exist"),
    ("postgresql+pg8000://user@127.0.0.1:1/db", "'.[postgres]'"),
    ("postgresql+psycopg://tuner:hunter2@db:5432x/h", "'postgresql+psycopg://tuner:***@db:5432x/h': not a database URL"),
])
def test_an_unusable_history_exits_2_with_one_line(workspace, history, fragment):
    out = tuner(workspace, "--history", history, "compare_history")
    assert out.returncode == 2 and fragment in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    assert "hunter2" not in out.stderr
    assert not Path(history).parent.exists()


def test_a_history_in_the_workspace_studies_folder_creates_it(workspace):
    shutil.rmtree(workspace / "studies", ignore_errors=True)
    out = tuner(workspace, "--history", str(workspace / "studies" / "mine.db"), "search_plans", "--max-evals", "3")
    assert out.returncode == 0, out.stderr
    assert (workspace / "studies" / "mine.db").is_file()
    typo = tuner(workspace, "--history", str(workspace / "stuides" / "mine.db"), "search_plans", "--max-evals", "3")
    assert typo.returncode == 2 and "/stuides'" in typo.stderr and "does not exist" in typo.stderr, typo.stderr
    assert not (workspace / "stuides").exists()


@pytest.mark.parametrize("command", ["compare_history", "search_plans"])       # read-only, and writing
@pytest.mark.parametrize(("name", "why"), [("fixtures", "it is a folder"), ("pipe", "it is a device or a pipe")])
def test_a_history_that_is_a_folder_or_a_pipe_exits_2_with_one_line(workspace, command, name, why):
    """A read-only tool took a folder given as the history for an empty history and showed no studies; a pipe was
    called a folder, and a search into it failed on a "disk I/O error"."""
    if name == "pipe":
        os.mkfifo(workspace / name)
    out = tuner(workspace, "--history", str(workspace / name), command)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"{name}': {why}, not a history file" in out.stderr and not out.stdout, out.stderr


def test_a_search_into_an_in_memory_history_exits_2_with_one_line(workspace):
    out = tuner(workspace, "--history", "sqlite://", "search_plans", "--max-evals", "5")
    assert out.returncode == 2 and "in-memory" in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    assert not (workspace / "studies" / "history.db").exists()


def test_ctrl_c_exits_130_with_one_line_and_keeps_the_progress(workspace):
    database = workspace / "studies" / "history.db"
    process = subprocess.Popen([sys.executable, "-m", "tuner", "--workspace", str(workspace), "search_plans", "--max-evals", "1000000"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    until(lambda: scored_in(database) > 0, process)       # work is under way
    shown = tuner(workspace, "--json", "resume_search_history")
    assert [search["state"] for search in json.loads(shown.stdout)["searches"]] == ["running"]    # a live worker is on it
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert len(err.strip().splitlines()) == 1 and "interrupted" in err and "resume" in err and "Traceback" not in err
    with sqlite3.connect(database) as connection:
        state, evaluations = connection.execute("select state, evaluations from tuner_sweeps").fetchone()
    assert state == "cancelled" and evaluations > 0


HOLD_IMPORT = """
import os, signal, sys

class Hold:
    \"\"\"Stops the first import of HOLD_IMPORT until a signal comes, having said so in the file HOLD_READY.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name == os.environ["HOLD_IMPORT"]:
            sys.meta_path.remove(self)
            open(os.environ["HOLD_READY"], "w").close()
            signal.pause()

sys.meta_path.insert(0, Hold())
"""
LAUNCHER = ROOT / ".harnessgym" / "mcp" / "tensor-plan-server" / "tensor_plan_server.py"


@pytest.mark.parametrize(("entry", "held"), [(["-m", "tuner", "compare_history"], "tuner.cli"), (["tuner", "compare_history"], "tuner.cli"),
                                             (["-m", "tuner.mcp_server"], "mcp.server"), ([str(LAUNCHER)], "mcp.server")],
                         ids=["python -m tuner", "tuner", "python -m tuner.mcp_server", "launcher"])
def test_ctrl_c_while_a_command_loads_exits_130_with_no_traceback(workspace, tmp_path, entry, held):
    """Loading takes most of a second; Ctrl-C in it printed Python's traceback of whatever import it landed in."""
    (hooks := tmp_path / "hooks").mkdir()
    (hooks / "sitecustomize.py").write_text(HOLD_IMPORT)
    ready = tmp_path / "ready"
    command = [str(Path(sys.executable).parent / entry[0]), *entry[1:]] if entry[0] == "tuner" else [sys.executable, *entry]
    env = {**os.environ, "PYTHONPATH": str(hooks), "HOLD_IMPORT": held, "HOLD_READY": str(ready)}
    process = subprocess.Popen([*command, "--workspace", str(workspace)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=workspace, env=env)
    assert until(ready.exists, process), process.communicate()
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert (process.returncode, out, err) == (130, "", "")


def test_a_sweep_of_the_whole_tensor_space_with_no_budget_says_so_as_it_starts(workspace):
    """150 billion plans at about a million a second: days. Its first line says so, and an interrupt keeps the progress."""
    process = subprocess.Popen([sys.executable, "-m", "tuner", "--workspace", str(workspace), "bounded_exhaustive_search",
                                "--profile", "all"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    first = process.stderr.readline()                        # waits for the line itself
    assert first == ("sweeping all 150,493,593,600 configurations of profile 'all', with no evaluation or time budget: an "
                     "interrupt stops it and keeps the progress, and the same command resumes it\n")
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130 and "interrupted" in err and "Traceback" not in err
    budgeted = tuner(workspace, "bounded_exhaustive_search", "--profile", "iteration3_dev_core", "--max-evals", "1000")
    assert budgeted.returncode == 0 and budgeted.stderr == ""                # a budget, or a smaller profile: nothing to say


def test_a_closed_pipe_ends_quietly(workspace):
    process = subprocess.Popen([sys.executable, "-m", "tuner", "--workspace", str(workspace), "--json", "trace_summary"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    process.stdout.close()                                  # the reader is gone before anything is written, as with `| head -0`
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


TENSOR_PLAN_ONLY = {"trace_summary", "apply_candidate", "apply_best_verified", "rollback",
                    "export_candidate_fixture", "record_result"}
COMMAND_ARGS = {"repeated_evaluation": ["--candidate", "best.json", "--repeats", "2"], "candidate_diff": ["--candidate", "best.json"],
                "benchmark_plan": ["--plan", "best.json", "--repeats", "2"], "run_objective": ["--plan", "best.json"],
                "validate_plan": ["--plan", "best.json"],
                "search_plans": ["--max-evals", "4"], "local_neighborhood_search": ["--max-evals", "4"],
                "bounded_exhaustive_search": ["--profile", "all"], "export_candidate_fixture": ["--name", "copy"],
                "apply_candidate": ["--plan", "best.json"], "run": ["--time-s", "60"]}


def test_a_search_that_no_terminal_shows_logs_where_it_stands_as_it_goes(tmp_path, capsys, monkeypatch):
    """Where stderr is no terminal (an agent's shell, a log file, CI) no progress bar shows, and a search of a slow
    kernel said nothing until it ended. It logs where it stands every ``PROGRESS_S`` seconds (0 here: after each
    batch it scores); its result on stdout is unchanged."""
    from conftest import toy_cache

    from tuner import search
    from tuner.cli import main

    toy_cache(tmp_path, {(32, 1): 3.0, (64, 1): 2.0, (64, 2): "RuntimeFailedConfig", (128, 1): 4.0, (128, 2): 1.5})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(search, "PROGRESS_S", 0.0)
    assert main(["--workspace", str(tmp_path), "--objective", "cache:toy.json.gz", "--json", "search_plans", "--max-evals", "5"]) == 0
    out, log = capsys.readouterr()
    result = json.loads(out)
    line = re.compile(r"quick: (\d) of at most 5 evaluations \((\d) new, (\d) of them failed\), best time (\S+) ms, \d+ s")
    standing = [line.fullmatch(text) for text in log.splitlines()]
    assert standing and all(standing), log
    counts = [int(m[1]) for m in standing]
    assert counts == sorted(counts) and counts[-1] == result["evaluations"] == 5, log
    assert int(standing[-1][3]) == result["failed"] == 1 and float(standing[-1][4]) == result["best"]["time"] == 1.5, log


def test_a_study_run_again_says_nothing_more_where_it_has_a_value(tmp_path, capsys, monkeypatch):
    """The line a rerun prints on stderr is for a study none of whose evaluations has a value (tests/tuner/test_program.py)."""
    from conftest import toy_cache

    from tuner.cli import main

    toy_cache(tmp_path, {(32, 1): 3.0, (64, 1): 2.0, (64, 2): "RuntimeFailedConfig", (128, 1): 4.0, (128, 2): 1.5})
    monkeypatch.chdir(tmp_path)
    command = ["--workspace", str(tmp_path), "--objective", "cache:toy.json.gz", "--json", "search_plans", "--max-evals", "3"]
    assert main(command) == 0
    capsys.readouterr()
    assert main(command) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["new_evaluations"] == 0 and json.loads(out)["best"] is not None and err == ""


def test_the_main_job_on_a_cache_tunes_from_the_space_s_default_and_writes_the_best_configuration(tmp_path, capsys, monkeypatch):
    from conftest import toy_cache

    from tuner.cli import main

    tune_params = {"bx": [16, 32, 64, 128, 256], "tile": [1, 2, 3, 4], "algo": ["naive", "shared"]}
    records = {(bx, t, a): (abs(bx - 128) / 32 + abs(t - 3) + (a == "naive") + 1.0) for bx in tune_params["bx"]
               for t in tune_params["tile"] for a in tune_params["algo"] if (bx, t) != (256, 4)}     # one not measured
    toy_cache(tmp_path, records, tune_params=tune_params)
    monkeypatch.chdir(tmp_path)
    problem = ["--workspace", str(tmp_path), "--objective", "cache:toy.json.gz"]
    assert main([*problem, "--json", "run", "--time-s", "60"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["baseline"]["plan"] == {"bx": 16, "tile": 1, "algo": "naive"} and result["baseline"]["time"] == 7.5
    assert result["best"]["time"] == 1.0 and result["speedup"] == 7.5 and result["of_optimum"] == 1.0
    assert result["changes"] == {"bx": {"from": 16, "to": 128}, "tile": {"from": 1, "to": 3}, "algo": {"from": "naive", "to": "shared"}}
    assert [s["step"] for s in result["steps"]] == ["run_objective", "checkpoint", "quick"]
    failed = [(s["failed"], s["failure_reasons"]) for s in result["steps"] if s.get("failed")]
    assert sum(n for n, _ in failed) == 2 and all(reasons == {"not measured": n} for n, reasons in failed), failed
    assert json.loads((tmp_path / "results" / "tuner_run_best.json").read_text()) == {"bx": 128, "tile": 3, "algo": "shared"}
    assert main([*problem, "--json", "run_objective", "--plan", "results/tuner_run_best.json"]) == 0     # usable as --plan
    assert json.loads(capsys.readouterr().out)["time_ms"] == 1.0
    assert main([*problem, "run", "--time-s", "60"]) == 0                           # a rerun resumes both searches
    out, log = capsys.readouterr()
    assert log.startswith("the space's default: time 7.5 ms\n") and "evaluations, best time 1 ms (" in log, log   # as the summary
    assert "best: time 1 ms" in out and "speedup over the default: 7.50x" in out and "  tile: 1 -> 3" in out, out
    assert "\nof the cache's optimum: 1.000 (1.0: the best time it holds)\n" in out, out
    assert out.count("resumed after") == 2 and "written to results/tuner_run_best.json (usable as --plan)" in out, out
    written = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert main([*problem, "run", "--apply"]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == written
    assert main([*problem, "--history", "fresh.db", "run", "--time-s", "60"]) == 0   # each search says what failed, and why
    said = re.findall(r", (\d+) of them failed \(not measured: (\d+)\), best time", capsys.readouterr().out)
    assert said and all(a == b for a, b in said) and sum(int(a) for a, _ in said) == 2, said
    toy_cache(tmp_path, {(32,): 1.0}, name="one.json.gz", tune_params={"bx": [32]})    # the default is all there is
    assert main(["--workspace", str(tmp_path), "--objective", "cache:one.json.gz", "run"]) == 0
    out = capsys.readouterr().out
    assert "  checkpoint (plan:" in out and ": 0 evaluations, best time 1 ms, stopped: converged" in out, out  # the job scored it
    assert "from the space's default)" in out and "the default is the best configuration found" in out, out


def test_the_main_jobs_recheck_shows_both_values_and_its_interval_from_the_lower_speedup_up():
    """A noisy program's winner is measured again: each line gives the new median and the search's value in brackets;
    the interval of the ratio to the default, as speedups, runs from the lower to the higher, and says when it is not
    significant (it holds 1x)."""
    from tuner.cli import _render_best

    result = {"best": {"time": 1.0, "plan_hash": "a1", "source": "quick"}, "speedup": 1.25, "changes": {},
              "configuration": {"path": "results/tuner_run_best.json"},
              "recheck": {"repeats": 3, "configurations": [{"plan_hash": "a1", "again": {"median": 1.0}, "searched": 0.9}],
                          "against_default": {"confidence": 0.95, "low": 0.5, "high": 1.25, "better": False}}}
    lines = _render_best(result, "time", lambda value: f"{value:g} ms")
    assert "  a1: 1 ms (0.9 ms)" in lines and "  95% interval 0.80x-2.00x: not significant" in lines, lines


def test_a_resumed_step_of_the_main_job_counts_the_failures_of_its_new_evaluations(tmp_path, capsys, monkeypatch):
    """A search the main job resumes says after how many evaluations, and how many of the new ones failed."""
    from conftest import toy_cache

    from tuner.cli import main

    knobs = {"bx": [16 * i for i in range(1, 9)], "tile": list(range(1, 9)), "unroll": list(range(1, 9))}
    toy_cache(tmp_path, {(bx, t, u): bx / 16 + t + u for bx in knobs["bx"] for t in knobs["tile"] for u in knobs["unroll"]
                         if (bx // 16 + t + u) % 2}, tune_params=knobs)          # half the space not measured
    monkeypatch.chdir(tmp_path)
    problem = ["--workspace", str(tmp_path), "--objective", "cache:toy.json.gz"]
    main([*problem, "search_plans", "--max-evals", "3"])                        # the study the main job's quick resumes
    capsys.readouterr()
    assert main([*problem, "run", "--time-s", "60"]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  quick")]
    said = re.search(r": (\d+) evaluations, resumed after 3, (\d+) of the new ones failed \(not measured: (\d+)\), best", line)
    assert said and int(said[1]) > 3 and said[2] == said[3], line


def test_the_main_job_on_a_program_that_cannot_run_says_why_on_one_line(tmp_path, capsys, monkeypatch):
    from conftest import toy_cache

    from tuner.cli import main

    toy_cache(tmp_path, {(32, 1): 1.0})
    (tmp_path / "bench.py").write_text("import json, sys\nimport nonexistent_module\n")
    monkeypatch.chdir(tmp_path)
    assert main(["--workspace", str(tmp_path), "--objective", "command:bench.py", "--space", "toy.json.gz", "run", "--time-s", "3"]) == 1
    out, err = capsys.readouterr()                                            # 1: no configuration ran, the objective failed
    why = ("the space's default cannot run: bench.py exited 1: Traceback (most recent call last): ... "
           "ModuleNotFoundError: No module named 'nonexistent_module'")
    assert err.splitlines()[0] == why and out.splitlines()[0].startswith(f"{why} (configuration "), (out, err)
    searched = [line for line in err.splitlines() if line.startswith(("checkpoint (", "quick ("))]
    assert len(searched) == 2 and all(", best time - (" in line for line in searched), err     # no value, so no unit
    assert "no configuration ran: every one scored failed" in out and not (tmp_path / "results" / "tuner_run_best.json").exists()


def test_the_main_job_runs_a_default_that_fails_once_and_a_rerun_not_at_all(tmp_path, capsys, monkeypatch):
    """A real benchmark run can take minutes: the default the job scores, says why it failed and climbs from is
    the same one run of the program, and the history keeps it for the next job and for the tools that read it."""
    from conftest import toy_cache

    from tuner.cli import main

    toy_cache(tmp_path, {(32, 1): 1.0})
    (tmp_path / "bench.py").write_text(
        "import json, sys\nc = json.load(sys.stdin)\nopen(sys.argv[1], 'a').write(json.dumps(c) + '\\n')\n"
        "print(json.dumps({'error': 'no such tile'}) if c == {'bx': 32, 'tile': 1} else c['bx'] / 32 + c['tile'])\n")
    runs = tmp_path / "runs.log"
    monkeypatch.chdir(tmp_path)
    problem = ["--workspace", str(tmp_path), "--objective", f"command:bench.py {runs}", "--space", "toy.json.gz"]
    assert main([*problem, "run", "--time-s", "30"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("the space's default cannot run: no such tile (configuration "), out
    configurations = [json.loads(line) for line in runs.read_text().splitlines()]
    assert configurations.count({"bx": 32, "tile": 1}) == 1 and len(configurations) == 6, configurations   # each once
    assert main([*problem, "run", "--time-s", "30"]) == 0
    assert capsys.readouterr().out.startswith("the space's default cannot run: no such tile (configuration ")   # the same words
    for tool in ("compare_history", "resume_search_history"):
        assert main([*problem, "--json", tool]) == 0 and json.loads(capsys.readouterr().out)
    assert len(runs.read_text().splitlines()) == 6


@pytest.mark.parametrize("objective", ["cache", "program"])
def test_every_command_works_on_another_problem_or_says_it_is_for_the_tensor_plan(tmp_path, objective, capsys, monkeypatch):
    """On a measured cache and on a program of one's own, each subcommand either runs (exit 0: its JSON names the
    configuration's time, never cycles) or exits 2 with one line saying that it is for the tensor plan (or, measuring
    failures again, for a program), writing nothing."""
    from conftest import toy_cache

    from tuner.cli import COMMANDS, main

    records = {(bx, t): bx / 32 + t for bx in (32, 64, 128) for t in (1, 2)}
    toy_cache(tmp_path, records)
    busy = tmp_path.parent / f"{tmp_path.name}-busy"                       # the program's first run of 128 x 2 fails
    (tmp_path / "bench.py").write_text(f"import json, os, sys\nc = json.load(sys.stdin)\nif c == {{'bx': 128, 'tile': 2}} and not "
                                       f"os.path.exists({str(busy)!r}):\n    open({str(busy)!r}, 'w').close()\n"
                                       "    print(json.dumps({'error': 'device busy'}))\nelse:\n    print(c['bx'] / 32 + c['tile'])\n")
    (tmp_path / "best.json").write_text(json.dumps({"bx": 32, "tile": 1}))
    problem = ["--objective", "cache:toy.json.gz"] if objective == "cache" else \
        ["--objective", "command:bench.py", "--space", "toy.json.gz"]
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    monkeypatch.chdir(tmp_path)
    for command in COMMANDS:
        code = main(["--workspace", str(tmp_path), *problem, "--json", command, *COMMAND_ARGS.get(command, [])])
        out, err = capsys.readouterr()
        if command in TENSOR_PLAN_ONLY:
            assert code == 2 and err.count("\n") == 1 and "works on the tensor-plan problem only" in err, (command, err)
            continue
        if command == "remeasure_failures" and objective == "cache":
            assert code == 2 and err.count("\n") == 1 and "a program's failed runs are measured again" in err, err
            continue
        assert code == 0, (command, err)
        result = json.loads(out)
        assert "cycles" not in out and "dev" not in result, (command, out)
        if command in ("benchmark_plan", "run_objective"):
            assert (result["reports"]["time"] if command == "benchmark_plan" else result)["time_ms"] == 2.0
        if command == "validate_plan":
            assert result["valid"] and result["feasible"] == {"time": True} and result["plan"] == {"bx": 32, "tile": 1}, out
        if command == "remeasure_failures":                                # the failed run, measured again
            assert result["failure_reasons"] == {} and result["best"]["plan"] == {"bx": 128, "tile": 2}, out
        if command == "compare_history":                                  # no plan file: the default is the baseline
            sources = {r["source"] for r in result["rows"]}
            assert "the space's default" in sources and "current" not in sources, out
    assert {p: p.read_bytes() for p in before} == before                  # what was there is untouched
    assert sorted(p.name for p in tmp_path.iterdir() if p not in before) == [".harnessgym", "results", "studies"]
    backups = [p.name.split(".")[0] for p in (tmp_path / ".harnessgym" / "backups").iterdir()]
    assert backups == ["results__report"]                                    # run's report, replaced by report's
    (tmp_path / "deep.json").write_text("[" * 100_000)                       # more than Python's parser holds
    assert main(["--workspace", str(tmp_path), *problem, "run_objective", "--plan", "deep.json"]) == 2
    assert "configuration file 'deep.json' cannot be read as JSON: nested too deeply" in capsys.readouterr().err
    assert main(["--workspace", str(tmp_path), *problem, "run_objective", "--plan", '{"bx": 32}']) == 2     # given inline
    assert capsys.readouterr().err == "tuner run_objective: error: missing knob 'tile' (allowed: 1, 2)\n"
    assert main(["--workspace", str(tmp_path), *problem, "run_objective", "--plan", "bx.json"]) == 2
    assert capsys.readouterr().err == ("tuner run_objective: error: no configuration file 'bx.json' in the workspace "
                                       "(a JSON object of knob values)\n")
    (tmp_path / "wrong.json").write_text(json.dumps({"bx": 33, "tile": 1}))  # JSON, but not a configuration of the space
    assert main(["--workspace", str(tmp_path), *problem, "run_objective", "--plan", "wrong.json"]) == 2
    assert capsys.readouterr().err == ("tuner run_objective: error: configuration file 'wrong.json': knob 'bx': value 33 is not "
                                       "allowed (allowed: 32, 64, 128)\n")


def test_the_problem_and_history_options_work_after_the_command_too(tmp_path, capsys, monkeypatch):
    """--workspace, --history, --objective, --space and --timeout-s given after the command mean what they mean before
    it (a value after the command wins): the second search resumes the first one's study in the same history."""
    from conftest import toy_cache

    from tuner.cli import main

    toy_cache(tmp_path, {(bx, t): bx / 32 + t for bx in (32, 64, 128) for t in (1, 2)})
    monkeypatch.chdir(tmp_path)
    after = ["--json", "search_plans", "--max-evals", "4", "--objective", "cache:toy.json.gz", "--history", "h.db", "--workspace", "."]
    assert main(["--objective", "builtin", *after]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["--objective", "cache:toy.json.gz", "--history", "h.db", "--json", "search_plans", "--max-evals", "4"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert "@cache:" in first["study"] and again["study"] == first["study"] and again["new_evaluations"] == 0
    assert (tmp_path / "h.db").is_file() and not (tmp_path / "studies").exists()
    assert main(["--objective", "cache:toy.json.gz", "search_plans", "--timeout-s", "5"]) == 2     # taken after the command too:
    assert "--timeout-s and --repeats apply to a command" in capsys.readouterr().err                 # a cache runs no program
