"""The call helper behind ``.harnessgym/runtime/mcp_call.py``: a real MCP client over stdio, with telemetry."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from tuner import Parser
from tuner.workspace import TELEMETRY, loads

MANIFESTS = ".harnessgym/mcp"
UNPARSED_KEPT = 1000                # characters of an --arguments text that is not JSON kept in its telemetry record
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT", "TENSOR_PLAN_WORKSPACE")


class HelperError(ValueError):
    """Bad helper input (unknown server, arguments that are not a JSON object)."""


def manifest_command(command: str) -> str:
    """The program to start for a manifest's ``command``: a bare ``python3``/``python`` is this interpreter
    (the environment the package is installed in), not whichever Python comes first on ``PATH``."""
    return sys.executable if command in ("python3", "python") else command


def find_server(root: Path, name: str) -> dict[str, Any]:
    """The ``mcpServers`` entry called ``name`` in the workspace's manifests."""
    known = []
    for manifest in sorted((root / MANIFESTS).glob("*/harnessgym-mcp.json")):
        servers = json.loads(manifest.read_text(encoding="utf-8")).get("mcpServers", {})
        known += list(servers)
        if name in servers:
            return servers[name]
    raise HelperError(f"unknown server {name!r}; servers in {MANIFESTS}: {', '.join(known) or 'none'}")


def _summary(result: dict[str, Any] | None) -> str:
    if not isinstance(result, dict):
        return ""
    keys = ("best_cycles", "correct", "passed", "applied", "dry_run", "evaluations", "stopped", "valid", "path", "fixture")
    picked = {k: result[k] for k in keys if k in result}
    if isinstance(result.get("best"), dict):                       # a search's best: its value in the search's mode
        picked["best_cycles"] = result["best"].get(result.get("mode"))
    return json.dumps(picked, separators=(",", ":"))[:300]


def _append(root: Path, record: dict[str, Any]) -> None:
    """Append the call's telemetry record; where the workspace cannot take it (a read-only mount, a full disk), one
    line on stderr says so, and the call's result and exit status stand."""
    path = root / TELEMETRY
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)               # one write of one line: concurrent helpers do not interleave
        finally:
            os.close(fd)
    except OSError as exc:
        print(f"mcp_call.py: the call's telemetry record was not written to {TELEMETRY}: {exc.strerror}", file=sys.stderr)


async def call(root: Path, server: str, tool: str, arguments: dict[str, Any], timeout: float) -> tuple[bool, Any, str]:
    """(ok, structured result or None, error text) of one tool call over stdio."""
    from mcp import Client, StdioServerParameters

    entry = find_server(root, server)
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ} | {k: str(v) for k, v in entry.get("env", {}).items()}
    params = StdioServerParameters(command=manifest_command(entry["command"]), args=list(entry.get("args", [])), env=env, cwd=str(root))
    async with Client(params, read_timeout_seconds=timeout) as client:
        result = await client.call_tool(tool, arguments)
    text = " ".join(getattr(block, "text", "") for block in result.content)
    return not result.is_error, result.structured_content, text


def _failure(exc: BaseException, timeout: float) -> str:
    """What broke a call, plainly: the first error inside the client's task groups; a timeout names ``--timeout``,
    a server that ended or never started says so."""
    from mcp import MCPError
    from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT:
        return (f"no result within {timeout:g} s (--timeout); the call was cancelled, and a search keeps what it "
                "scored: the same call resumes it")
    if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
        return "the server ended before it answered (what it printed on stderr, if anything, is above)"
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"the server cannot be started: {exc.strerror}: {exc.filename!r}"
    return f"{exc.__class__.__name__}: {exc}"


def main(root: Path, argv: list[str] | None = None) -> int:
    parser = Parser(prog="mcp_call.py", description="Call one tool of a workspace MCP server.")
    parser.add_argument("--server", required=True)
    parser.add_argument("--tool", required=True)
    parser.add_argument("--arguments", default="{}", help="JSON object of tool arguments")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the result (default 600)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    record: dict[str, Any] = {"time": datetime.now(UTC).isoformat(timespec="milliseconds"), "server": args.server, "tool": args.tool}
    try:
        try:
            arguments = loads(args.arguments)
        except ValueError as exc:                          # not JSON, or more than the parser holds
            raise HelperError(f"--arguments is not valid JSON: {exc}") from None
        if not isinstance(arguments, dict):
            raise HelperError(f"--arguments must be a JSON object, got {type(arguments).__name__}")
        record["arguments"] = arguments
        ok, result, text = anyio.run(call, root, args.server, args.tool, arguments, args.timeout)
    except HelperError as exc:
        message = str(exc)
        print(f"mcp_call.py: error: {message}", file=sys.stderr)
        _append(root, record | {"arguments": record.get("arguments", args.arguments[:UNPARSED_KEPT]),
                                "duration_s": round(time.monotonic() - started, 3), "ok": False, "error": message, "summary": ""})
        return 2
    except Exception as exc:               # the server could not start, the call broke off or ran past --timeout
        message = _failure(exc, args.timeout)
        print(f"mcp_call.py: error: {message}", file=sys.stderr)
        _append(root, record | {"duration_s": round(time.monotonic() - started, 3), "ok": False, "error": message, "summary": ""})
        return 1
    record |= {"duration_s": round(time.monotonic() - started, 3), "ok": ok, "error": None if ok else text, "summary": _summary(result)}
    _append(root, record)
    if ok:
        print(json.dumps(result, indent=2))
        return 0
    print(json.dumps({"error": text}, indent=2))
    print(f"mcp_call.py: {args.tool} failed: {text}", file=sys.stderr)
    return 1
