"""Server start to first tool list, over real stdio, and one cheap call (cold processes each time).

    python perf/mcp_startup.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import anyio
from arguments import at_least_one
from mcp import Client, StdioServerParameters

from tuner.mcp_client import find_server

ROOT = Path(__file__).resolve().parents[1]


async def once() -> tuple[float, float]:
    entry = find_server(ROOT, "tensor-plan-server")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    start = time.perf_counter()
    async with Client(StdioServerParameters(command=entry["command"], args=entry["args"], env=env, cwd=str(ROOT))) as client:
        await client.list_tools()
        listed = time.perf_counter() - start
        await client.call_tool("validate_plan", {})
        called = time.perf_counter() - start
    return listed, called


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=at_least_one, default=5)
    runs = [anyio.run(once) for _ in range(parser.parse_args().runs)]
    listed, called = zip(*runs, strict=True)
    print(f"start -> first tool list: median {statistics.median(listed):.2f} s (max {max(listed):.2f} s) over {len(runs)} cold starts")
    print(f"start -> first validate_plan result: median {statistics.median(called):.2f} s")


if __name__ == "__main__":
    main()
