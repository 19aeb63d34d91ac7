"""``focused``: a deterministic sweep around the best region found.

The center is the best correct configuration the history holds for this objective (or the given
start). The sweep scores the +-1 grid over the ordinal knobs with the largest learned effects
(nearest first), then every single change of a nominal knob; when it finds a better configuration
it re-centres and sweeps again.
"""

from __future__ import annotations

import numpy as np

from tuner.search import Outcome, Search
from tuner.strategies.interactions import learned
from tuner.strategies.neighbourhood import grid, singles

BATCH = 4096
GRID_KNOBS = 10                     # ordinal knobs the sweep's grid spans (3**10 = 59049 configurations at most)


def _sweep(search: Search, center: np.ndarray) -> np.ndarray:
    space = search.space
    flips = singles(space, center)
    nominal = flips[(flips != center)[:, ~space.ordinal].any(axis=1)]
    return np.concatenate([grid(space, center, learned(search).top_knobs(space, GRID_KNOBS)), nominal])


def run(search: Search) -> Outcome:
    center = search.best.idx if search.best is not None else np.array(search.spec.start, dtype=np.int16)
    value = float(search.evaluate(center[None], {"phase": "center"})[0])
    stopped = None
    while stopped is None:
        candidates = _sweep(search, center)
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
