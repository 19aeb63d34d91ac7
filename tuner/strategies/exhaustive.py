"""``exhaustive``: every plan of a profile, scored in ranges by index.

Workers claim ranges of the profile (:mod:`tuner.claims`): a dead worker's range first, else the
next one. A worker's first range is one plan; each next one is sized to take ``RANGE_S`` at the rate
the objective last scored plans (at most ``GROWTH`` times larger, at most ``CHUNK``): a few plans for a
benchmark that takes seconds per plan, large ranges for the vectorized model. A range the history's
cache answered whole says nothing of that rate: the next is ``GROWTH`` times larger, and as dear. Each
range is scored with the objective's fast path and its best ``KEEP`` become its result; where scoring is dear
(an objective that runs a program, or the last range ran below ``DEAR_BELOW`` plans a second), every plan goes
through the history's evaluation cache instead, so what was measured before is not measured again and what is
measured now is kept for later searches. A killed
sweep loses only the ranges it held, and the same command resumes where the history says. When
every range is done, the best ``KEEP`` of all of them (ties by position in the profile) are the
finalists: their correctness is checked and they become the study's trials; ``include_final``
checks the dev winners in final mode too. A sweep of millions records its top candidates and its
ranges, not millions of trials.
"""

from __future__ import annotations

import time

import numpy as np

from tuner.objectives.base import RULED_OUT
from tuner.search import POLL_S, Candidate, Outcome, Search, shown

CHUNK = 1 << 18                     # the most plans one range holds
RANGE_S = 1.0                       # what one range should take to score
GROWTH = 64                         # how much larger each range may be than the worker's last
KEEP = 64
FINALISTS = 16
DEAR_BELOW = 100.0                  # plans per second below which a range's every evaluation is kept in the history
INFEASIBLE = "ruled out by the problem's cheap check"      # a range's plans that the objective rules out unscored


def _score(search: Search, start: int, stop: int, dear: bool) -> tuple[list[dict[str, object]], int]:
    """The best ``KEEP`` plans of profile range ``[start, stop)`` (index vector, value, position), and how many plans
    the objective scored for it. A ``dear`` range goes through the history's evaluation cache (:meth:`Search.measure`):
    what it holds is not scored again."""
    idx = search.spec.profile.plans(start, stop)
    cycles, scored = search.measure(idx) if dear else (search.objective.cycles(idx, search.spec.mode), len(idx))
    ruled_out = ~search.space.allowed(idx)
    cycles[ruled_out] = np.inf                                  # restrictions; the objective knows the rest
    search.count_failed(RULED_OUT, int(ruled_out.sum()))
    failing = idx[np.isinf(cycles) & ~ruled_out]
    if len(failing):
        cheap = ~search.objective.feasible(failing)
        search.count_failed(INFEASIBLE, int(cheap.sum()))       # scored on neither path
        if not dear and len(scored_failing := failing[~cheap]):  # a dear range counted these as it scored them
            reasons = search.objective.evaluate(scored_failing, search.spec.mode).reasons    # a fast objective's: cheap too
            for why in reasons or [None] * len(scored_failing):
                search.count_failed(why)
    keep = [k for k in np.argsort(cycles, kind="stable")[:KEEP] if np.isfinite(cycles[k])]
    return [{"idx": [int(v) for v in idx[k]], "cycles": float(cycles[k]), "at": start + int(k)} for k in keep], scored


def run(search: Search) -> Outcome:
    profile = search.spec.profile
    if profile is None:
        raise ValueError("exhaustive needs a profile")
    total = min(profile.size, search.spec.max_evals)
    size, pause, rate, stopped = 1, 0.05, 0.0, None
    while (stopped := search.interrupted()) is None:
        claimed = search.worker.claim_range(total, size)
        if claimed is None:                                     # every range is done
            break
        if claimed is False:                                    # the last ranges are with live workers
            time.sleep(pause)
            pause = min(2 * pause, POLL_S)
            continue
        start, stop = claimed
        began = time.monotonic()
        dear = rate < DEAR_BELOW or search.one_by_one            # the first range (one plan) is treated as dear, and a
                                                                  # program's every run is kept, however fast it is
        kept, scored = _score(search, start, stop, dear)
        if dear:
            search.flush()                                      # the measurements are written before the range is done
        search.worker.complete_range(start, kept)
        plans = stop - start
        search.scored += plans
        search.report(search.evaluations, total, f"{plans:,} plan{'s' if plans > 1 else ''} from {start:,}")
        if scored:                                              # the history's answers say nothing of the objective's speed
            rate = scored / max(time.monotonic() - began, 1e-6)               # plans per second
        size = int(np.clip(rate * RANGE_S if scored else GROWTH * size, 1, min(GROWTH * size, CHUNK)))
    best = sorted(search.worker.range_results(), key=lambda b: (b["cycles"], b["at"]))[:KEEP]
    finalists = np.array([b["idx"] for b in best], dtype=np.int16).reshape(-1, len(profile.choices))
    search.recall(finalists)                                    # measured in other workers' ranges: not run again
    found = search.cached_hits, search.cached_failed           # the finalists were counted with their ranges
    values = search.evaluate(finalists, {"phase": "finalist", "profile": profile.name}, counted=False) if len(finalists) else []
    search.cached_hits, search.cached_failed = found
    top = [Candidate(finalists[k], float(values[k]), True) for k in np.argsort(values, kind="stable") if np.isfinite(values[k])]
    if best:
        search.report(search.evaluations, total, f"best {shown(best[0]['cycles'])}")
    finished = "exhausted" if total == profile.size else "evaluation budget"
    return search.finish(top[:FINALISTS], stopped or finished, {"profile": profile.name, "size": profile.size})
