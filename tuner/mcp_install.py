"""``python -m tuner mcp install --client claude|codex|vscode [--write]``: client configuration.

Prints (or, with ``--write``, merges into the workspace's client file) the entry that starts the
tensor-plan server from the repository's manifest (in a workspace without one, ``python -m
tuner.mcp_server``): Claude Code's ``.mcp.json`` (``mcpServers``),
VS Code's ``.vscode/mcp.json`` (``servers`` with ``type: stdio``) or Codex's
``.codex/config.toml`` (``[mcp_servers.NAME]`` with command, args, env, cwd). The tuner's ``--history``
and ``--outage-s`` become the server's; the options of another problem are refused (the server serves the
workspace's tensor plan on the built-in model).
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

from tuner.history import OUTAGE_S, parsed_url, resolve_url
from tuner.mcp_client import manifest_command
from tuner.service import Context
from tuner.workspace import MANIFEST, PLAN_FILE, SERVER_NAME, Workspace, atomic_write, json_reason, loads

CLIENT_FILES = {"claude": ".mcp.json", "vscode": ".vscode/mcp.json", "codex": ".codex/config.toml"}


def server_entry(workspace: Workspace, options: tuple[str, ...] = ()) -> tuple[str, dict[str, Any]]:
    """The manifest's server, with its interpreter and launcher made absolute so any working folder
    and any client environment works; without a manifest (a workspace of an installed package), this
    interpreter's ``-m tuner.mcp_server`` serving the workspace. ``options`` follow its arguments."""
    if not (workspace.root / MANIFEST).is_file():
        return SERVER_NAME, {"command": sys.executable, "args": ["-m", "tuner.mcp_server", "--workspace", str(workspace.root), *options],
                             "env": {}}
    servers = json.loads((workspace.root / MANIFEST).read_text(encoding="utf-8"))["mcpServers"]
    name, entry = next(iter(servers.items()))
    args = [str(workspace.root / a) if a.endswith(".py") else a for a in entry.get("args", [])]
    return name, {"command": manifest_command(entry["command"]), "args": [*args, *options], "env": dict(entry.get("env", {}))}


def server_options(args: argparse.Namespace) -> tuple[str, ...]:
    """The server's arguments from the tuner's options: ``--history`` (as an absolute URL, so the client's working folder
    does not matter) and ``--outage-s`` where given. A history URL with a password is refused (the client file is plain
    text, often committed), as are the options of another problem than the tensor plan on the built-in model."""
    foreign = [name for name, given in (("--objective", args.objective != "builtin"), ("--space", args.space is not None),
                                        ("--timeout-s", args.timeout_s != Context.timeout_s),
                                        ("--repeats", args.objective_repeats != 1)) if given]
    if foreign:
        raise ValueError(f"{', '.join(foreign)} cannot be given to the MCP server: it serves the workspace's tensor plan on the "
                         "built-in model (the tuner's commands take them)")
    options: tuple[str, ...] = ()
    if args.history is not None:
        url = resolve_url(args.history)
        if parsed_url(url).password is not None:            # one it cannot read is a HistoryUnavailable, a ValueError
            raise ValueError("the history URL holds a password, which the client file would keep in plain text: leave it out "
                             "and give it in ~/.pgpass or PGPASSWORD, which the PostgreSQL driver reads")
        options += ("--history", url)
    if args.outage_s != OUTAGE_S:
        options += ("--outage-s", f"{args.outage_s:g}")
    return options


def _toml(name: str, entry: dict[str, Any], cwd: Path) -> str:
    pairs = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in entry["env"].items())
    env = f"{{ {pairs} }}" if pairs else "{}"
    return (f"[mcp_servers.{name}]\ncommand = {json.dumps(entry['command'])}\nargs = {json.dumps(entry['args'])}\n"
            f"env = {env}\ncwd = {json.dumps(str(cwd))}\n")


def _table(line: str) -> list[str] | None:
    """The keys of a TOML table header (``[a."b".c]``, ``[[a.b]]``, a comment after it); ``None`` for any other line."""
    if not line.lstrip().startswith("["):
        return None
    try:
        node: Any = tomllib.loads(line)
    except tomllib.TOMLDecodeError:                     # a line of a multi-line array
        return None
    keys = []
    while isinstance(node, dict) and node:              # an array of tables ends in a list
        (key, node), = node.items()
        keys.append(key)
    return keys


