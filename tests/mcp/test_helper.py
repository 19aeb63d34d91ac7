"""The call helper: a real client over stdio, telemetry, exit codes, and the seed's workflow end to end."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import tomllib

import anyio
import pytest
from conftest import child_env, copy_workspace, where_nothing_can_be_written
from mcp import Client, StdioServerParameters

HELPER = ".harnessgym/runtime/mcp_call.py"


def call(workspace, tool, arguments="{}", server="tensor-plan-server", timeout="600", cwd=None, env=None):
    """The workspace's helper run from ``cwd`` (default: the workspace) with ``env`` added to the environment."""
    out = subprocess.run([sys.executable, str(workspace / HELPER), "--server", server, "--tool", tool, "--arguments", arguments,
                          "--timeout", timeout], cwd=cwd or workspace, capture_output=True, text=True, env=child_env() | (env or {}),
                         timeout=600)
    return out.returncode, (json.loads(out.stdout) if out.stdout.strip() else None), out.stderr


def telemetry(workspace):
    path = workspace / ".harnessgym" / "mcp_calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_one_telemetry_record_per_call_and_exit_codes(workspace):
    rc, result, _ = call(workspace, "run_objective", '{"mode":"dev"}')
    assert rc == 0 and result["mode"] == "dev" and result["best_cycles"] > 0
    rc, result, err = call(workspace, "run_objective", '{"mode":"turbo"}')
    assert rc == 1 and result["error"].endswith("argument 'mode': input should be 'dev' or 'final', got 'turbo'")
    assert err == f"mcp_call.py: run_objective failed: {result['error']}\n"           # said once: no server log line beside it
    rc, _, err = call(workspace, "run_objective", '{"mode": dev}')
    assert rc == 2 and "not valid JSON" in err
    rc, _, err = call(workspace, "run_objective", "[1]")
    assert rc == 2 and "JSON object" in err
    rc, _, err = call(workspace, "run_objective", "{}", server="nope")
    assert rc == 2 and "unknown server 'nope'" in err and "tensor-plan-server" in err
    rc, _, err = call(workspace, "run_objective", "[" * 100_000)
    assert rc == 2 and "not valid JSON: nested too deeply" in err and "Traceback" not in err
    records = telemetry(workspace)
    assert records[-1]["arguments"] == "[" * 1000                                   # what is kept of text that is not JSON
    assert len(records) == 6
    assert [r["ok"] for r in records] == [True, False, False, False, False, False]
    first = records[0]
    assert first["server"] == "tensor-plan-server" and first["tool"] == "run_objective" and first["arguments"] == {"mode": "dev"}
    assert first["duration_s"] > 0 and "best_cycles" in first["summary"] and first["time"].endswith("+00:00")
    manifest = workspace / ".harnessgym/mcp/tensor-plan-server/harnessgym-mcp.json"
    manifest.rename(manifest.with_suffix(".off"))                                   # no manifest: no server to name
    rc, _, err = call(workspace, "run_objective", "{}")
    assert rc == 2 and err == "mcp_call.py: error: unknown server 'tensor-plan-server'; servers in .harnessgym/mcp: none\n", err


def test_the_helper_called_from_another_folder_starts_the_server_of_its_workspace_or_the_one_named(workspace, tmp_path):
    """The manifest names the launcher by a path in the workspace: the server starts there whatever the caller's folder,
    and works on ``TENSOR_PLAN_WORKSPACE`` where the caller names another workspace."""
    other = copy_workspace(tmp_path / "other")
    fixture = json.loads((other / "fixtures" / "tensor_plan_iteration2_neighborhood_best.json").read_text())
    (other / "kernel_plan.json").write_text(json.dumps(fixture["plan"]))             # faster than the workspace's own plan
    values = []
    for env in ({}, {"TENSOR_PLAN_WORKSPACE": str(other)}):
        rc, result, err = call(workspace, "run_objective", cwd=tmp_path, env=env)
        assert rc == 0, err
        values.append(result["best_cycles"])
    assert values[1] < values[0] and len(telemetry(workspace)) == 2 and not (tmp_path / ".harnessgym").exists()


