"""The tensor-plan MCP server: the tool suite agents call, over stdio.

Each tool is a thin face of the service function of the same name: typed, described and bounded
arguments; a typed result (:mod:`tuner.mcp_results`, the same object ``python -m tuner ... --json``
prints) published as its ``outputSchema``; annotations derived from what the tool declares it writes
(``tuner.service.WRITES``); an error result naming the argument, a short prefix of the value and what
is allowed. Long searches run in a worker thread with a time budget (50 s unless asked, so a client's
60 s default is not outlived), report progress and stop when the call is cancelled. An unknown tool
gets the protocol error ``-32602``. Nothing but the protocol goes to stdout; heavy modules load on
the first call.
"""

from __future__ import annotations

import tuner

if __name__ == "__main__":                  # python -m tuner.mcp_server
    tuner.quiet_ctrl_c_while_loading()

import contextlib
import signal
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
from mcp.shared.exceptions import MCPError
from mcp.types import ToolAnnotations
from mcp_types import INVALID_PARAMS
from pydantic import Field, StrictBool, StrictInt, StrictStr, ValidationError

from tuner import Parser, package_version, positive_number
from tuner import mcp_results as R
from tuner.stopping import described
from tuner.workspace import LIMITS, MAX_PATH_CHARS, RESULT_PATH, SERVER_NAME, quoted

DEFAULT_SEARCH_SECONDS = 50.0
MAX_PLAN_KNOBS = 64                  # keys a plan object may have
MAX_NOTE = 500                       # characters of a provenance note
MAX_NAME = 100                       # characters of a fixture, profile or tool name

Reference = Annotated[StrictStr, Field(max_length=MAX_PATH_CHARS)]          # a fixture name or a file in the workspace
PlanObject = Annotated[dict[str, Any], Field(max_length=MAX_PLAN_KNOBS)]
PlanRef = Annotated[Reference | PlanObject | None, Field(
    description="A fixture name (e.g. 'tensor_plan_iteration2_neighborhood_best'), a JSON file inside the workspace, "
                f"or a plan object; omitted: the workspace's kernel_plan.json (a path up to {MAX_PATH_CHARS} characters, "
                f"an object up to {MAX_PLAN_KNOBS} knobs)")]
CandidateRef = Annotated[Reference | PlanObject, Field(description="fixture, file or plan object")]
Mode = Annotated[Literal["dev", "final"], Field(description="dev: fast objective; final: held-out authority")]
DryRun = Annotated[StrictBool, Field(description="true (default): only report what the gate decides; false: write it")]
TimeBudget = Annotated[float | None, Field(gt=0, le=LIMITS["time_s"], allow_inf_nan=False, strict=True,
                                           description=f"seconds the search may run (default 50, at most {LIMITS['time_s']:,})")]
MaxEvals = Annotated[StrictInt | None, Field(gt=0, le=LIMITS["max_evals"],
                                             description=f"new plans the search may score (at most {LIMITS['max_evals']:,})")]
IncludeFinal = Annotated[StrictBool, Field(description="check the dev winners in final mode too, except by benchmark runs past the "
                                                  "time budget or a cancel")]
Name = Annotated[StrictStr, Field(max_length=MAX_NAME, description="letters, digits, '_', '-', '.'")]
Repeats = Annotated[StrictInt, Field(ge=1, le=LIMITS["repeats"], description="measurements per plan and mode; above 1, values are "
                                                                             "medians (for noisy benchmarks; default 1)")]
Rows = Annotated[StrictInt, Field(gt=0, le=LIMITS["limit"], description=f"rows to list (at most {LIMITS['limit']})")]


def annotations(tool: str) -> ToolAnnotations:
    """The hints of ``tool``, from what it declares it writes (``tuner.service.WRITES``): read-only when
    nothing; destructive when it may replace a workspace file (always keeping a backup); idempotent when
    it only adds to the history (a repeated search resumes)."""
    from tuner.service import WRITES

    writes = WRITES[tool]
    return ToolAnnotations(read_only_hint=not writes, destructive_hint=bool(writes - {"history"}),
                           idempotent_hint=writes <= {"history"}, open_world_hint=False)


