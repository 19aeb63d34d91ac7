"""The tensor-plan MCP server: the tool suite agents call, over stdio.

Each tool is a thin face of the service function of the same name: typed, described arguments;
a structured result (the same object ``python -m tuner ... --json`` prints); annotations saying
whether it reads, writes or repeats harmlessly; an error result naming the argument, the value and
what is allowed. Long searches run in a worker thread with a time budget (50 s unless asked, so
a client's 60 s default is not outlived), report progress and stop when the call is cancelled.
Nothing but the protocol goes to stdout; heavy modules load on the first call.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from tuner.workspace import RESULT_PATH

NAME = "tensor-plan-server"
DEFAULT_SEARCH_SECONDS = 50.0

PlanRef = Annotated[str | dict[str, Any] | None, Field(
    description="A fixture name (e.g. 'tensor_plan_iteration2_neighborhood_best'), a JSON file inside the workspace, "
                "or a plan object; omitted: the workspace's kernel_plan.json")]
Mode = Annotated[Literal["dev", "final"], Field(description="dev: fast objective; final: held-out authority")]
DryRun = Annotated[StrictBool, Field(description="true (default): only report what the gate decides; false: write it")]
TimeBudget = Annotated[float | None, Field(gt=0, description="seconds the search may run (default 50)")]
MaxEvals = Annotated[StrictInt | None, Field(gt=0, description="new plans the search may score")]
IncludeFinal = Annotated[StrictBool, Field(description="check the dev winners in final mode too")]


class ToolResult(BaseModel):
    """The service function's result object (keys depend on the tool)."""

    model_config = ConfigDict(extra="allow")


READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
SEARCH = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
CREATE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)


class Server:
    """Tools bound to a workspace and a history database."""

    def __init__(self, workspace: Path, history: str | None = None) -> None:
        self.workspace, self.history = workspace, history

    async def call(self, ctx: Context | None, function: str, /, **kwargs: Any) -> ToolResult:
        """Run ``service.<function>`` in a worker thread; errors become tool errors."""
        stop = threading.Event()
        last = [0.0]

        def progress(done: int, total: int, message: str) -> None:
            if ctx is None or stop.is_set() or time.monotonic() - last[0] < 0.25:
                return
            last[0] = time.monotonic()
            with contextlib.suppress(Exception):       # the call may be gone (cancelled) while the thread winds down
                anyio.from_thread.run(ctx.report_progress, done, total, message)

        def work() -> dict[str, Any]:
            from tuner import service

            context = service.Context.create(self.workspace, self.history, progress=progress, should_stop=stop.is_set)
            return getattr(service, function)(context, **kwargs)

        try:
            result = await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(_message(exc)) from None
        finally:
            stop.set()
        return ToolResult(**result)


def _message(exc: Exception) -> str:
    from tuner.cli import INPUT_ERRORS

    if isinstance(exc, INPUT_ERRORS):
        return str(exc)
    return f"{exc.__class__.__name__}: {exc}"