def test_a_call_whose_telemetry_cannot_be_written_still_gives_its_result(workspace):
    """A workspace where .harnessgym/ cannot be written (a read-only mount): the result and exit status stand, and one
    line says the record was not written (a traceback used to end the call with nothing printed)."""
    command = [sys.executable, HELPER, "--server", "tensor-plan-server", "--tool", "run_objective", "--arguments", '{"mode": "dev"}']
    folder = workspace / ".harnessgym"
    out = subprocess.run(where_nothing_can_be_written(folder, command), cwd=workspace, capture_output=True, text=True, env=child_env(),
                         timeout=600)
    folder.chmod(0o755)
    assert out.returncode == 0 and json.loads(out.stdout)["best_cycles"] > 0, out.stderr
    assert out.stderr.startswith("mcp_call.py: the call's telemetry record was not written to .harnessgym/mcp_calls.jsonl: ")
    assert out.stderr.count("\n") == 1 and telemetry(workspace) == []


def test_a_write_the_workspace_refuses_names_the_file_by_its_path_in_the_workspace(workspace):
    """A fixtures folder that cannot be written: the error result names fixtures/next.json, and no path of this machine."""
    arguments = json.dumps({"name": "next", "plan": "tensor_plan_attempt1_best"})
    command = [sys.executable, HELPER, "--server", "tensor-plan-server", "--tool", "export_candidate_fixture", "--arguments", arguments]
    folder = workspace / "fixtures"
    out = subprocess.run(where_nothing_can_be_written(folder, command), cwd=workspace, capture_output=True, text=True, env=child_env(),
                         timeout=600)
    folder.chmod(0o755)
    error = json.loads(out.stdout)["error"]                  # a read-only file system (root), or permission denied
    assert out.returncode == 1 and "OSError: " in error and error.endswith(": fixtures/next.json"), out
    assert str(workspace) not in out.stdout and not (folder / "next.json").exists()


def test_a_call_past_its_timeout_says_so_and_the_search_is_saved_as_cancelled(workspace):
    rc, _, err = call(workspace, "search_plans", '{"max_evals": 1000000}', timeout="10")
    assert rc == 1 and err.startswith("mcp_call.py: error: no result within 10 s (--timeout)") and "Group" not in err, err
    assert len(err.splitlines()) == 1 and telemetry(workspace)[-1]["error"] in err
    with sqlite3.connect(workspace / "studies" / "history.db") as connection:
        state, evaluations = connection.execute("select state, evaluations from tuner_sweeps").fetchone()
    assert state == "cancelled" and evaluations > 0


@pytest.mark.parametrize(("script", "args", "said"), [
    (HELPER, ["--tool", "run_objective"], "mcp_call.py: error: the following arguments are required: --server"),
    (".harnessgym/mcp/tensor-plan-server/tensor_plan_server.py", ["--self-tset"],
     "tensor_plan_server: error: unrecognized arguments: --self-tset"),
])
def test_bad_arguments_to_the_helper_or_the_server_are_one_line(workspace, script, args, said):
    """argparse's refusal came after its usage, which lists every option."""
    out = subprocess.run([sys.executable, script, *args], cwd=workspace, capture_output=True, text=True, env=child_env(), timeout=60)
    assert out.returncode == 2 and out.stderr == f"{said} ('{said.split(':')[0]} --help' lists the options)\n", out.stderr


@pytest.mark.parametrize(("edit", "message"), [
    (("tensor_plan_server.py", "gone.py"), "the server ended before it answered (what it printed on stderr, if anything, is above)"),
    (('"python3"', '"no-such-python"'), "the server cannot be started: No such file or directory: 'no-such-python'"),
])
def test_a_server_that_ends_or_cannot_start_is_named_plainly(workspace, edit, message):
    manifest = workspace / ".harnessgym" / "mcp" / "tensor-plan-server" / "harnessgym-mcp.json"
    manifest.write_text(manifest.read_text().replace(*edit))
    rc, _, err = call(workspace, "run_objective")
    assert rc == 1 and err.splitlines()[-1] == f"mcp_call.py: error: {message}", err
    assert telemetry(workspace)[-1]["error"] == message


