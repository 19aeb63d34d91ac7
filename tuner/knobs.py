"""The knob catalogue: every knob of ``kernel_plan.json``, its ordered choices and its kind.

Numeric knobs are *ordinal* (neighbouring choices are adjacent values); the others are
*nominal*. The order of ``KNOBS`` is the order of a plan's index encoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["ordinal", "nominal"]


@dataclass(frozen=True)
class Knob:
    """One knob: its name, its choices in catalogue order, and whether that order means anything."""

    name: str
    choices: tuple[str | int, ...]
    kind: Kind

    @property
    def size(self) -> int:
        return len(self.choices)

    def index(self, value: str | int) -> int:
        """Index of ``value`` in ``choices``; ``ValueError`` when it is not one of them."""
        for i, choice in enumerate(self.choices):
            if type(choice) is type(value) and choice == value:
                return i
        raise ValueError(f"knob {self.name!r}: {value!r} is not one of {self.allowed()}")

    def allowed(self) -> str:
        return ", ".join(str(c) for c in self.choices)


def _nominal(name: str, *choices: str) -> Knob:
    return Knob(name, choices, "nominal")


def _ordinal(name: str, *choices: int) -> Knob:
    return Knob(name, choices, "ordinal")


KNOBS: tuple[Knob, ...] = (
    _nominal("q_layout", "row_major", "col_major", "blocked", "swizzled_mn"),
    _nominal("k_layout", "row_major", "col_major", "blocked", "swizzled_nk"),
    _nominal("v_layout", "row_major", "col_major", "blocked", "swizzled_kd"),
    _nominal("o_layout", "row_major", "blocked", "streamed"),
    _ordinal("block_m", 16, 32, 48, 64, 80, 96, 128),
    _ordinal("block_n", 32, 64, 96, 128, 192),
    _ordinal("block_k", 32, 64, 96, 128),
    _ordinal("num_warps", 2, 4, 6, 8),
    _ordinal("vector_width", 4, 8, 16),
    _nominal("accum", "sequential", "pairwise", "tree", "kahan"),
    _nominal("softmax", "two_pass", "online", "online_renorm", "approx_poly"),
    _nominal("schedule", "static", "persistent", "split_pipeline"),
    _ordinal("dma_stages", 1, 2, 3, 4),
    _ordinal("prefetch_distance", 0, 1, 2, 3, 4),
    _ordinal("dma_burst", 64, 128, 256),
    _ordinal("split_k", 1, 2, 4),
    _nominal("swizzle", "none", "xor", "tensorcore"),
    _nominal("epilogue", "separate", "fused_scale", "fused_scale_mask"),
    _ordinal("scratchpad_kb", 48, 64, 96, 128, 160, 192),
)

KNOB_NAMES: tuple[str, ...] = tuple(k.name for k in KNOBS)
BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}
POSITION: dict[str, int] = {k.name: i for i, k in enumerate(KNOBS)}
SPACE_SIZE: int = 1
for _knob in KNOBS:
    SPACE_SIZE *= _knob.size