class Server:
    """Tools bound to a workspace and a history database (tried again for ``outage_s`` while it fails)."""

    def __init__(self, workspace: Path, history: str | None = None, outage_s: float | None = None) -> None:
        self.workspace, self.history, self.outage_s = workspace, history, outage_s

    async def call(self, ctx: Context | None, function: str, /, **kwargs: Any) -> Any:
        """Run ``service.<function>`` in a worker thread; errors become tool errors. The result is the
        service's object, which the SDK validates against the tool's result model."""
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

            context = service.Context.create(self.workspace, self.history, tool=function, progress=progress, should_stop=stop.is_set,
                                             outage_s=self.outage_s)
            try:
                return getattr(service, function)(context, **kwargs)
            finally:
                context.close()

        try:
            return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(_message(exc, self.workspace)) from None
        finally:
            stop.set()


def _message(exc: Exception, workspace: Path) -> str:
    """The error text a client sees: input errors as they are (short value prefixes, workspace-relative
    paths); anything else by its class and a short message with no path of this machine (a file of the
    workspace is named by its path there)."""
    from tuner.cli import INPUT_ERRORS

    if isinstance(exc, INPUT_ERRORS):
        return str(exc)
    if isinstance(exc, OSError):
        try:
            where = f": {Path(exc.filename).resolve().relative_to(workspace.resolve()).as_posix()}"
        except (TypeError, ValueError):                 # no file named, or one outside the workspace
            where = ""
        return f"{exc.__class__.__name__}: {exc.strerror or 'operating system error'}{where}"
    return f"{exc.__class__.__name__}: {str(exc)[:300]}"


def _argument_errors(tool: Tool, exc: ValidationError) -> str:
    """One line for arguments that do not fit ``tool``'s schema: each argument named, with what it got (a short
    prefix) and what is allowed; an unknown one with the arguments there are. Of a union (a plan given as a
    reference or an object), only the branch of the value's own type speaks, unless none is of its type."""
    by_argument: dict[str, list[Any]] = {}
    for error in exc.errors():
        by_argument.setdefault(str(error["loc"][0]), []).append(error)
    parts = []
    for argument, errors in by_argument.items():
        kind = errors[0]["type"]
        if kind == "missing":
            parts.append(f"argument {argument!r} is required")
        elif kind == "extra_forbidden":
            known = ", ".join(tool.parameters["properties"])
            parts.append(f"unknown argument {argument!r} " + (f"(arguments: {known})" if known else f"({tool.name} takes none)"))
        else:
            fitting = [e for e in errors if not e["type"].endswith("_type")] or errors
            said = list(dict.fromkeys(e["msg"] for e in fitting))
            if all(m.startswith("Input should be ") for m in said):
                allowed = "input should be " + " or ".join(m.removeprefix("Input should be ") for m in said)
            else:
                allowed = "; ".join(m[0].lower() + m[1:] for m in said)
            parts.append(f"argument {argument!r}: {allowed}, got {quoted(errors[0]['input'])}")
    return f"Error executing tool {tool.name}: " + "; ".join(parts)


