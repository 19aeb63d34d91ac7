"""Hardening: each tool writes only what it declares, typed results, bounded inputs, protocol errors."""

from __future__ import annotations

import json
import stat
import sys
from datetime import datetime
from importlib.metadata import version

import anyio
import jsonschema
import pytest
from conftest import changed_files, child_env, declared_write, workspace_files
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from tuner import service
from tuner import workspace as workspace_module
from tuner.mcp_server import build
from tuner.workspace import Workspace, WorkspaceError

RESULT = "results/out.json"
CALLS = {
    "run_objective": {"mode": "final"},
    "trace_summary": {"plan": "tensor_plan_attempt1_best"},
    "validate_plan": {"plan": "tensor_plan_attempt1_best"},
    "resume_search_history": {"limit": 3},
    "candidate_diff": {"candidate": "tensor_plan_iteration2_neighborhood_best"},
    "benchmark_plan": {"plan": "tensor_plan_attempt1_best"},
    "compare_history": {"limit": 3},
    "rank_experiments": {},
    "repeated_evaluation": {"candidate": "tensor_plan_iteration2_neighborhood_best", "repeats": 3},
    "local_neighborhood_search": {"fixture": "tensor_plan_attempt1_best", "max_evals": 30},
    "bounded_exhaustive_search": {"profile": "iteration3_dev_core", "max_evals": 500},
    "search_plans": {"strategy": "quick", "max_evals": 30, "seed": 1},
    "apply_candidate": {"plan": "tensor_plan_iteration2_neighborhood_best", "dry_run": False},
    "apply_best_verified": {"dry_run": False},
    "export_candidate_fixture": {"name": "from_mcp", "plan": "tensor_plan_attempt1_best"},
    "record_result": {"path": RESULT},
}


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_every_tool_writes_only_what_it_declares_and_its_result_matches_its_schema(workspace):
    async with Client(build(workspace)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == set(CALLS) and set(service.WRITES) >= set(CALLS)
        for name, arguments in CALLS.items():             # read-only tools first: on a workspace with no history yet
            hints, writes = tools[name].annotations, service.WRITES[name]
            assert hints.read_only_hint is (not writes), name
            assert hints.destructive_hint is bool(writes - {"history"}), name
            assert hints.idempotent_hint is (writes <= {"history"}), name             # a search again resumes; nothing else repeats
            assert tools[name].output_schema["properties"], name        # a real schema, not an empty object
            schemas = [tools[name].output_schema, *tools[name].output_schema.get("$defs", {}).values()]
            assert all(s.get("additionalProperties") is False for s in schemas), name     # a key that drifts in is refused
            before = workspace_files(workspace)
            result = await client.call_tool(name, arguments)
            assert not result.is_error, (name, result.content)
            jsonschema.validate(result.structured_content, tools[name].output_schema)
            touched = changed_files(before, workspace_files(workspace))
            assert all(declared_write(name, p, arguments) for p in touched), (name, touched)
            if not writes:
                assert not touched, name
            if name == "search_plans":                     # the history exists now: read-only tools leave its bytes alone
                before = workspace_files(workspace)
                for reader in ("resume_search_history", "compare_history", "rank_experiments"):
                    assert not (await client.call_tool(reader, CALLS[reader])).is_error
                assert not changed_files(before, workspace_files(workspace))
    assert (workspace / RESULT).is_file() and (workspace / "fixtures/from_mcp.json").is_file()


@pytest.mark.anyio
async def test_unknown_tool_is_a_protocol_error_and_server_names_its_version(workspace):
    async with Client(build(workspace)) as client:
        assert client.server_info.version == version("tensor-plan-optimizer")
        with pytest.raises(MCPError) as raised:
            await client.call_tool("no_such_tool", {})
    assert raised.value.code == -32602 and "no_such_tool" in raised.value.message


ARGUMENT_ERRORS = [
    ("run_objective", {"mode": "devx"}, "argument 'mode': input should be 'dev' or 'final', got 'devx'"),
    ("run_objective", {"plan": 5}, "argument 'plan': input should be a valid string or a valid dictionary, got 5"),
    ("run_objective", {"plan": "x" * 600}, "argument 'plan': string should have at most 512 characters, got 'xxxx"),
    ("apply_candidate", {"candidate": "a", "dry_run": "false"},
     "argument 'plan' is required; argument 'dry_run': input should be a valid boolean, got 'false'; "
     "unknown argument 'candidate' (arguments: plan, dry_run, repeats)"),
    ("rank_experiments", {"limit": 3}, "unknown argument 'limit' (rank_experiments takes none)"),          # not "(arguments: )"
    ("benchmark_plan", {"modes": ["x", "y"]}, "argument 'modes': input should be 'dev' or 'final', got 'x'"),   # what is allowed, once
    ("benchmark_plan", {"modes": ["dev", "final", "dev"]}, "argument 'modes': list should have at most 2 items after validation, not 3"),
    ("search_plans", {"seed": 2**31}, "argument 'seed': input should be less than or equal to 2147483647, got 2147483648"),
    ("export_candidate_fixture", {"name": "a", "note": "n" * 501}, "argument 'note': string should have at most 500 characters"),
    ("run_objective", {"plan": {f"k{i}": 1 for i in range(65)}}, "argument 'plan': dictionary should have at most 64 items"),
]


@pytest.mark.anyio
async def test_arguments_that_do_not_fit_a_tool_get_one_line_naming_each_argument_and_what_is_allowed(workspace):
    async with Client(build(workspace)) as client:
        for tool, arguments, expected in ARGUMENT_ERRORS:
            result = await client.call_tool(tool, arguments)
            text = " ".join(getattr(c, "text", "") for c in result.content)
            assert result.is_error and text.startswith(f"Error executing tool {tool}: {expected}"), text
            assert "\n" not in text and "pydantic" not in text and len(text) < 300, text


@pytest.mark.anyio
async def test_a_refusal_reaches_the_client_in_its_own_words_and_a_bug_by_its_class_and_a_short_message(workspace, monkeypatch):
    """An input error is the tool's answer, word for word; anything else (a bug) is named by its class with the first
    300 characters of its message, so that a long one does not flood the client. (The bug is planted in a helper the
    tool looks up when called: a patched tool would stay in the CLI's table of commands if that were imported now.)"""
    from tuner.cli import INPUT_ERRORS

    with pytest.raises(INPUT_ERRORS) as refused:
        service.validate_plan(service.Context.create(workspace), "no_such_fixture")

    def crash(ctx):
        raise RuntimeError("boom " * 100)

    monkeypatch.setattr(service, "_study_bests", crash)
    async with Client(build(workspace)) as client:
        for tool, arguments, expected in (("validate_plan", {"plan": "no_such_fixture"}, str(refused.value)),
                                          ("rank_experiments", {}, "RuntimeError: " + ("boom " * 100)[:300])):
            result = await client.call_tool(tool, arguments)
            assert result.is_error and result.content[0].text == f"Error executing tool {tool}: {expected}"


@pytest.mark.anyio
async def test_a_result_that_does_not_fit_its_schema_is_a_bug_not_the_arguments_fault(workspace, monkeypatch):
    """The SDK raises a result its tool's schema refuses as a pydantic error too, as it does arguments that do not fit;
    only the arguments' are told as such, naming each argument (a bug's result would be blamed on an argument)."""
    monkeypatch.setattr(service, "rank_experiments", lambda ctx: {"ranking": "not a list"})
    async with Client(build(workspace)) as client:
        result = await client.call_tool("rank_experiments", {})
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert result.is_error and text == "Error executing tool rank_experiments", text


@pytest.mark.anyio
async def test_a_search_called_without_a_time_budget_gets_50_seconds_and_its_default_evaluations(workspace, monkeypatch):
    """A client waits 60 s for an answer unless told otherwise, so a search called without ``time_s`` is given 50 s;
    one given a budget gets it, and ``max_evals`` given as null is the tool's default. (The service functions are spied
    on: they record what they were given and refuse.)"""
    from tuner.mcp_server import DEFAULT_SEARCH_SECONDS

    given: list[tuple[str, dict]] = []

    def spy(name):
        def refuse(ctx, **kwargs):
            given.append((name, kwargs))
            raise service.ServiceError("recorded")
        return refuse

    calls = {"local_neighborhood_search": {}, "search_plans": {}, "bounded_exhaustive_search": {"profile": "all"}}
    for name in calls:
        monkeypatch.setattr(service, name, spy(name))
    async with Client(build(workspace)) as client:
        for name, arguments in calls.items():
            for budget in ({}, {"time_s": 7.5, "max_evals": None}):      # an explicit null: the default too
                assert (await client.call_tool(name, arguments | budget)).is_error
    assert DEFAULT_SEARCH_SECONDS == 50.0
    assert [(name, kwargs["time_s"]) for name, kwargs in given] == [(name, s) for name in calls for s in (50.0, 7.5)]
    evals = {"local_neighborhood_search": 2000, "search_plans": 500, "bounded_exhaustive_search": None}
    assert [kwargs["max_evals"] for _, kwargs in given] == [evals[name] for name in calls for _ in range(2)]


@pytest.mark.anyio
async def test_record_result_over_mcp_records_the_tools_the_agent_names_as_used(workspace):
    async with Client(build(workspace)) as client:
        result = await client.call_tool("record_result", {"path": RESULT, "used": ["my_agent_tool"]})
    assert not result.is_error, result.content
    written = json.loads((workspace / RESULT).read_text())["used_harness_tools"]
    assert written == result.structured_content["used_harness_tools"] and "my_agent_tool" in written, written


def test_record_result_writes_only_a_result_file(workspace):
    ctx = service.Context.create(workspace, tool="record_result")
    protected = ["kernel_plan.json", ".harnessgym/mcp/tensor-plan-server/harnessgym-mcp.json", "studies/iteration3_dev_core.json",
                 ".git/config.json", "fixtures/baseline_row_major.json", "tuner/task/kernel_plan.t1.json", ".harnessgym/backups/x.json"]
    (workspace / ".git").mkdir()
    before = workspace_files(workspace)
    for path in protected:
        with pytest.raises(WorkspaceError, match="may not touch"):
            service.record_result(ctx, path)
    (workspace / "notes.json").write_text('{"mine": true}')
    with pytest.raises(WorkspaceError, match="not an earlier result"):
        service.record_result(ctx, "notes.json")
    assert changed_files(before, workspace_files(workspace)) == {"notes.json"}
    first = service.record_result(ctx, RESULT)
    second = service.record_result(ctx, RESULT)
    assert first["backup"] is None and second["backup"].startswith(".harnessgym/backups/results__out.")
    assert json.loads((workspace / second["backup"]).read_text())["plan_hash"] == first["plan_hash"]


def test_export_refuses_to_replace_without_overwrite_and_never_follows_a_symlink(workspace):
    ctx = service.Context.create(workspace, tool="export_candidate_fixture")
    original = (workspace / "fixtures/baseline_row_major.json").read_text()
    before = workspace_files(workspace)
    with pytest.raises(WorkspaceError, match="overwrite=true"):
        service.export_candidate_fixture(ctx, "baseline_row_major", "tensor_plan_attempt1_best")
    assert workspace_files(workspace) == before                         # no backup either: nothing was to be replaced
    replaced = service.export_candidate_fixture(ctx, "baseline_row_major", "tensor_plan_attempt1_best", overwrite=True)
    assert (workspace / replaced["backup"]).read_text() == original
    plan = (workspace / "kernel_plan.json").read_text()
    (workspace / "fixtures/x.json").symlink_to("../kernel_plan.json")
    with pytest.raises(WorkspaceError, match="symlink"):
        service.export_candidate_fixture(ctx, "x", "tensor_plan_iteration2_neighborhood_best", overwrite=True)
    assert (workspace / "kernel_plan.json").read_text() == plan


@pytest.mark.parametrize(("kind", "path"), [
    ("plan", "fixtures/kernel_plan.json"), ("fixture", "fixtures/sub/x.json"), ("fixture", "fixtures/x.txt"),
    ("output", "results/run.sh"), ("output", "results.json"),
    ("result", "vendor/.git/hooks.json"), ("result", "elsewhere/harnessgym-mcp.json")])
def test_each_kind_of_write_may_touch_only_its_own_files(workspace, kind, path):
    """The plan is the workspace's own file; a fixture a .json file in fixtures/ itself; an output a .json or .html
    under results/; a result no file of a nested repository's .git and no MCP manifest, wherever they lie."""
    before = workspace_files(workspace)
    with pytest.raises(WorkspaceError, match=f"{kind} write may not touch"):
        Workspace.at(workspace).write(kind, path, "{}")
    assert workspace_files(workspace) == before


def test_two_backups_made_in_the_same_microsecond_are_both_kept(workspace, monkeypatch):
    """Two writes within the clock's resolution: the second backup does not replace the first, though the time stamp names them alike."""
    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2026, 12, 1, tzinfo=tz)

    monkeypatch.setattr(workspace_module, "datetime", Frozen)
    ws, original = Workspace.at(workspace), (workspace / "kernel_plan.json").read_text()
    first, second = ws.write("plan", "kernel_plan.json", "{}"), ws.write("plan", "kernel_plan.json", original)
    assert first != second and [(workspace / b).read_text() for b in (first, second)] == [original, "{}"]


