#!/usr/bin/env python3
"""Score kernel_plan.json: python3 benchmark.py --json --mode dev|final [--plan PATH]."""

import _bootstrap  # noqa: F401  (runs under the repository's virtual environment when needed)
from tuner.task.cli import benchmark_main

raise SystemExit(benchmark_main())
