"""The dev and final workload suites and their seeded masks.

Case names follow ``{mode}_{s}x{d}_{mask}``. Workload sizes (``bh``: batch x heads) carry the
calibration: the iteration-2 fixture scores dev 262005 and final 1495982 within 1%.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np

Mask = Literal["dense", "causal", "block_sparse"]
MODES = ("dev", "final")


@dataclass(frozen=True)
class Case:
    """One attention workload: s queries and keys, head_dim d, bh batch x heads, a mask."""

    name: str
    s: int
    d: int
    bh: int
    mask: Mask
    spread: float                  # logit standard deviation the verifier scales to
    density: float = 1.0           # fraction of active sparse blocks (block_sparse)
    sparse_block: int = 64         # tokens per sparse mask block
    kv_run: int = 0                # contiguous KV tokens per gather; 0 = whole tile rows

    @property
    def seed(self) -> int:
        """Seed derived from the case name (stable across runs and machines)."""
        return int.from_bytes(hashlib.sha256(self.name.encode()).digest()[:8], "little")


def _case(mode: str, s: int, d: int, mask: Mask, bh: int, **kw: object) -> Case:
    return Case(name=f"{mode}_{s}x{d}_{mask}", s=s, d=d, bh=bh, mask=mask, **kw)  # type: ignore[arg-type]


SUITES: dict[str, tuple[Case, ...]] = {
    "dev": (
        _case("dev", 192, 64, "dense", bh=152, spread=2.0),
        _case("dev", 1024, 64, "causal", bh=19, spread=2.0),
        _case("dev", 1024, 64, "block_sparse", bh=13, spread=2.0, density=0.3, kv_run=1),
    ),
    "final": (
        _case("final", 384, 128, "dense", bh=329, spread=4.0),
        _case("final", 2048, 64, "causal", bh=1, spread=2.0),
        _case("final", 1024, 128, "block_sparse", bh=38, spread=5.0, density=0.35, kv_run=2),
        _case("final", 768, 64, "dense", bh=73, spread=2.0),
    ),
}


def suite(mode: str) -> tuple[Case, ...]:
    """Cases of ``mode`` (``dev`` or ``final``); ``ValueError`` for any other mode."""
    if mode not in SUITES:
        raise ValueError(f"unknown mode {mode!r} (allowed: {', '.join(MODES)})")
    return SUITES[mode]


@cache
def sparse_blocks(case: Case) -> np.ndarray:
    """Active mask blocks (bool, query-block x key-block) of a block-sparse case; diagonal always on."""
    n = -(-case.s // case.sparse_block)
    rng = np.random.default_rng(case.seed)
    active = rng.random((n, n)) < case.density
    np.fill_diagonal(active, True)
    return active


def token_mask(case: Case) -> np.ndarray:
    """Token-level mask (bool, s x s): True where a query attends a key."""
    s = case.s
    if case.mask == "dense":
        return np.ones((s, s), dtype=bool)
    if case.mask == "causal":
        return np.tri(s, dtype=bool)
    blocks = sparse_blocks(case)
    return np.repeat(np.repeat(blocks, case.sparse_block, 0), case.sparse_block, 1)[:s, :s]
