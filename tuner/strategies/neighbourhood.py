"""Neighbourhoods of a plan in index space: single mutations, pairs, and a bounded grid."""

from __future__ import annotations

from itertools import combinations, product

import numpy as np

from tuner.knobs import KNOBS

_SIZES = np.array([k.size for k in KNOBS])
GRID_KNOBS = tuple(i for i, k in enumerate(KNOBS) if k.name in
                   ("block_m", "block_n", "block_k", "num_warps", "dma_stages", "prefetch_distance", "scratchpad_kb"))


def singles(center: np.ndarray, near: bool = False) -> np.ndarray:
    """Every plan that differs from ``center`` in exactly one knob (catalogue order); with ``near``,
    ordinal knobs move one step only."""
    rows = []
    for j, size in enumerate(_SIZES):
        for v in range(size):
            if v != center[j] and not (near and KNOBS[j].kind == "ordinal" and abs(v - int(center[j])) > 1):
                row = center.copy()
                row[j] = v
                rows.append(row)
    return np.array(rows, dtype=np.int16)


def pairs(center: np.ndarray) -> np.ndarray:
    """Every plan that differs from ``center`` in exactly two knobs; ordinal knobs move one step."""
    steps = []
    for j, knob in enumerate(KNOBS):
        values = [center[j] - 1, center[j] + 1] if knob.kind == "ordinal" else range(knob.size)
        steps.append([v for v in values if 0 <= v < knob.size and v != center[j]])
    rows = []
    for a, b in combinations(range(len(KNOBS)), 2):
        for va, vb in product(steps[a], steps[b]):
            row = center.copy()
            row[a], row[b] = va, vb
            rows.append(row)
    return np.array(rows, dtype=np.int16)


def grid(center: np.ndarray, knobs: tuple[int, ...] = GRID_KNOBS) -> np.ndarray:
    """The +-1-step grid over ``knobs`` around ``center``, nearest first (center excluded)."""
    axes = [[v for v in (center[j] - 1, center[j], center[j] + 1) if 0 <= v < _SIZES[j]] for j in knobs]
    rows = []
    for values in product(*axes):
        row = center.copy()
        row[list(knobs)] = values
        rows.append(row)
    out = np.array(rows, dtype=np.int16)
    distance = np.abs(out.astype(np.int32) - center).sum(axis=1)
    order = np.argsort(distance, kind="stable")
    return out[order][distance[order] > 0]


def combined(center: np.ndarray, moves: np.ndarray, values: np.ndarray, keep: int = 16) -> np.ndarray:
    """Pairs of the ``keep`` most promising single moves (best values first, one per knob value),
    combined two at a time when they touch different knobs: second-order steps for little cost."""
    order = np.argsort(values, kind="stable")[:keep]
    changed = [int(np.flatnonzero(moves[i] != center)[0]) for i in order]
    rows = []
    for a in range(len(order)):
        for b in range(a + 1, len(order)):
            if changed[a] != changed[b]:
                row = moves[order[a]].copy()
                row[changed[b]] = moves[order[b]][changed[b]]
                rows.append(row)
    return np.array(rows, dtype=np.int16).reshape(-1, len(center))