def test_fixtures_in_a_folder_that_leads_outside_the_workspace_are_not_listed(workspace, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "outside.json").write_text((workspace / "kernel_plan.json").read_text())
    (workspace / ".harnessgym/fixtures").unlink()                   # a link to ../fixtures in the repository
    (workspace / ".harnessgym/fixtures").symlink_to(elsewhere)
    ws = Workspace.at(workspace)
    assert "outside" not in ws.fixture_names() and "baseline_row_major" in ws.fixture_names()
    with pytest.raises(WorkspaceError, match="leads outside the workspace"):
        ws.fixture("outside")


def test_a_tool_writes_nothing_it_did_not_declare(workspace):
    reader = service.Context.create(workspace, tool="rank_experiments")
    with pytest.raises(WorkspaceError, match="not declared"):
        reader.workspace.write("plan", "kernel_plan.json", "{}")
    assert reader.history.read_only and not (workspace / "studies/history.db").exists()
    exporter = service.Context.create(workspace, tool="export_candidate_fixture")
    with pytest.raises(WorkspaceError, match="may not touch"):
        exporter.workspace.write("fixture", "kernel_plan.json", "{}")


def test_apply_and_rollback_keep_the_plan_file_mode(workspace):
    plan = workspace / "kernel_plan.json"
    plan.chmod(0o640)
    service.apply_candidate(service.Context.create(workspace, tool="apply_candidate"), "tensor_plan_iteration2_neighborhood_best",
                            dry_run=False)
    assert stat.S_IMODE(plan.stat().st_mode) == 0o640
    service.rollback(service.Context.create(workspace, tool="rollback"))
    assert stat.S_IMODE(plan.stat().st_mode) == 0o640


