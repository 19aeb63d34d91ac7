"""``quick``: Optuna TPE over the whole space (seeded), alternating with local polish.

TPE explores (ordinal knobs as integer indices so it sees their order; nominal knobs
categorical; infeasible or incorrect plans are told as pruned). Its first trials are stratified
over the schedule x num_warps regimes, the pair of knobs that interact most (split_pipeline pays
only with 8 warps), so no regime goes unseen. After each exploration share, the best plans of the
best ``STARTS`` regimes are polished by the steps of :func:`tuner.strategies.checkpoint.climb`
(first-improvement moves through singles, coupled and repaired moves, without its wider phases);
everything the climbs score is told to TPE too, and exploration resumes until the budget is spent.
"""

from __future__ import annotations

from itertools import product

import numpy as np
import optuna
from optuna.samplers import TPESampler
from optuna.trial import TrialState, create_trial

from tuner.knobs import KNOBS, POSITION
from tuner.plan import decode, plan_hash
from tuner.search import Outcome, Search
from tuner.space import DISTRIBUTIONS, from_params, to_params
from tuner.strategies.checkpoint import climb

FIRST_EXPLORATION = 0.25           # share of the budget TPE explores before the first polish
LATER_EXPLORATION = 0.1            # share between later polishes
STARTUP_TRIALS = 20
EI_CANDIDATES = 8                  # fewer than Optuna's 24: cheaper asks, and no worse on this space (perf/tuner_speed.py)
REGIME = (POSITION["schedule"], POSITION["num_warps"])
STARTS = 3                         # regimes polished after each exploration share


def _tell_seen(study: optuna.Study, search: Search, told: set[str]) -> None:
    for h, value in search.seen.items():
        if h not in told:
            told.add(h)
            params = to_params(search.cache[h].idx)
            state = TrialState.COMPLETE if np.isfinite(value) else TrialState.PRUNED
            study.add_trial(create_trial(params=params, distributions=DISTRIBUTIONS, state=state,
                                         value=value if np.isfinite(value) else None))


def _starts(search: Search, polished: set[str]) -> list[np.ndarray]:
    """The best unpolished plan of each of the best ``STARTS`` regimes (schedule x warps) seen so far."""
    best: dict[tuple[int, int], tuple[float, str]] = {}
    for h, value in search.seen.items():
        if np.isfinite(value) and h not in polished:
            key = tuple(int(search.cache[h].idx[j]) for j in REGIME)
            if key not in best or value < best[key][0]:
                best[key] = (value, h)
    ranked = sorted(best.values())[:STARTS]
    return [search.cache[h].idx for _, h in ranked]


def run(search: Search) -> Outcome:
    sampler = TPESampler(seed=search.spec.seed + search.evaluations, multivariate=True, n_startup_trials=STARTUP_TRIALS,
                         n_ei_candidates=EI_CANDIDATES)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    told: set[str] = set()
    _tell_seen(study, search, told)                       # resume: TPE remembers what earlier runs told it
    if not told:                                          # stratified start: every schedule x warps regime twice
        schedules, warps = KNOBS[REGIME[0]], KNOBS[REGIME[1]]
        for _, schedule, warp in product(range(2), schedules.choices, range(warps.size)):
            study.enqueue_trial({schedules.name: schedule, warps.name: warp})
    polished: set[str] = set()
    budget = search.spec.max_evals
    mark = search.evaluations + max(int(budget * FIRST_EXPLORATION), STARTUP_TRIALS)
    proposals = 0
    stopped = search.stop_reason()
    while stopped is None and proposals < 20 * budget:
        if search.evaluations >= mark and search.best is not None:
            for start in _starts(search, polished):
                polished.add(plan_hash(decode(start)))
                climb(search, start, phases=())
                _tell_seen(study, search, told)
                if search.stop_reason():
                    break
            mark = search.evaluations + max(int(budget * LATER_EXPLORATION), 1)
        else:
            trial = study.ask(DISTRIBUTIONS)
            proposals += 1
            idx = from_params(trial.params)
            value = float(search.evaluate(idx[None], {"phase": "tpe"})[0])
            told.add(plan_hash(decode(idx)))
            study.tell(trial, value) if np.isfinite(value) else study.tell(trial, state=TrialState.PRUNED)
        stopped = search.stop_reason()
    return search.finish(search.top(), stopped or "converged")
