"""Repeated measurements of noisy timings: summaries and a significance test for "the candidate is faster".

Values are lower-is-better (cycles, ms). A comparison bootstraps the ratio of medians (candidate /
current) with a fixed seed, so the same samples always give the same verdict; the candidate is
significantly better when the upper end of the two-sided interval at ``confidence`` is below 1.
Identical samples (a deterministic objective) give a degenerate interval: the exact ratio.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 4000
TEST = "bootstrap interval of the ratio of medians"


def _medians(samples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Medians of ``RESAMPLES`` resamples (with replacement) of ``samples``."""
    picks = rng.integers(0, len(samples), size=(RESAMPLES, len(samples)))
    return np.median(samples[picks], axis=1)


def summary(samples: list[float | None] | np.ndarray, confidence: float = CONFIDENCE, seed: int = 0) -> dict[str, Any]:
    """``median``, ``spread`` (max/min - 1 of the samples) and the bootstrap interval of the median; all ``None``
    when a sample is missing (``None``: a failed or infeasible measurement) or not finite."""
    values = np.array([np.inf if v is None else v for v in samples], dtype=float)
    if not len(values) or not np.isfinite(values).all():
        return {"samples": len(values), "median": None, "spread": None, "low": None, "high": None}
    medians = _medians(values, np.random.default_rng(seed))
    tail = (1 - confidence) / 2
    return {"samples": len(values), "median": float(np.median(values)), "spread": float(values.max() / values.min() - 1),
            "low": float(np.quantile(medians, tail)), "high": float(np.quantile(medians, 1 - tail))}


@dataclass(frozen=True)
class Comparison:
    """``ratio``: median(candidate) / median(current), with its interval ``[low, high]`` at ``confidence``;
    ``better``: the candidate is significantly faster (``high < 1``)."""

    ratio: float
    low: float
    high: float
    confidence: float
    better: bool
    test: str = TEST

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare(candidate: list[float] | np.ndarray, current: list[float] | np.ndarray, confidence: float = CONFIDENCE,
            seed: int = 0) -> Comparison:
    """Whether ``candidate`` samples are significantly lower than ``current`` samples (both finite, non-empty)."""
    a, b = np.asarray(candidate, dtype=float), np.asarray(current, dtype=float)
    if not len(a) or not len(b) or not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("comparing needs finite samples of both plans")
    rng = np.random.default_rng(seed)
    ratios = _medians(a, rng) / _medians(b, rng)
    tail = (1 - confidence) / 2
    low, high = float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1 - tail))
    return Comparison(float(np.median(a) / np.median(b)), low, high, confidence, high < 1)