def build(workspace: Path, history: str | None = None) -> MCPServer:
    """The MCP server for ``workspace`` with every tool registered."""
    server = Server(workspace, history)
    tools: list[Tool] = []

    def tool(annotations: ToolAnnotations) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            made = Tool.from_function(fn, annotations=annotations, structured_output=True)
            model = made.fn_metadata.arg_model                          # refuse unknown arguments
            model.model_config["extra"] = "forbid"
            model.model_rebuild(force=True)
            made.parameters["additionalProperties"] = False
            tools.append(made)
            return fn
        return register

    @tool(READ)
    async def run_objective(ctx: Context, mode: Mode = "dev", plan: PlanRef = None) -> ToolResult:
        """Benchmark a plan (default: kernel_plan.json) in one mode: best_cycles (lower is better), correct, per-case cycles."""
        return await server.call(ctx, "run_objective", mode=mode, plan=plan)

    @tool(READ)
    async def trace_summary(ctx: Context, plan: PlanRef = None, mode: Mode = "dev") -> ToolResult:
        """Where a plan's cycles go: components (bank conflicts, DMA penalties, spills, scratchpad pressure...), the
        hotspot case, register/scratchpad pressure, DMA efficiency and synergies."""
        return await server.call(ctx, "trace_summary", plan=plan, mode=mode)

    @tool(READ)
    async def validate_plan(ctx: Context, plan: PlanRef = None) -> ToolResult:
        """Check a plan against the schema and feasibility in both modes, with actionable reasons."""
        return await server.call(ctx, "validate_plan", plan=plan)

    @tool(READ)
    async def resume_search_history(ctx: Context, limit: Annotated[StrictInt, Field(gt=0, le=100, description="seeds to list")] = 5
                                    ) -> ToolResult:
        """Best seeds from fixtures and history (verified in both modes) and the searches already run."""
        return await server.call(ctx, "resume_search_history", limit=limit)

    @tool(SEARCH)
    async def local_neighborhood_search(
        ctx: Context,
        fixture: Annotated[str | None, Field(description="fixture to start from, e.g. tensor_plan_iteration2_neighborhood_best")] = None,
        plan: PlanRef = None,
        strategy: Annotated[Literal["checkpoint", "focused"], Field(
            description="checkpoint: steps through singles, learned joint and repaired moves, then pairs and a bounded grid; "
                        "focused: sweep around the best")] = "checkpoint",
        include_final: IncludeFinal = True, max_evals: MaxEvals = 2000, time_s: TimeBudget = None,
    ) -> ToolResult:
        """Local search around a fixture or plan: first-improvement steps through single mutations, joint moves of
        knob pairs learned to interact and repaired infeasible moves, then pairs and a bounded grid, repeated until no neighbour
        improves. Resumes and reuses the history cache."""
        return await server.call(ctx, "local_neighborhood_search", fixture=fixture, plan=plan, strategy=strategy,
                                 include_final=include_final, max_evals=max_evals or 2000, time_s=time_s or DEFAULT_SEARCH_SECONDS)

    @tool(SEARCH)
    async def bounded_exhaustive_search(
        ctx: Context,
        profile: Annotated[str, Field(description="profile name in studies/: iteration3_dev_core or iteration3_layout_relaxed")],
        max_evals: MaxEvals = None, include_final: IncludeFinal = True, time_s: TimeBudget = None,
    ) -> ToolResult:
        """Score every plan of a named profile in batches (resumable); include_final checks the dev winners in final mode."""
        return await server.call(ctx, "bounded_exhaustive_search", profile=profile, max_evals=max_evals,
                                 include_final=include_final, time_s=time_s or DEFAULT_SEARCH_SECONDS)

    @tool(SEARCH)
    async def search_plans(
        ctx: Context,
        strategy: Annotated[Literal["quick", "focused"],
                            Field(description="quick: seeded TPE + polish; focused: sweep around the best")] = "quick",
        max_evals: MaxEvals = 500, time_s: TimeBudget = None,
        seed: Annotated[StrictInt, Field(ge=0, description="random seed (quick)")] = 0, include_final: IncludeFinal = True,
    ) -> ToolResult:
        """Broader search: quick (Optuna TPE, seeded, then local polish) or focused (deterministic sweep around the best region)."""
        return await server.call(ctx, "search_plans", strategy=strategy, max_evals=max_evals or 500,
                                 time_s=time_s or DEFAULT_SEARCH_SECONDS, seed=seed, include_final=include_final)

    @tool(READ)
    async def candidate_diff(ctx: Context, candidate: Annotated[str | dict[str, Any], Field(description="fixture, file or plan object")],
                             against: PlanRef = None) -> ToolResult:
        """Knobs that differ between a candidate and a plan (default: kernel_plan.json), with dev/final deltas."""
        return await server.call(ctx, "candidate_diff", candidate=candidate, against=against)

    @tool(READ)
    async def benchmark_plan(ctx: Context, plan: PlanRef = None,
                             modes: Annotated[list[Literal["dev", "final"]] | None, Field(description="default ['dev', 'final']")] = None
                             ) -> ToolResult:
        """Benchmark a plan in several modes; correct_in_all says whether it passes everywhere."""
        return await server.call(ctx, "benchmark_plan", plan=plan, modes=modes)

    @tool(WRITE)
    async def apply_candidate(ctx: Context, plan: Annotated[str | dict[str, Any], Field(description="fixture, file or plan object")],
                              dry_run: DryRun = True) -> ToolResult:
        """Gate a candidate (correct in both modes, better dev, final not worse) and, with dry_run=false, write it to
        kernel_plan.json atomically with a timestamped backup."""
        return await server.call(ctx, "apply_candidate", plan=plan, dry_run=dry_run)

    @tool(WRITE)
    async def apply_best_verified(ctx: Context, dry_run: DryRun = True) -> ToolResult:
        """Apply the best fixture or history plan that passes the gate (dry run unless dry_run=false)."""
        return await server.call(ctx, "apply_best_verified", dry_run=dry_run)

    @tool(CREATE)
    async def export_candidate_fixture(
        ctx: Context, name: Annotated[str, Field(description="fixture name: letters, digits, '_', '-', '.'")],
        plan: PlanRef = None, note: Annotated[str, Field(max_length=500, description="provenance note")] = "",
    ) -> ToolResult:
        """Write fixtures/NAME.json with the plan, its metrics in both modes and its provenance, to seed the next attempt."""
        return await server.call(ctx, "export_candidate_fixture", name=name, plan=plan, note=note)

    @tool(READ)
    async def compare_history(ctx: Context, limit: Annotated[StrictInt, Field(gt=0, le=100, description="rows")] = 10) -> ToolResult:
        """The current plan beside fixtures and every study's best, so the best explored candidate is not lost."""
        return await server.call(ctx, "compare_history", limit=limit)

    @tool(READ)
    async def rank_experiments(ctx: Context) -> ToolResult:
        """Studies ranked by their best verified final best_cycles."""
        return await server.call(ctx, "rank_experiments")

    @tool(CREATE)
    async def record_result(
        ctx: Context,
        path: Annotated[str, Field(description="result JSON inside the workspace")] = RESULT_PATH,
        used: Annotated[list[str] | None, Field(description="extra tool names to record as used")] = None,
    ) -> ToolResult:
        """Run the final benchmark and write the iteration result (metrics.best_cycles = metrics.score) with the tools used."""
        return await server.call(ctx, "record_result", path=path, tools=used)

    return MCPServer(NAME, instructions="Tune kernel_plan.json: best_cycles is lower-is-better; dev is the fast objective, "
                                        "final the authority; correctness needs max_abs <= 2.5e-4 in both modes.", tools=tools)


