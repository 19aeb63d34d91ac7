"""Neighbourhoods of a configuration in index space: single mutations, joint moves of coupled
knobs, infeasible moves repaired, pairs, and a bounded grid. Every function takes the space; which
knobs are coupled and which the grid spans is the caller's (learned) choice."""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations, product

import numpy as np

from tuner.space import MAX_COUPLED_MOVES, Space

PAIR_STEPS = 16                     # values a nominal knob takes in a pair move (all of them when it has no more)
REPAIR_ROWS = 1 << 16               # candidate fixes of infeasible moves built and checked at once
REPAIR_RING = 16                    # distance (positions) of an ordinal knob's first ring of candidate fixes
NEAREST_DRAWS = 4096                # configurations drawn per level of kept values when looking for the nearest feasible one


def _around(size: int, at: int, count: int) -> range:
    """The ``count`` positions of a knob of ``size`` values nearest position ``at`` (all of them when ``count`` >= ``size``)."""
    start = min(max(at - count // 2, 0), max(size - count, 0))
    return range(start, min(start + count, size))


def _root(value: int, degree: int) -> int:
    """The largest integer whose ``degree``-th power is at most ``value`` (below 2**53, where floating point's root is
    off by far less than a half: rounding gives that integer or the next)."""
    root = round(value ** (1 / degree))
    while root**degree > value:
        root -= 1
    return root


def _windows(space: Space, center: np.ndarray, knobs: list[int], limit: int) -> list[range]:
    """The values each of ``knobs`` takes in joint moves from ``center``: all of them, or where their joint values
    pass ``limit``, those nearest the center's (by position), each knob keeping an equal share of ``limit`` (a knob
    with fewer values leaves the rest of its share to the others), so that a pair of knobs with thousands of values
    each costs at most ``limit`` moves, not millions."""
    counts, budget = {}, limit
    for left, j in enumerate(sorted(knobs, key=lambda j: space.sizes[j])):
        counts[j] = min(space.sizes[j], max(1, _root(budget, len(knobs) - left)))
        budget //= counts[j]
    return [_around(space.sizes[j], int(center[j]), counts[j]) for j in knobs]


def coupled(space: Space, center: np.ndarray, groups: tuple[tuple[int, ...], ...], limit: int = MAX_COUPLED_MOVES) -> np.ndarray:
    """Every configuration that differs from ``center`` in two or more knobs of one of ``groups`` (knob
    positions) and nowhere else, each knob over all its values (at most ``limit`` joint values per group:
    those nearest the center's): the joint moves of knobs that pay only together."""
    rows = []
    for group in groups:
        knobs = list(group)
        for values in product(*_windows(space, center, knobs, limit)):
            row = center.copy()
            row[knobs] = values
            rows.append(row)
    if not rows:
        return np.empty((0, len(center)), dtype=np.int16)
    out = np.unique(np.array(rows, dtype=np.int16), axis=0)
    return out[(out != center).sum(axis=1) > 1]


def row_keys(idx: np.ndarray) -> np.ndarray:
    """Each row of ``idx`` as one opaque value, compared byte by byte: set operations on configurations (``np.unique``
    with ``axis=0`` compares the columns one at a time, many times slower on wide rows)."""
    idx = np.ascontiguousarray(idx)
    return idx.view(np.dtype((np.void, idx.dtype.itemsize * idx.shape[1]))).ravel()


def singles(space: Space, center: np.ndarray, near: bool = False, per_knob: int | None = None) -> np.ndarray:
    """Every configuration that differs from ``center`` in exactly one knob (space order, each knob's values
    ascending); with ``near``, ordinal knobs move one step only; with ``per_knob``, each knob moves to at most that
    many values, those nearest the center's by position."""
    knob = np.repeat(np.arange(len(space.sizes)), space.sizes)
    value = np.arange(len(knob)) - np.repeat(np.cumsum(space.sizes) - space.sizes, space.sizes)
    keep = value != center[knob]
    if near:
        keep &= ~(space.ordinal[knob] & (np.abs(value - center[knob]) > 1))
    if per_knob is not None:                        # each knob's positions _around() the center's, its own among them
        window = [_around(int(size), int(at), per_knob + 1) for size, at in zip(space.sizes, center, strict=True)]
        keep &= (value >= np.array([w.start for w in window])[knob]) & (value < np.array([w.stop for w in window])[knob])
    rows = np.repeat(np.asarray(center, dtype=np.int16)[None], int(keep.sum()), axis=0)
    rows[np.arange(len(rows)), knob[keep]] = value[keep]
    return rows


def pairs(space: Space, center: np.ndarray) -> np.ndarray:
    """Every configuration that differs from ``center`` in exactly two knobs; ordinal knobs move one step, nominal
    ones to each of their values (the ``PAIR_STEPS`` nearest by position, where they have more)."""
    steps = []
    for j, size in enumerate(space.sizes):
        values = [center[j] - 1, center[j] + 1] if space.ordinal[j] else _around(size, int(center[j]), PAIR_STEPS + 1)
        steps.append([v for v in values if 0 <= v < size and v != center[j]])
    rows = []
    for a, b in combinations(range(len(center)), 2):
        for va, vb in product(steps[a], steps[b]):
            row = center.copy()
            row[a], row[b] = va, vb
            rows.append(row)
    return np.array(rows, dtype=np.int16).reshape(-1, len(center))


def grid(space: Space, center: np.ndarray, knobs: tuple[int, ...]) -> np.ndarray:
    """The +-1-step grid over ``knobs`` around ``center``, nearest first (center excluded)."""
    axes = [[v for v in (center[j] - 1, center[j], center[j] + 1) if 0 <= v < space.sizes[j]] for j in knobs]
    rows = []
    for values in product(*axes):
        row = center.copy()
        row[list(knobs)] = values
        rows.append(row)
    out = np.array(rows, dtype=np.int16).reshape(-1, len(center))
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


def repairs(space: Space, center: np.ndarray, moves: np.ndarray, feasible: Callable[[np.ndarray], np.ndarray],
            linked: tuple[tuple[int, ...], ...] | None = None) -> np.ndarray:
    """The ``moves`` from ``center`` that ``feasible`` rules out, each made feasible by the nearest
    change to one knob it leaves alone: the coupled steps a neighbourhood of feasible moves cannot
    take (a smaller buffer needs a shorter tile, say). At most the nearest fix per knob, in the order of
    the moves, then of the knobs. ``linked``: the groups of knobs (positions) that ``feasible`` reads together
    (``None``: any knob may mend any move); a move from a center that ``feasible`` allows is mended only by a knob
    of a group the move changes. Knobs of thousands of values cost time, not memory (:func:`_nearest_fixes`)."""
    if linked is not None and not feasible(center[None])[0]:        # what breaks the center may be mended anywhere
        linked = None
    moves = moves[~feasible(moves)]
    touched = moves != center
    owners, knobs, rows = [np.empty(0, dtype=np.int64)], [np.empty(0, dtype=np.int64)], [np.empty((0, len(center)), dtype=np.int16)]
    for group in linked if linked is not None else (tuple(range(len(center))),):
        mendable = np.flatnonzero(touched[:, list(group)].any(axis=1))
        for j in (j for j in group if space.sizes[j] > 1):
            owner, fixes = _nearest_fixes(space, center, moves, mendable[~touched[mendable, j]], j, feasible)
            owners.append(owner)
            knobs.append(np.full(len(owner), j))
            rows.append(fixes)
    owner, knob, fixed = np.concatenate(owners), np.concatenate(knobs), np.concatenate(rows)
    return fixed[np.lexsort((fixed[np.arange(len(fixed)), knob], knob, owner))]


def _nearest_fixes(space: Space, center: np.ndarray, moves: np.ndarray, owner: np.ndarray, j: int,
                   feasible: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The fixes of the moves ``moves[owner]`` that change knob ``j`` from the center's value to the nearest ones
    ``feasible`` allows (both, where two are as near), with the move each fixes. An ordinal knob's values are tried in
    rings of growing distance (``REPAIR_RING``, then 4 times as far each time) and a move leaves once a ring mends it;
    each ring's candidates are built and checked at most ``REPAIR_ROWS`` at a time."""
    values = np.delete(np.arange(space.sizes[j]), center[j])                  # knob j's other values
    distance = np.abs(values - center[j]) if space.ordinal[j] else np.ones(len(values), dtype=np.int64)
    owners, rows, reach = [np.empty(0, dtype=np.int64)], [np.empty((0, len(center)), dtype=np.int16)], 0
    while len(owner) and reach < distance.max():
        limit = max(REPAIR_RING, 4 * reach)
        ring = (distance > reach) & (distance <= limit)
        near, reach, unmended = distance[ring], limit, []
        per_chunk = max(1, REPAIR_ROWS // max(len(near), 1))
        for start in range(0, len(owner), per_chunk):
            chunk = owner[start:start + per_chunk]
            fixes = np.repeat(moves[chunk], len(near), axis=0)
            fixes[:, j] = np.tile(values[ring], len(chunk))
            ok = feasible(fixes).reshape(len(chunk), len(near))
            nearest = np.where(ok, near, np.iinfo(np.int64).max)
            keep = (ok & (nearest == nearest.min(axis=1, keepdims=True))).ravel()
            owners.append(np.repeat(chunk, len(near))[keep])
            rows.append(fixes[keep])
            unmended.append(chunk[~ok.any(axis=1)])
        owner = np.concatenate(unmended)
    return np.concatenate(owners), np.concatenate(rows)


def nearest_feasible(space: Space, start: np.ndarray, feasible: Callable[[np.ndarray], np.ndarray],
                     rng: np.random.Generator) -> np.ndarray | None:
    """A feasible configuration near ``start``, for a start that a space's restrictions rule out and that no
    neighbourhood leaves (a limit on a product of several knobs, say): among draws that keep each of its values
    with falling chance (90% to none: drawn among what the restrictions allow), the nearest feasible one of the first
    level that has one (knobs changed, plus each ordinal change as a share of its knob's range). ``None`` when no
    draw is feasible."""
    start = np.asarray(start, dtype=np.int16)
    for keep in (0.9, 0.75, 0.5, 0.25, 0.0):
        if keep:
            drawn = space.uniform(NEAREST_DRAWS, rng)
            rows = np.where(rng.random(drawn.shape) < keep, start, drawn)
        else:
            rows = space.draw(NEAREST_DRAWS, rng)
        rows = rows[feasible(rows)]
        if len(rows):
            shift = np.abs(rows.astype(np.int64) - start) / np.maximum(space.sizes - 1, 1)
            distance = (rows != start).sum(axis=1) + np.where(space.ordinal, shift, 0).sum(axis=1)
            return rows[int(np.argmin(distance))]
    return None