HUGE = "x" * 5_000_000
BOUNDED = [
    ("run_objective", {"plan": HUGE}, "plan"),
    ("run_objective", {"plan": {f"k{i}": 1 for i in range(100)}}, "plan"),
    ("search_plans", {"time_s": "inf"}, "time_s"),
    ("search_plans", {"time_s": 1e12}, "time_s"),
    ("search_plans", {"max_evals": 10**9}, "max_evals"),
    ("export_candidate_fixture", {"name": "n", "note": HUGE}, "note"),
    ("record_result", {"used": ["a"] * 1000}, "used"),
    ("trace_summary", {"plan": "y" * 300 + ".json"}, "trace_summary"),
]


@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore:ping is removed")
async def test_huge_and_unbounded_arguments_are_refused_briefly_while_the_server_answers_ping(workspace):
    params = StdioServerParameters(command=sys.executable, args=[".harnessgym/mcp/tensor-plan-server/tensor_plan_server.py"],
                                   env=child_env(), cwd=str(workspace))
    async with Client(params, mode="legacy") as client:              # the initialize handshake, where ping is part of the protocol
        pings = []

        async def ping():
            await client.send_ping()
            pings.append(True)

        for count, (tool, arguments, fragment) in enumerate(BOUNDED, start=1):
            async with anyio.create_task_group() as group:
                group.start_soon(ping)
                result = await client.call_tool(tool, arguments)
            text = " ".join(getattr(c, "text", "") for c in result.content)
            assert result.is_error and fragment in text, (tool, text[:300])
            assert len(text) < 1000 and str(workspace) not in text and "Traceback" not in text
            assert len(pings) == count


def test_the_server_exits_when_stdin_closes_during_a_long_search(workspace):
    import subprocess

    server = subprocess.Popen([sys.executable, ".harnessgym/mcp/tensor-plan-server/tensor_plan_server.py"], cwd=workspace,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=child_env())

    def send(message):
        server.stdin.write((json.dumps(message) + "\n").encode())
        server.stdin.flush()

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
          "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
    assert json.loads(server.stdout.readline())["id"] == 1
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "search_plans", "arguments": {"max_evals": 1_000_000, "time_s": 600}, "_meta": {"progressToken": "p"}}})
    while (line := server.stdout.readline()) and b"notifications/progress" not in line:
        pass
    assert line                                             # the search is under way (it reports progress)
    server.stdin.close()
    assert server.wait(timeout=120) == 0                    # it stops its search and exits, not after 600 s
