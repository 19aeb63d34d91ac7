#!/usr/bin/env python3
"""Call one tool of a workspace MCP server, the way an agent would, and record it.

    python3 .harnessgym/runtime/mcp_call.py --server tensor-plan-server --tool run_objective --arguments '{"mode":"dev"}'

Starts the server from its manifest (.harnessgym/mcp/*/harnessgym-mcp.json) as a real MCP client
over stdio, calls the tool, prints the structured result as JSON, appends one telemetry record
to .harnessgym/mcp_calls.jsonl, and exits 1 when the tool reports an error (2 for bad helper input).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import _bootstrap  # noqa: E402,F401  (re-runs under the repository's .venv when needed)
from tuner.mcp_client import main  # noqa: E402

raise SystemExit(main(ROOT))
