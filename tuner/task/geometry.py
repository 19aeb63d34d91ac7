"""Mask geometry: which KV tiles each work item visits, per case and tile shape.

Tables are flat arrays indexed by the row-major position in the grid of ``GEOMETRY_KNOBS``
(block_m, block_n, split_k; times ``MAX_CTAS`` for the per-occupancy ones) and are computed once
per case. Tile counts are per batch x head; ``bh`` multiplies them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from tuner.plan import SPACE
from tuner.task.suites import Case, token_mask

BLOCK_M = SPACE.by_name["block_m"].choices
BLOCK_N = SPACE.by_name["block_n"].choices
SPLIT_K = SPACE.by_name["split_k"].choices
MAX_CTAS = 4
GEOMETRY_KNOBS = ("block_m", "block_n", "split_k")


@dataclass(frozen=True)
class Geometry:
    """Per-(block_m, block_n, split_k) tables of one case (float64 unless said)."""

    kv_blocks: np.ndarray        # KV tiles along the key axis
    items: np.ndarray            # work items per batch x head (query blocks x split_k)
    tiles: np.ndarray            # visited KV tiles per batch x head
    useful_tiles: np.ndarray     # useful (unmasked, in-range) work in tile units
    masked_tiles: np.ndarray     # visited tiles that need masking (diagonal, ragged, sparse)
    max_item: np.ndarray         # tiles of the longest item
    min_item: np.ndarray         # tiles of the shortest item
    static_tiles: np.ndarray     # [..., ctas-1]: static in-order waves, sum of each wave's longest item
    waves: np.ndarray            # [..., ctas-1]: waves of items over 16 x ctas slots


def _item_tiles(active: np.ndarray, split: int) -> np.ndarray:
    """Tiles per item of one batch x head: query blocks x KV parts, in launch order."""
    _q_blocks, kv_blocks = active.shape
    part = -(-kv_blocks // split)
    counts = [active[:, p * part:(p + 1) * part].sum(axis=1) for p in range(split)]
    return np.stack(counts, axis=1).reshape(-1)


@cache
def geometry(case: Case, cores: int = 16) -> Geometry:
    """Geometry tables of ``case`` (cached: cases are immutable)."""
    mask = token_mask(case)
    useful = float(mask.sum())
    shape = (len(BLOCK_M), len(BLOCK_N), len(SPLIT_K))
    t = {k: np.zeros(shape) for k in ("kv_blocks", "items", "tiles", "useful_tiles", "masked_tiles", "max_item", "min_item")}
    static_tiles = np.zeros((*shape, MAX_CTAS))
    waves = np.zeros((*shape, MAX_CTAS))
    for i, bm in enumerate(BLOCK_M):
        q_blocks = -(-case.s // bm)
        for j, bn in enumerate(BLOCK_N):
            kv_blocks = -(-case.s // bn)
            padded = np.zeros((q_blocks * bm, kv_blocks * bn), dtype=bool)
            padded[: case.s, : case.s] = mask
            tiles = padded.reshape(q_blocks, bm, kv_blocks, bn).transpose(0, 2, 1, 3).reshape(q_blocks, kv_blocks, -1)
            count = tiles.sum(axis=2)
            active = count > 0
            full = count == bm * bn
            for k, split in enumerate(SPLIT_K):
                items = _item_tiles(active, split)
                t["kv_blocks"][i, j, k] = kv_blocks
                t["items"][i, j, k] = items.size
                t["tiles"][i, j, k] = items.sum()
                t["useful_tiles"][i, j, k] = useful / (bm * bn)
                t["masked_tiles"][i, j, k] = (active & ~full).sum()
                t["max_item"][i, j, k] = items.max()
                t["min_item"][i, j, k] = items.min()
                launch = np.tile(items, case.bh)
                for c in range(MAX_CTAS):
                    slots = cores * (c + 1)
                    n_waves = -(-launch.size // slots)
                    padded_launch = np.zeros(n_waves * slots)
                    padded_launch[: launch.size] = launch
                    static_tiles[i, j, k, c] = padded_launch.reshape(n_waves, slots).max(axis=1).sum()
                    waves[i, j, k, c] = n_waves
    return Geometry(static_tiles=static_tiles.ravel(), waves=waves.ravel(), **{k: v.ravel() for k, v in t.items()})
