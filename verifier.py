#!/usr/bin/env python3
"""Check a plan's numerics: python3 verifier.py --json --mode dev|final [--plan PATH]."""

import _bootstrap  # noqa: F401  (runs under the repository's virtual environment when needed)
from tuner.task.cli import verifier_main

raise SystemExit(verifier_main())
