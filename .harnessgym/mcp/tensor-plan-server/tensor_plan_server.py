#!/usr/bin/env python3
"""Launcher of the tensor-plan MCP server (stdio): python3 tensor_plan_server.py [--self-test].

The server itself is tuner.mcp_server; this file only finds the repository and its environment.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
import _bootstrap  # noqa: E402,F401  (re-runs under the repository's .venv when needed)

if "--workspace" not in sys.argv:
    sys.argv[1:1] = ["--workspace", os.environ.get("TENSOR_PLAN_WORKSPACE", str(ROOT))]
import tuner  # noqa: E402

tuner.quiet_ctrl_c_while_loading()
from tuner.mcp_server import main  # noqa: E402

raise SystemExit(main())
