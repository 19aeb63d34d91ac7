"""``exhaustive``: every plan of a profile, scored in batches by index.

Plans are enumerated by index in chunks and scored with the objective's fast path; the best
``KEEP`` stay. The resume point (plans done and the running best) is written after every chunk,
so a killed sweep continues where its last write left it. At the end the finalists' correctness
is checked and they become the study's trials; ``include_final`` checks the dev winners in final
mode too. A sweep of millions records its top candidates and a sweep record, not millions of trials.
"""

from __future__ import annotations

import numpy as np

from tuner.search import Candidate, Outcome, Search, number

CHUNK = 1 << 18
KEEP = 64
FINALISTS = 16


def run(search: Search) -> Outcome:
    profile = search.spec.profile
    if profile is None:
        raise ValueError("exhaustive needs a profile")
    state = search.progress_state or {"profile": profile.name, "size": profile.size, "done": 0, "best": []}
    best = {tuple(b["idx"]): b["cycles"] for b in state["best"]}
    done = state["done"]
    stopped = None
    while done < profile.size:
        stopped = search.stop_reason()
        if stopped:
            break
        idx = profile.plans(done, done + min(CHUNK, search.remaining))
        cycles = search.objective.cycles(idx, search.spec.mode)
        cycles[~search.space.allowed(idx)] = np.inf                 # restrictions; the objective knows the rest
        keep = np.argsort(cycles, kind="stable")[:KEEP]
        best.update({tuple(int(v) for v in idx[k]): float(cycles[k]) for k in keep if np.isfinite(cycles[k])})
        best = dict(sorted(best.items(), key=lambda item: item[1])[:KEEP])
        done += len(idx)
        search.evaluations += len(idx)
        state = {"profile": profile.name, "size": profile.size, "done": done,
                 "best": [{"idx": list(k), "cycles": v} for k, v in best.items()]}
        search.report(done, profile.size, f"best {number(min(best.values())) if best else '-'}")
        search.flush(state)
    finalists = np.array(list(best), dtype=np.int16).reshape(-1, len(profile.choices))
    values = search.evaluate(finalists, {"phase": "finalist", "profile": profile.name}, counted=False) if len(finalists) else []
    top = [Candidate(finalists[k], float(values[k]), True) for k in np.argsort(values, kind="stable") if np.isfinite(values[k])]
    return search.finish(top[:FINALISTS], "exhausted" if done >= profile.size else stopped or "time budget", state)