class _Server(MCPServer):
    """The SDK's server, answering an unknown tool with the protocol error the MCP spec asks for, and arguments
    that do not fit a tool's schema with one line (:func:`_argument_errors`) instead of pydantic's report."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if (tool := self._tool_manager.get_tool(name)) is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {quoted(name)}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if type(exc) is not ToolError or not isinstance(exc.__cause__, ValidationError):    # not the arguments' fault
                raise
            raise ToolError(_argument_errors(tool, exc.__cause__)) from exc.__cause__


def build(workspace: Path, history: str | None = None, outage_s: float | None = None) -> MCPServer:
    """The MCP server for ``workspace`` with every tool registered."""
    server = Server(workspace, history, outage_s)
    tools: list[Tool] = []

    def tool(fn: Callable[..., Any]) -> Callable[..., Any]:
        made = Tool.from_function(fn, annotations=annotations(fn.__name__), structured_output=True)
        model = made.fn_metadata.arg_model                          # refuse unknown arguments
        model.model_config["extra"] = "forbid"
        model.model_rebuild(force=True)
        made.parameters["additionalProperties"] = False
        tools.append(made)
        return fn

    @tool
    async def run_objective(ctx: Context, mode: Mode = "dev", plan: PlanRef = None) -> R.RunObjectiveResult:
        """Benchmark a plan (default: kernel_plan.json) in one mode: best_cycles (lower is better), correct, per-case cycles."""
        return await server.call(ctx, "run_objective", mode=mode, plan=plan)

    @tool
    async def trace_summary(ctx: Context, plan: PlanRef = None, mode: Mode = "dev") -> R.TraceSummaryResult:
        """Where a plan's cycles go: components (bank conflicts, DMA penalties, spills, scratchpad pressure...), the
        hotspot case, register/scratchpad pressure, DMA efficiency and synergies."""
        return await server.call(ctx, "trace_summary", plan=plan, mode=mode)

    @tool
    async def validate_plan(ctx: Context, plan: PlanRef = None) -> R.ValidatePlanResult:
        """Check a plan against the schema and feasibility in both modes, with actionable reasons."""
        return await server.call(ctx, "validate_plan", plan=plan)

    @tool
    async def resume_search_history(ctx: Context, limit: Rows = 5) -> R.ResumeResult:
        """Best seeds: fixtures (measured in both modes) and history (final where a search checked it); the searches already run."""
        return await server.call(ctx, "resume_search_history", limit=limit)

    @tool
    async def local_neighborhood_search(
        ctx: Context,
        fixture: Annotated[StrictStr | None, Field(
            max_length=MAX_NAME, description="fixture to start from, e.g. tensor_plan_iteration2_neighborhood_best")] = None,
        plan: PlanRef = None,
        strategy: Annotated[Literal["checkpoint", "focused"], Field(
            description="checkpoint: steps through singles, learned joint and repaired moves, then pairs and a bounded grid; "
                        "focused: sweep around the best")] = "checkpoint",
        include_final: IncludeFinal = True, max_evals: MaxEvals = 2000, time_s: TimeBudget = None,
    ) -> R.LocalSearchResult:
        """Local search around a fixture or plan: first-improvement steps through single mutations, joint moves of
        knob pairs learned to interact and repaired infeasible moves, then pairs and a bounded grid, repeated until no neighbour
        improves. Resumes and reuses the history cache."""
        return await server.call(ctx, "local_neighborhood_search", fixture=fixture, plan=plan, strategy=strategy,
                                 include_final=include_final, max_evals=max_evals or 2000, time_s=time_s or DEFAULT_SEARCH_SECONDS)

    @tool
    async def bounded_exhaustive_search(
        ctx: Context,
        profile: Annotated[StrictStr, Field(max_length=MAX_NAME,
                                            description="profile name: the tensor plan's iteration3_dev_core or "
                                                        "iteration3_layout_relaxed, a studies/NAME.json of the workspace, "
                                                        "or 'all'")],
        max_evals: MaxEvals = None, include_final: IncludeFinal = True, time_s: TimeBudget = None,
    ) -> R.ExhaustiveSearchResult:
        """Score every plan of a named profile in batches (resumable); include_final checks the dev winners in final mode."""
        return await server.call(ctx, "bounded_exhaustive_search", profile=profile, max_evals=max_evals,
                                 include_final=include_final, time_s=time_s or DEFAULT_SEARCH_SECONDS)

    @tool
    async def search_plans(
        ctx: Context,
        strategy: Annotated[Literal["quick", "bayes", "focused"],
                            Field(description="quick: seeded TPE + polish; bayes: Gaussian-process Bayesian optimisation; "
                                              "focused: sweep around the best")] = "quick",
        max_evals: MaxEvals = 500, time_s: TimeBudget = None,
        seed: Annotated[StrictInt, Field(ge=0, le=2**31 - 1, description="random seed (quick, bayes)")] = 0,
        include_final: IncludeFinal = True,
    ) -> R.SearchResult:
        """Broader search: quick (Optuna TPE, seeded, then local polish), bayes (Gaussian-process Bayesian optimisation,
        seeded) or focused (deterministic sweep around the best region)."""
        return await server.call(ctx, "search_plans", strategy=strategy, max_evals=max_evals or 500,
                                 time_s=time_s or DEFAULT_SEARCH_SECONDS, seed=seed, include_final=include_final)

    @tool
    async def candidate_diff(ctx: Context, candidate: CandidateRef, against: PlanRef = None) -> R.CandidateDiffResult:
        """Knobs that differ between a candidate and a plan (default: kernel_plan.json), with dev/final deltas."""
        return await server.call(ctx, "candidate_diff", candidate=candidate, against=against)

    @tool
    async def benchmark_plan(
        ctx: Context, plan: PlanRef = None,
        modes: Annotated[list[Literal["dev", "final"]] | None, Field(max_length=2, description="default ['dev', 'final']")] = None,
        repeats: Repeats = 1,
    ) -> R.BenchmarkPlanResult:
        """Benchmark a plan in several modes; correct_in_all says whether it passes everywhere. With repeats > 1, also the
        median, spread and 95% interval of that many measurements per mode."""
        return await server.call(ctx, "benchmark_plan", plan=plan, modes=modes, repeats=repeats)

    @tool
    async def repeated_evaluation(
        ctx: Context, candidate: CandidateRef, against: PlanRef = None,
        repeats: Annotated[StrictInt, Field(ge=2, le=LIMITS["repeats"], description="measurements per plan and mode (default 5)")] = 5,
    ) -> R.RepeatedEvaluationResult:
        """Measure a candidate and a plan (default kernel_plan.json) repeats times in each mode: medians, spreads, 95% intervals,
        and whether the candidate is significantly faster (bootstrap interval of the ratio of medians below 1)."""
        return await server.call(ctx, "repeated_evaluation", candidate=candidate, against=against, repeats=repeats)

    @tool
    async def apply_candidate(ctx: Context, plan: CandidateRef, dry_run: DryRun = True, repeats: Repeats = 1) -> R.GateResult:
        """Gate a candidate (correct in both modes, better dev, final not worse; with repeats > 1, medians and a final improvement
        significant at 95%) and, with dry_run=false, write it to kernel_plan.json atomically with a timestamped backup."""
        return await server.call(ctx, "apply_candidate", plan=plan, dry_run=dry_run, repeats=repeats)

    @tool
    async def apply_best_verified(ctx: Context, dry_run: DryRun = True, repeats: Repeats = 1) -> R.GateResult:
        """Apply the best fixture or history plan that passes the gate (dry run unless dry_run=false; repeats as apply_candidate)."""
        return await server.call(ctx, "apply_best_verified", dry_run=dry_run, repeats=repeats)

    @tool
    async def export_candidate_fixture(
        ctx: Context, name: Name, plan: PlanRef = None,
        note: Annotated[StrictStr, Field(max_length=MAX_NOTE, description="provenance note")] = "",
        overwrite: Annotated[StrictBool, Field(description="replace an existing fixture (its backup is kept); default false")] = False,
    ) -> R.ExportResult:
        """Write a new fixtures/NAME.json with the plan, its metrics in both modes and its provenance, to seed the next attempt.
        A plan that does not run correct in both modes is an error. An existing fixture is replaced only with overwrite=true,
        keeping a backup."""
        return await server.call(ctx, "export_candidate_fixture", name=name, plan=plan, note=note, overwrite=overwrite)

    @tool
    async def compare_history(ctx: Context, limit: Rows = 10) -> R.CompareResult:
        """The current plan beside fixtures and every study's best, so the best explored candidate is not lost."""
        return await server.call(ctx, "compare_history", limit=limit)

    @tool
    async def rank_experiments(ctx: Context) -> R.RankResult:
        """Studies ranked by their best verified final best_cycles."""
        return await server.call(ctx, "rank_experiments")

    @tool
    async def record_result(
        ctx: Context,
        path: Annotated[StrictStr, Field(max_length=MAX_PATH_CHARS, description="result JSON inside the workspace (a new file or an "
                                                                                "earlier result, which is backed up)")] = RESULT_PATH,
        used: Annotated[list[Name] | None, Field(max_length=LIMITS["tools"], description="extra tool names to record as used")] = None,
    ) -> R.RecordResult:
        """Run the final benchmark and write the iteration result (metrics.best_cycles = metrics.score) with the tools used."""
        return await server.call(ctx, "record_result", path=path, tools=used)

    return _Server(SERVER_NAME, version=package_version(), log_level="WARNING",     # a failed call's result says why; no log line
                   instructions="Tune kernel_plan.json: best_cycles is lower-is-better; dev is the fast objective, "
                                "final the authority; correctness needs max_abs <= 2.5e-4 in both modes.", tools=tools)