def test_seed_workflow_through_the_helper(workspace):
    before = json.loads((workspace / "kernel_plan.json").read_text())
    steps = [
        ("run_objective", {"mode": "dev"}),
        ("trace_summary", {}),
        ("resume_search_history", {}),
        ("local_neighborhood_search", {"fixture": "tensor_plan_iteration2_neighborhood_best", "strategy": "checkpoint",
                                       "include_final": True}),
        ("bounded_exhaustive_search", {"profile": "iteration3_dev_core", "max_evals": 1814400, "include_final": True}),
        ("bounded_exhaustive_search", {"profile": "iteration3_layout_relaxed", "include_final": True}),
        ("search_plans", {"strategy": "quick"}),
        ("compare_history", {}),
    ]
    results = {}
    for tool, arguments in steps:
        rc, result, err = call(workspace, tool, json.dumps(arguments))
        assert rc == 0, (tool, err)
        results[tool] = result
    summaries = {record["tool"]: json.loads(record["summary"]) for record in telemetry(workspace)}     # each tool's last call
    assert summaries["search_plans"]["best_cycles"] == results["search_plans"]["best"]["dev"] > 0       # a search's best, by mode
    best = results["compare_history"]["best_verified"]
    rc, diff, _ = call(workspace, "candidate_diff", json.dumps({"candidate": best["plan"]}))
    assert rc == 0 and diff["changes"] and diff["metrics"]["dev"]["speedup"] >= 5
    rc, bench, _ = call(workspace, "benchmark_plan", json.dumps({"plan": best["plan"], "modes": ["dev", "final"]}))
    assert rc == 0 and bench["correct_in_all"]
    rc, dry, _ = call(workspace, "apply_best_verified", '{"dry_run": true}')
    assert rc == 0 and dry["passed"] and not dry["applied"]
    assert json.loads((workspace / "kernel_plan.json").read_text()) == before
    rc, applied, _ = call(workspace, "apply_best_verified", '{"dry_run": false}')
    assert rc == 0 and applied["applied"] and applied["candidate"]["dev"]["correct"] and applied["candidate"]["final"]["correct"]
    rc, _, _ = call(workspace, "export_candidate_fixture", '{"name": "attempt4_best"}')
    assert rc == 0 and (workspace / "fixtures" / "attempt4_best.json").is_file()
    rc, compared, _ = call(workspace, "compare_history", "{}")
    assert rc == 0 and compared["current_is_best"]
    rc, again, _ = call(workspace, "apply_best_verified", '{"dry_run": false}')         # nothing left to apply: not an error
    assert rc == 0 and again["current_is_best"] and not again["applied"]
    rc, _, _ = call(workspace, "record_result", "{}")
    assert rc == 0
    after = json.loads((workspace / "kernel_plan.json").read_text())
    assert after != before
    result = json.loads((workspace / ".harnessgym" / "iteration_result.json").read_text())
    assert result["metrics"]["best_cycles"] == result["metrics"]["score"] == applied["candidate"]["final"]["best_cycles"]
    assert result["metrics"]["correct"] is True
    assert result["metrics"]["dev_best_cycles"] * 5 <= applied["current"]["dev"]["best_cycles"]
    calls = [record["tool"] for record in telemetry(workspace)][:-1]         # record_result's own record follows its result
    assert result["used_harness_tools"] == list(dict.fromkeys(calls)) and len(calls) > len(set(calls))     # each once, in order
    assert ".harnessgym/mcp/tensor-plan-server/harnessgym-mcp.json" in result["used_harness_artifacts"]
    assert len(telemetry(workspace)) == len(steps) + 8          # one record per helper call


