"""``focused``: a deterministic sweep around the best region found.

The center is the best correct plan the history holds for this objective (or the given start).
The sweep scores the +-1 grid over every ordinal knob (nearest first), then every single change
of a nominal knob; when it finds a better plan it re-centres and sweeps again.
"""

from __future__ import annotations

import numpy as np

from tuner.knobs import KNOBS
from tuner.search import Outcome, Search
from tuner.strategies.neighbourhood import grid, singles

ORDINAL = tuple(i for i, k in enumerate(KNOBS) if k.kind == "ordinal")
NOMINAL = tuple(i for i, k in enumerate(KNOBS) if k.kind == "nominal")
BATCH = 4096


def _sweep(center: np.ndarray) -> np.ndarray:
    flips = singles(center)
    nominal = flips[(flips != center)[:, NOMINAL].any(axis=1)]
    return np.concatenate([grid(center, ORDINAL), nominal])


def run(search: Search) -> Outcome:
    center = search.best.idx if search.best is not None else np.array(search.spec.start, dtype=np.int16)
    value = float(search.evaluate(center[None], {"phase": "center"})[0])
    stopped = None
    while stopped is None:
        candidates = _sweep(center)
        candidates = candidates[search.objective.feasible(candidates)]
        improved = False
        for start in range(0, len(candidates), BATCH):
            stopped = search.stop_reason()
            if stopped:
                break
            values = search.evaluate(candidates[start:start + BATCH], {"phase": "sweep"})
            best = int(np.argmin(values))
            if values[best] < value:
                center, value, improved = candidates[start + best], float(values[best]), True
        if stopped is None and not improved:
            stopped = "converged"
    return search.finish(search.top(), stopped)
