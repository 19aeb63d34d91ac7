"""``exhaustive``: every plan of a profile, scored in ranges by index.

Workers claim ranges of the profile (:mod:`tuner.claims`): a dead worker's range first, else the
next one. A range starts at one plan and doubles while scoring it takes under ``RANGE_S``, up to
``CHUNK``: small for a benchmark that takes seconds per plan, large for the vectorized model. Each
range is scored with the objective's fast path and its best ``KEEP`` become its result. A killed
sweep loses only the ranges it held, and the same command resumes where the history says. When
every range is done, the best ``KEEP`` of all of them (ties by position in the profile) are the
finalists: their correctness is checked and they become the study's trials; ``include_final``
checks the dev winners in final mode too. A sweep of millions records its top candidates and its
ranges, not millions of trials.
"""

from __future__ import annotations

import time

import numpy as np

from tuner.search import POLL_S, Candidate, Outcome, Search, number

CHUNK = 1 << 18
RANGE_S = 1.0
KEEP = 64
FINALISTS = 16


def _score(search: Search, start: int, stop: int) -> list[dict[str, object]]:
    """The best ``KEEP`` plans of profile range ``[start, stop)``: index vector, value, position."""
    idx = search.spec.profile.plans(start, stop)
    cycles = search.objective.cycles(idx, search.spec.mode)
    cycles[~search.space.allowed(idx)] = np.inf                 # restrictions; the objective knows the rest
    keep = [k for k in np.argsort(cycles, kind="stable")[:KEEP] if np.isfinite(cycles[k])]
    return [{"idx": [int(v) for v in idx[k]], "cycles": float(cycles[k]), "at": start + int(k)} for k in keep]


def run(search: Search) -> Outcome:
    profile = search.spec.profile
    if profile is None:
        raise ValueError("exhaustive needs a profile")
    total = min(profile.size, search.spec.max_evals)
    size, pause, stopped = 1, 0.05, None
    while (stopped := search.interrupted()) is None:
        claimed = search.worker.claim_range(total, size)
        search.evaluations = search.worker.evaluations
        if claimed is None:                                     # every range is done
            break
        if claimed is False:                                    # the last ranges are with live workers
            time.sleep(pause)
            pause = min(2 * pause, POLL_S)
            continue
        start, stop = claimed
        began = time.monotonic()
        search.worker.complete_range(start, _score(search, start, stop))
        search.scored += stop - start
        search.report(search.evaluations, total, f"{stop - start:,} plans from {start:,}")
        if time.monotonic() - began < RANGE_S:
            size = min(2 * size, CHUNK)
    best = sorted(search.worker.range_results(), key=lambda b: (b["cycles"], b["at"]))[:KEEP]
    finalists = np.array([b["idx"] for b in best], dtype=np.int16).reshape(-1, len(profile.choices))
    values = search.evaluate(finalists, {"phase": "finalist", "profile": profile.name}, counted=False) if len(finalists) else []
    top = [Candidate(finalists[k], float(values[k]), True) for k in np.argsort(values, kind="stable") if np.isfinite(values[k])]
    if best:
        search.report(search.evaluations, total, f"best {number(best[0]['cycles'])}")
    finished = "exhausted" if total == profile.size else "evaluation budget"
    return search.finish(top[:FINALISTS], stopped or finished, {"profile": profile.name, "size": profile.size})
