"""Command-line types the perf scripts share: a count or a time that would run nothing exits 2 naming it,
instead of failing deep inside a run."""

from __future__ import annotations

import argparse
import math


def at_least_one(text: str) -> int:
    """A count (seeds, evaluations, plans, processes) of at least 1."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count of at least 1")
    return count


def positive_seconds(text: str) -> float:
    """A duration in seconds, above 0."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return seconds
