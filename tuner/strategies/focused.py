"""``focused``: a deterministic sweep around the best region found.

The center is the best correct configuration the history holds for this objective, or the given
start (one that the restrictions rule out with everything around it gives way to the nearest
allowed one). The sweep scores the +-1 grid over the ordinal knobs with the largest learned effects
(nearest first), then every single change of a nominal knob; when it finds a better configuration
it re-centres and sweeps again.
"""

from __future__ import annotations

import numpy as np

from tuner.search import Outcome, Search
from tuner.strategies.checkpoint import from_allowed
from tuner.strategies.interactions import learned
from tuner.strategies.neighbourhood import grid, singles

BATCH = 4096
GRID_KNOBS = 10                     # ordinal knobs the sweep's grid spans (3**10 = 59049 configurations at most)


def _sweep(search: Search, center: np.ndarray) -> np.ndarray:
    space = search.space
    flips = singles(space, center)
    nominal = flips[(flips != center)[:, ~space.ordinal].any(axis=1)]
    return np.concatenate([grid(space, center, learned(search).top_knobs(space, GRID_KNOBS)), nominal])


def _focus(search: Search, center: np.ndarray) -> str:
    """Sweeps around ``center``, re-centred on each improvement, until one improves nothing; why it stopped."""
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
    return stopped


def run(search: Search) -> Outcome:
    center = search.best.idx if search.best is not None else np.array(search.spec.start, dtype=np.int16)
    stopped = from_allowed(search, center, _focus)
    return search.finish(search.top(), stopped)