def _merged_toml(existing: str, name: str, block: str) -> str:
    """``existing`` (Codex's TOML) with the tables of server ``name``, its subtables (``env``...) too, replaced by ``block``.
    A ``ValueError`` where ``existing`` is not TOML, or defines the server in a form that leaves the merge invalid (an
    inline table, dotted keys)."""
    try:
        tomllib.loads(existing)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"it is not TOML: {exc}") from None
    out, skipping = [], False
    for line in existing.splitlines(keepends=True):
        if (keys := _table(line)) is not None:
            skipping = keys[:2] == ["mcp_servers", name]
        if not skipping:
            out.append(line)
    text = "".join(out)
    merged = text + ("" if text.endswith("\n") or not text else "\n") + block
    try:
        tomllib.loads(merged)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"it defines mcp_servers.{name} in a form the merge does not replace (an inline table or dotted "
                         f"keys), so the merge would not be TOML ({exc}): remove that entry and run this again") from None
    return merged


def config_text(workspace: Workspace, client: str, existing: str | None = None, options: tuple[str, ...] = ()) -> str:
    """The client's configuration file text (the server given ``options``), merged into ``existing`` when given."""
    name, entry = server_entry(workspace, options)
    if client == "codex":
        block = _toml(name, entry, workspace.root)
        return _merged_toml(existing, name, block) if existing else block
    try:
        data = loads(existing) if existing else {}
    except ValueError as exc:
        comments = ", and a merge would drop the comments VS Code allows" if client == "vscode" else ""
        raise ValueError(f"it is not JSON ({json_reason(exc)}{comments}): add the entry that "
                         f"'python -m tuner mcp install --client {client}' prints by hand") from None
    key = "servers" if client == "vscode" else "mcpServers"
    if not isinstance(data, dict) or not isinstance(data.setdefault(key, {}), dict):
        raise ValueError(f"it is not a JSON object whose {key!r} is an object")
    data[key][name] = {"type": "stdio", **entry} if client == "vscode" else entry
    return json.dumps(data, indent=2) + "\n"


def install(args: argparse.Namespace) -> int:
    workspace = Workspace.at(args.workspace)
    if not (workspace.root / MANIFEST).is_file() and not (workspace.root / PLAN_FILE).is_file():
        print(f"tuner mcp install: error: {workspace.root} holds neither the manifest {MANIFEST} nor a {PLAN_FILE}: "
              "the tensor-plan server serves a workspace that holds its plan", file=sys.stderr)
        return 2
    target = workspace.path(CLIENT_FILES[args.client])
    try:
        options = server_options(args)
    except ValueError as exc:
        print(f"tuner mcp install: error: {str(exc)[:400]}", file=sys.stderr)
        return 2
    try:
        existing = target.read_text(encoding="utf-8") if args.write and target.is_file() else None
        text = config_text(workspace, args.client, existing, options)
    except ValueError as exc:                           # not UTF-8, not JSON, not an object of servers
        print(f"tuner mcp install: error: cannot merge into {target}: {exc}", file=sys.stderr)
        return 2
    shown = target.relative_to(workspace.root)
    if args.write and text == existing:
        print(f"{shown} already holds this entry")
    elif args.write:
        backup = workspace.backup(target) if existing is not None else None
        atomic_write(target, text)
        print(f"wrote {shown}" + (f" (the file it replaced: {backup})" if backup else ""))
    else:
        sys.stdout.write(text)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    mcp = sub.add_parser("mcp", help="MCP client configuration")
    actions = mcp.add_subparsers(dest="mcp_command", metavar="install", required=True)
    p = actions.add_parser("install", help="print or write the client configuration for the tensor-plan server")
    p.add_argument("--client", required=True, choices=sorted(CLIENT_FILES), help="the client to configure (%(choices)s)")
    p.add_argument("--write", action="store_true", help=f"merge into the workspace's client file ({', '.join(CLIENT_FILES.values())})")
    p.set_defaults(handler=install)