READ_ONLY_TOOLS = ("run_objective", "trace_summary", "validate_plan", "resume_search_history", "candidate_diff",
                   "benchmark_plan", "compare_history", "rank_experiments")   # the self-test's calls (repeated_evaluation: slow)
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
    parser = Parser(prog="tensor_plan_server", description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", default=".", help="workspace root (default: the current folder)")
    parser.add_argument("--history", default=None, help="history file or URL (default: WORKSPACE/studies/history.db)")
    parser.add_argument("--outage-s", type=positive_number(float, LIMITS["time_s"]), default=None, metavar="SECONDS",
                        help="how long a history that fails is waited for before a call fails (default: the tuner's, as "
                             "python -m tuner --help says)")
    parser.add_argument("--self-test", action="store_true", help="list the tools and call the read-only ones")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)   # asyncio makes Ctrl-C cancel the calls only over this one
    workspace = Path(args.workspace).resolve()
    if not (workspace / "kernel_plan.json").is_file():
        print(f"tensor_plan_server: error: no kernel_plan.json in {workspace}", file=sys.stderr)
        return 2
    if args.self_test:
        return anyio.run(self_test, workspace, args.history)
    stops: list[int] = []                                   # the stop signals that came, first first
    cancel: Any = signal.default_int_handler                # until the event loop runs: KeyboardInterrupt

    def stop(signum: int, frame: object) -> None:
        stops.append(signum)
        cancel(signal.SIGINT, frame)

    def ended(signum: int, frame: object) -> None:         # the server is done: the process ends once the calls' threads do;
        if len(stops) > 1:                                  # the event loop's handler, called now, printed a traceback
            raise KeyboardInterrupt                         # (a client's SIGTERM after it closed the server's input)

    async def serve(server: MCPServer) -> None:
        nonlocal cancel
        if callable(handler := signal.getsignal(signal.SIGINT)):
            cancel = handler                                # the event loop's: it cancels the server, and so every call in
        signal.signal(signal.SIGINT, stop)                  # flight (their searches save and stop); a second one raises
        try:
            await server.run_stdio_async()
        finally:
            cancel = ended

    for signum in (signal.SIGTERM, signal.SIGHUP):          # a client or a closed terminal ends the server as Ctrl-C does
        signal.signal(signum, stop)
    try:
        anyio.run(serve, build(workspace, args.history, args.outage_s))
    except KeyboardInterrupt:
        if not stops:                                       # Ctrl-C before the event loop ran
            stops.append(signal.SIGINT)
    # The server can end without a KeyboardInterrupt although a stop came: a client that stops its server closes its
    # standard input too, and the server may end on that before the cancellation lands (seen under load, as exit 0
    # with no word). So the signals that came decide how it ended, not the way out of the loop.
    if stops:
        print(f"tensor_plan_server: {described(stops[0])}; the calls in flight saved their progress", file=sys.stderr)
        return 128 + stops[0]
    return 0


if __name__ == "__main__":                  # python -m tuner.mcp_server: the server of an installed package
    sys.exit(main())
