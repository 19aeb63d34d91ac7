"""``python -m tuner mcp ...``: MCP client configuration (filled in by the MCP adapter)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("mcp", help="MCP server configuration for clients")
    p.set_defaults(handler=lambda args: 0)
