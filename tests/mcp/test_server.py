"""The MCP server over real stdio with the SDK's client: schemas, every tool, hostile arguments."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env, reading, scored_in, until
from mcp import Client, StdioServerParameters
from mcp.types import LATEST_PROTOCOL_VERSION

TOOLS = {"run_objective", "trace_summary", "validate_plan", "resume_search_history", "local_neighborhood_search",
         "bounded_exhaustive_search", "search_plans", "candidate_diff", "benchmark_plan", "apply_candidate",
         "apply_best_verified", "export_candidate_fixture", "compare_history", "rank_experiments", "record_result", "repeated_evaluation"}

VALID = {
    "run_objective": {"mode": "final"},
    "trace_summary": {"plan": "tensor_plan_attempt1_best"},
    "validate_plan": {"plan": {"block_m": 3}},
    "resume_search_history": {"limit": 3},
    "local_neighborhood_search": {"fixture": "tensor_plan_attempt1_best", "max_evals": 60, "include_final": True},
    "bounded_exhaustive_search": {"profile": "iteration3_dev_core", "max_evals": 262144, "include_final": False},
    "search_plans": {"strategy": "quick", "max_evals": 40, "seed": 1},
    "candidate_diff": {"candidate": "tensor_plan_iteration2_neighborhood_best"},
    "benchmark_plan": {"plan": "tensor_plan_attempt1_best", "modes": ["dev", "final"]},
    "apply_candidate": {"plan": "tensor_plan_attempt1_best"},
    "apply_best_verified": {},
    "export_candidate_fixture": {"name": "from_mcp", "plan": "tensor_plan_attempt1_best"},
    "compare_history": {"limit": 3},
    "rank_experiments": {},
    "record_result": {"path": "results/out.json"},
    "repeated_evaluation": {"candidate": "tensor_plan_iteration2_neighborhood_best", "repeats": 3},
}

BAD = {
    "run_objective": ({"mode": "fast"}, "mode"),
    "trace_summary": ({"plan": "../../etc/passwd"}, "outside the workspace"),
    "validate_plan": ({"plan": 42}, "plan"),
    "resume_search_history": ({"limit": "5"}, "limit"),
    "local_neighborhood_search": ({"fixture": "../fixtures/x"}, "not allowed"),
    "bounded_exhaustive_search": ({"profile": "../../studies/x"}, "not allowed"),
    "search_plans": ({"strategy": "grid"}, "strategy"),
    "candidate_diff": ({"candidate": "/etc/passwd"}, "outside the workspace"),
    "benchmark_plan": ({"modes": ["dev", "turbo"]}, "modes"),
    "apply_candidate": ({"plan": "tensor_plan_iteration2_neighborhood_best", "dry_run": "false"}, "dry_run"),
    "apply_best_verified": ({"dry_run": 0}, "dry_run"),
    "export_candidate_fixture": ({"name": "../../evil"}, "not allowed"),
    "compare_history": ({"limit": -1}, "limit"),
    "rank_experiments": ({"extra": True}, "extra"),
    "record_result": ({"path": "/tmp/elsewhere.json"}, "outside the workspace"),
    "repeated_evaluation": ({"candidate": "tensor_plan_attempt1_best", "repeats": 1}, "repeats"),
}


def params(workspace: Path) -> StdioServerParameters:
    manifest = json.loads((workspace / ".harnessgym/mcp/tensor-plan-server/harnessgym-mcp.json").read_text())
    entry = manifest["mcpServers"]["tensor-plan-server"]
    return StdioServerParameters(command=entry["command"], args=entry["args"], env=child_env(), cwd=str(workspace))


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "studies" not in p.parts and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(root)).encode() + path.read_bytes())
    return digest.hexdigest()


@pytest.mark.anyio
async def test_tools_are_listed_with_schemas_and_annotations(workspace):
    async with Client(params(workspace)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and tool.output_schema is not None
        assert tool.input_schema.get("additionalProperties") is False
        for name, prop in tool.input_schema.get("properties", {}).items():
            assert prop.get("description"), (tool.name, name)
    assert tools["run_objective"].annotations.read_only_hint is True
    assert tools["apply_candidate"].annotations.destructive_hint is True
    assert tools["apply_candidate"].input_schema["properties"]["dry_run"]["default"] is True
    assert tools["search_plans"].annotations.read_only_hint is False


@pytest.mark.anyio
async def test_every_tool_with_valid_then_bad_arguments(workspace):
    plan_before = (workspace / "kernel_plan.json").read_bytes()
    async with Client(params(workspace), read_timeout_seconds=300) as client:
        for name, arguments in VALID.items():
            result = await client.call_tool(name, arguments)
            assert not result.is_error, (name, result.content)
            assert isinstance(result.structured_content, dict), name
        digest = tree_digest(workspace)
        for name, (arguments, fragment) in BAD.items():
            result = await client.call_tool(name, arguments)
            text = " ".join(getattr(c, "text", "") for c in result.content)
            assert result.is_error and fragment in text, (name, text)
            assert "Traceback" not in text
        assert tree_digest(workspace) == digest                           # hostile calls changed nothing
    assert (workspace / "kernel_plan.json").read_bytes() == plan_before   # dry_run omitted: nothing applied
    assert json.loads((workspace / "results/out.json").read_text())["metrics"]["score"] > 0
    validated = VALID["validate_plan"]
    assert validated == {"plan": {"block_m": 3}}


@pytest.mark.anyio
async def test_results_match_the_cli_objects(workspace):
    from conftest import OVERFLOWING

    from tuner import service

    crowded = json.loads((workspace / "kernel_plan.json").read_text()) | OVERFLOWING        # a plan that cannot run: reasons
    async with Client(params(workspace)) as client:
        result = await client.call_tool("run_objective", {"mode": "dev", "plan": "tensor_plan_attempt1_best"})
        diff = await client.call_tool("candidate_diff", {"candidate": crowded})
    direct = service.run_objective(service.Context.create(workspace), "dev", "tensor_plan_attempt1_best")
    assert result.structured_content == json.loads(json.dumps(direct))
    direct = service.candidate_diff(service.Context.create(workspace), crowded)
    assert not diff.is_error and diff.structured_content == json.loads(json.dumps(direct)), diff.content
    assert all(m["candidate_reason"] for m in diff.structured_content["metrics"].values())


@pytest.mark.anyio
async def test_long_search_reports_progress(workspace):
    seen = []

    async def progress(done, total, message):
        seen.append((done, total, message))

    async with Client(params(workspace), read_timeout_seconds=300) as client:
        result = await client.call_tool("bounded_exhaustive_search", {"profile": "iteration3_layout_relaxed", "include_final": False},
                                        progress_callback=progress)
    assert not result.is_error and result.structured_content["stopped"] == "exhausted"
    assert seen and seen[-1][1] == 1_990_656


def test_a_server_for_a_folder_without_a_plan_refuses_to_start_in_one_line(tmp_path):
    (tmp_path / "studies").mkdir()                                          # a folder, but no kernel_plan.json to serve
    out = subprocess.run([sys.executable, "-m", "tuner.mcp_server", "--workspace", str(tmp_path)], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, env=child_env(), timeout=120)
    assert out.returncode == 2 and out.stdout == "", out
    assert out.stderr == f"tensor_plan_server: error: no kernel_plan.json in {tmp_path.resolve()}\n"
    assert [p.name for p in tmp_path.iterdir()] == ["studies"] and not any((tmp_path / "studies").iterdir())


def test_self_test_passes_and_says_which_tools_fail(workspace):
    import subprocess

    def self_test() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, ".harnessgym/mcp/tensor-plan-server/tensor_plan_server.py", "--self-test"],
                              cwd=workspace, capture_output=True, text=True, env=child_env(), timeout=300)

    out = self_test()
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("PASS ") == 8 and "FAIL" not in out.stdout and "self-test passed" in out.stdout
    (workspace / "kernel_plan.json").write_text('{"block_m": 3}')                      # a plan no tool can read
    out = self_test()
    failed = out.stdout.count("FAIL ")
    assert out.returncode == 1 and "FAIL run_objective" in out.stdout and failed > 1, out.stdout + out.stderr
    assert out.stdout.rstrip().endswith(f"self-test failed: {failed} tool(s)")


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_cancelled_search_stops_in_the_server(workspace):
    import sqlite3

    import anyio

    def sweep():
        try:
            with reading(workspace / "studies" / "history.db") as conn:
                return conn.execute("select state, evaluations from tuner_sweeps").fetchone()
        except sqlite3.OperationalError:
            return None

    async with Client(params(workspace)) as client:
        with anyio.move_on_after(4):
            await client.call_tool("search_plans", {"strategy": "quick", "max_evals": 1_000_000, "time_s": 120})
        with anyio.fail_after(100):                             # the worker writes its last record once it sees the stop
            while (record := sweep()) is None or record[0] != "cancelled":
                await anyio.sleep(0.05)
        result = await client.call_tool("run_objective", {})    # the server still answers
        assert not result.is_error
        assert sweep() == record and record[1] < 1_000_000      # and nothing more was scored after the cancel


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stopped_server_lets_the_search_in_flight_save_and_says_so_in_one_line(workspace, stop):
    """A client ends its server with SIGTERM, a user's Ctrl-C ends one run by hand, a closed terminal sends SIGHUP: the
    call in flight is cancelled, its search saves its state, and the server exits 128 + the signal with one line (Ctrl-C
    printed a traceback, and SIGTERM killed the search mid-write, leaving it 'running')."""
    entry = params(workspace)
    server = subprocess.Popen([entry.command, *entry.args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=entry.env, cwd=entry.cwd)
    for message in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": LATEST_PROTOCOL_VERSION,
                     "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}},
                    {"jsonrpc": "2.0", "method": "notifications/initialized"},
                    {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": "search_plans", "arguments": {"max_evals": 1_000_000, "time_s": 120}}}):
        server.stdin.write(json.dumps(message) + "\n")
        server.stdin.flush()
    database = workspace / "studies" / "history.db"
    assert until(lambda: scored_in(database) > 0, server)   # the search is under way
    server.send_signal(stop)
    _, err = server.communicate(timeout=120)
    assert server.returncode == 128 + stop and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    with reading(database) as connection:
        assert connection.execute("select state from tuner_sweeps").fetchall() == [("cancelled",)]


@pytest.mark.anyio
async def test_a_history_that_fails_mid_search_ends_the_call_after_the_servers_outage_s(workspace, postgres_server, postgres_url):
    """``--outage-s`` reaches the calls: a search in flight whose PostgreSQL history goes away is an error result once the
    server's window has passed, saying how long it waited, and the server answers calls again once the history is back."""
    import anyio

    entry = params(workspace)
    server = StdioServerParameters(command=entry.command, args=[*entry.args, "--history", postgres_url, "--outage-s", "1"],
                                   env=entry.env, cwd=entry.cwd)
    under_way, ended, result = anyio.Event(), anyio.Event(), {}

    async def progress(done, total, message):
        under_way.set()

    async def search(client):
        result["search"] = await client.call_tool("search_plans", {"max_evals": 1_000_000, "time_s": 600}, progress_callback=progress)
        ended.set()

    async with Client(server, read_timeout_seconds=300) as client:
        async with anyio.create_task_group() as group:
            group.start_soon(search, client)
            await under_way.wait()
            postgres_server.stop()
            try:
                with anyio.fail_after(120):
                    await ended.wait()              # the history is gone while the call waits for it
            finally:
                postgres_server.start()
        after = await client.call_tool("resume_search_history", {})
    text = " ".join(getattr(c, "text", "") for c in result["search"].content)
    assert result["search"].is_error and "kept failing for 1 s" in text and "Traceback" not in text, text
    assert not after.is_error and after.structured_content["searches"][0]["strategy"] == "quick"