def test_mcp_install_prints_and_merges_client_configs(workspace):
    def tuner(*args, options=()):
        return subprocess.run([sys.executable, "-m", "tuner", "--workspace", str(workspace), *options, "mcp", "install", *args],
                              capture_output=True, text=True, env=child_env(), timeout=60)

    claude = json.loads(tuner("--client", "claude").stdout)["mcpServers"]["tensor-plan-server"]
    assert claude["command"] == sys.executable and claude["args"][0].endswith("tensor_plan_server.py")   # absolute interpreter
    (workspace / ".vscode").mkdir()
    theirs = '{"servers": {"other": {"type": "stdio", "command": "x"}}}'
    (workspace / ".vscode" / "mcp.json").write_text(theirs)
    assert set(json.loads(tuner("--client", "vscode").stdout)["servers"]) == {"tensor-plan-server"}      # printed: the entry alone
    wrote = tuner("--client", "vscode", "--write")
    assert wrote.returncode == 0 and "the file it replaced: .harnessgym/backups/.vscode__mcp." in wrote.stdout
    assert (workspace / wrote.stdout.split(": ")[-1].strip().rstrip(")")).read_text() == theirs      # as the user wrote it
    merged = json.loads((workspace / ".vscode" / "mcp.json").read_text())["servers"]
    assert set(merged) == {"other", "tensor-plan-server"} and merged["tensor-plan-server"]["type"] == "stdio"
    assert tuner("--client", "vscode", "--write").stdout == ".vscode/mcp.json already holds this entry\n"
    printed = tuner("--client", "codex").stdout
    assert printed.startswith("[mcp_servers.tensor-plan-server]\ncommand = ") and "\nenv = {}\n" in printed   # not merged
    (workspace / ".codex").mkdir()
    theirs = ('[mcp_servers.other]\ncommand = "x"\n\n[mcp_servers.tensor-plan-server]\ncommand = "old"\nargs = [\n  ["-v"],\n]\n\n'
              '[mcp_servers."tensor-plan-server".env]  # its subtable, quoted\nTOKEN = "t"\n\n'
              '[[mcp_servers.tensor-plan-server.tools]]\nname = "a"\n\n[profile]\nmodel = "m"')
    (workspace / ".codex" / "config.toml").write_text(theirs)                 # the user's last line has no newline
    assert tuner("--client", "codex", "--write").returncode == 0
    assert tuner("--client", "codex", "--write").returncode == 0
    toml = (workspace / ".codex" / "config.toml").read_text()
    kept = '[mcp_servers.other]\ncommand = "x"\n\n[profile]\nmodel = "m"\n[mcp_servers.tensor-plan-server]\n'
    assert toml.startswith(kept) and toml.count("[mcp_servers.tensor-plan-server]") == 1 and f'cwd = "{workspace}"' in toml
    servers = tomllib.loads(toml)["mcp_servers"]               # TOML still: the old env and tools tables went with their server
    assert servers["other"] == {"command": "x"} and set(servers["tensor-plan-server"]) == {"command", "args", "env", "cwd"}, toml
    assert servers["tensor-plan-server"]["env"] == {} and servers["tensor-plan-server"]["args"][0].endswith("tensor_plan_server.py")
    for theirs, why in (('[mcp_servers]\ntensor-plan-server = { command = "old" }\n', "in a form the merge does not replace"),
                        ("model = \n", "it is not TOML: Invalid value (at line 1, column 9)")):
        (workspace / ".codex" / "config.toml").write_text(theirs)
        refused = tuner("--client", "codex", "--write")
        assert refused.returncode == 2 and why in refused.stderr and len(refused.stderr.splitlines()) == 1, refused
        assert (workspace / ".codex" / "config.toml").read_text() == theirs
    commented = '{\n  // mine\n  "servers": {}\n}\n'                   # VS Code reads comments; a merge would drop them
    (workspace / ".vscode" / "mcp.json").write_text(commented)
    refused = tuner("--client", "vscode", "--write")
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused
    assert "it is not JSON (Expecting property name enclosed in double quotes, and a merge would drop the comments" in refused.stderr
    assert "'python -m tuner mcp install --client vscode' prints by hand" in refused.stderr
    assert (workspace / ".vscode" / "mcp.json").read_text() == commented
    manifest = workspace / ".harnessgym/mcp/tensor-plan-server/harnessgym-mcp.json"
    data = json.loads(manifest.read_text())
    data["mcpServers"]["tensor-plan-server"]["env"] = {"OMP_NUM_THREADS": "1"}
    for command, started in (("python", sys.executable), ("/opt/tools/bin/python3.11", "/opt/tools/bin/python3.11")):
        data["mcpServers"]["tensor-plan-server"]["command"] = command          # a bare python is this interpreter too
        manifest.write_text(json.dumps(data))
        entry = json.loads(tuner("--client", "claude").stdout)["mcpServers"]["tensor-plan-server"]
        assert entry["env"] == {"OMP_NUM_THREADS": "1"} and entry["command"] == started, entry
    shutil.rmtree(workspace / ".harnessgym")          # a workspace of the installed package: this interpreter's module serves it
    plain = tuner("--client", "claude", options=("--outage-s", "90"))
    assert json.loads(plain.stdout)["mcpServers"]["tensor-plan-server"] == {
        "command": sys.executable, "args": ["-m", "tuner.mcp_server", "--workspace", str(workspace), "--outage-s", "90"], "env": {}}
    (workspace / "kernel_plan.json").unlink()                             # nothing here for a server to serve
    refused = tuner("--client", "claude")
    assert refused.returncode == 2 and not refused.stdout and "holds neither the manifest" in refused.stderr


