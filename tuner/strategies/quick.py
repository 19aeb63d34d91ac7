"""``quick``: Optuna TPE over the whole space (seeded), alternating with local polish.

TPE explores (ordinal knobs as integer indices so it sees their order; nominal knobs
categorical; infeasible or incorrect plans are told as pruned). Whenever exploration has found a
new best plan, :func:`tuner.strategies.checkpoint.climb` polishes it; everything the climb scores
is told to TPE too, and exploration resumes until the budget is spent.
"""

from __future__ import annotations

import numpy as np
import optuna
from optuna.samplers import TPESampler
from optuna.trial import TrialState, create_trial

from tuner.plan import decode, plan_hash
from tuner.search import Outcome, Search
from tuner.space import DISTRIBUTIONS, from_params, to_params
from tuner.strategies.checkpoint import climb

FIRST_EXPLORATION = 0.3            # share of the budget TPE explores before the first polish
LATER_EXPLORATION = 0.1            # share between later polishes
STARTUP_TRIALS = 20
POLISH = ("single", "combined")    # the climb's cheap neighbourhoods; full pairs are checkpoint's job


def _tell_seen(study: optuna.Study, search: Search, told: set[str]) -> None:
    for h, value in search.seen.items():
        if h not in told:
            told.add(h)
            params = to_params(search.cache[h].idx)
            state = TrialState.COMPLETE if np.isfinite(value) else TrialState.PRUNED
            study.add_trial(create_trial(params=params, distributions=DISTRIBUTIONS, state=state,
                                         value=value if np.isfinite(value) else None))


def run(search: Search) -> Outcome:
    sampler = TPESampler(seed=search.spec.seed + search.evaluations, multivariate=True, n_startup_trials=STARTUP_TRIALS)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    told: set[str] = set()
    _tell_seen(study, search, told)                       # resume: TPE remembers what earlier runs told it
    polished: set[str] = set()
    budget = search.spec.max_evals
    mark = search.evaluations + max(int(budget * FIRST_EXPLORATION), STARTUP_TRIALS)
    proposals = 0
    stopped = search.stop_reason()
    while stopped is None and proposals < 20 * budget:
        if search.evaluations >= mark and search.best is not None:
            best = plan_hash(decode(search.best.idx))
            if best not in polished:
                polished.add(best)
                climb(search, search.best.idx, POLISH)
                _tell_seen(study, search, told)
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