READ_ONLY_TOOLS = ("run_objective", "trace_summary", "validate_plan", "resume_search_history", "candidate_diff",
                   "benchmark_plan", "compare_history", "rank_experiments")
SELF_TEST_ARGS: dict[str, dict[str, Any]] = {"candidate_diff": {"candidate": "kernel_plan.json"}}


async def self_test(workspace: Path, history: str | None) -> int:
    """List the tools, call every read-only tool on the workspace's plan; one pass/fail line each."""
    import tempfile

    from mcp import Client

    history = history or str(Path(tempfile.mkdtemp(prefix="tensor-plan-selftest-")) / "history.db")
    failures = 0
    async with Client(build(workspace, history)) as client:
        tools = (await client.list_tools()).tools
        names = {t.name for t in tools}
        print(f"{len(tools)} tools: {', '.join(sorted(names))}")
        for name in READ_ONLY_TOOLS:
            started = time.monotonic()
            if name not in names:
                failures += 1
                print(f"FAIL {name}: not listed")
                continue
            result = await client.call_tool(name, SELF_TEST_ARGS.get(name, {}))
            ok = not result.is_error and result.structured_content is not None
            failures += not ok
            detail = "" if ok else ": " + " ".join(getattr(c, "text", "") for c in result.content)[:200]
            print(f"{'PASS' if ok else 'FAIL'} {name} ({time.monotonic() - started:.2f} s){detail}")
    print("self-test " + ("passed" if not failures else f"failed: {failures} tool(s)"))
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tensor_plan_server", description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", default=".", help="workspace root (default: the current folder)")
    parser.add_argument("--history", default=None, help="history file or URL (default: WORKSPACE/studies/history.db)")
    parser.add_argument("--self-test", action="store_true", help="list the tools and call the read-only ones")
    args = parser.parse_args(argv)
    workspace = Path(args.workspace).resolve()
    if not (workspace / "kernel_plan.json").is_file():
        print(f"tensor_plan_server: error: no kernel_plan.json in {workspace}", file=sys.stderr)
        return 2
    if args.self_test:
        return anyio.run(self_test, workspace, args.history)
    build(workspace, args.history).run("stdio")
    return 0