def test_mcp_install_gives_the_server_the_tuners_history_and_outage_window(workspace, tmp_path):
    """`tuner --history H --outage-s S mcp install` configured a server on the workspace's default history, dropping both
    options without a word; they are the server's now (the history as an absolute URL), and the options of another
    problem, or a history URL with a password that the client file would keep in plain text, are refused."""
    (tmp_path / "elsewhere").mkdir()

    def install(*options):
        return subprocess.run([sys.executable, "-m", "tuner", "--workspace", str(workspace), *options, "mcp", "install", "--client",
                               "claude"], capture_output=True, text=True, env=child_env(), timeout=60, cwd=tmp_path)

    out = install("--history", "elsewhere/h.db", "--outage-s", "90")
    assert out.returncode == 0, out.stderr
    entry = json.loads(out.stdout)["mcpServers"]["tensor-plan-server"]
    history = tmp_path / "elsewhere" / "h.db"
    assert entry["args"][-4:] == ["--history", f"sqlite:///{history}", "--outage-s", "90"]
    searched = subprocess.run([sys.executable, "-m", "tuner", "--workspace", str(workspace), "--history", "elsewhere/h.db",
                               "search_plans", "--max-evals", "5"],
                              capture_output=True, text=True, env=child_env(), timeout=300, cwd=tmp_path)
    assert searched.returncode == 0, searched.stderr

    async def searches() -> list:
        server = StdioServerParameters(command=entry["command"], args=entry["args"], env=child_env(), cwd=str(tmp_path))
        async with Client(server) as client:
            return (await client.call_tool("resume_search_history", {})).structured_content["searches"]

    assert [s["strategy"] for s in anyio.run(searches)] == ["quick"]               # the server reads that history
    for options, fragment in ((("--history", "postgresql+psycopg://tuner:hunter2@db/h"), "holds a password"),
                              (("--objective", "command", "--timeout-s", "5"), "--objective, --timeout-s cannot be given"),
                              (("--space", "space.t1.json"), "--space cannot be given"), (("--repeats", "3"), "--repeats cannot be given")):
        out = install(*options)
        assert out.returncode == 2 and not out.stdout and fragment in out.stderr and "hunter2" not in out.stderr, out.stderr


@pytest.mark.parametrize(("content", "fragment"), [
    (b'{"mcpServers": []}', "not a JSON object whose 'mcpServers' is an object"),
    (b"[]", "not a JSON object whose 'mcpServers' is an object"),
    (b'{"mcpServers": ', "Expecting value"),
    (b"\xff\xfe", "can't decode"),
])
def test_mcp_install_refuses_to_merge_into_a_client_file_it_cannot_read_and_leaves_it_as_it_was(workspace, content, fragment):
    (workspace / ".mcp.json").write_bytes(content)
    out = subprocess.run([sys.executable, "-m", "tuner", "--workspace", str(workspace), "mcp", "install", "--client", "claude", "--write"],
                         capture_output=True, text=True, env=child_env(), timeout=60)
    assert out.returncode == 2 and fragment in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert (workspace / ".mcp.json").read_bytes() == content
