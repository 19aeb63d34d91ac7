"""Neighbourhoods of a plan in index space: single mutations, joint moves of coupled knobs,
infeasible moves repaired, pairs, and a bounded grid."""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations, product

import numpy as np

from tuner.knobs import KNOBS, POSITION

_SIZES = np.array([k.size for k in KNOBS])
_ORDINAL = np.array([k.kind == "ordinal" for k in KNOBS])
GRID_KNOBS = tuple(i for i, k in enumerate(KNOBS) if k.name in
                   ("block_m", "block_n", "block_k", "num_warps", "dma_stages", "prefetch_distance", "scratchpad_kb"))
# Knobs that pay only together: split_pipeline splits the warps into a DMA and a math group (it
# needs 8 warps); a DMA run is block_k or block_n elements wide, so a burst size pays only when
# the runs it rounds up to change with it.
COUPLED = (("schedule", "num_warps"), ("block_k", "dma_burst"), ("block_n", "dma_burst"))


def coupled(center: np.ndarray, groups: tuple[tuple[str, ...], ...] = COUPLED) -> np.ndarray:
    """Every plan that differs from ``center`` only within one of ``groups``, each knob over all its
    values: the joint moves of knobs that pay only together."""
    rows = []
    for group in groups:
        knobs = [POSITION[name] for name in group]
        for values in product(*(range(_SIZES[j]) for j in knobs)):
            row = center.copy()
            row[knobs] = values
            rows.append(row)
    out = np.unique(np.array(rows, dtype=np.int16), axis=0)
    return out[(out != center).sum(axis=1) > 1]


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


def repairs(center: np.ndarray, moves: np.ndarray, feasible: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """The ``moves`` from ``center`` that ``feasible`` rules out, each made feasible by the nearest
    change to one knob it leaves alone (a smaller scratchpad with fewer DMA stages or a shorter
    block_k, ...): the coupled steps a neighbourhood of feasible moves cannot take. At most the
    nearest fix per knob."""
    moves = moves[~feasible(moves)]
    if not len(moves):
        return np.empty((0, len(center)), dtype=np.int16)
    fixes = [singles(move) for move in moves]
    out = np.concatenate(fixes)
    owner = np.repeat(np.arange(len(moves)), [len(f) for f in fixes])
    knob = np.argmax(out != moves[owner], axis=1)                   # the one knob each fix changes
    untouched = moves[owner, knob] == center[knob]
    distance = np.where(_ORDINAL[knob], np.abs(out[np.arange(len(out)), knob].astype(np.int64) - center[knob]), 1)
    ok = untouched & feasible(out)
    key = owner * len(KNOBS) + knob
    nearest = np.full(len(moves) * len(KNOBS), np.iinfo(np.int64).max)
    np.minimum.at(nearest, key[ok], distance[ok])
    return out[ok & (distance == nearest[key])]
