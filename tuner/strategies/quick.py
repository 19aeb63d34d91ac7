"""``quick``: Optuna TPE over the whole space (seeded), then a local polish of its best plan.

TPE explores for the first ``EXPLORE_SHARE`` of the evaluation budget (ordinal knobs as integer
indices so it sees their order; nominal knobs categorical; infeasible or incorrect plans are
told as pruned); :func:`tuner.strategies.checkpoint.climb` spends the rest around its best plan.
"""

from __future__ import annotations

import numpy as np
import optuna
from optuna.samplers import TPESampler
from optuna.trial import TrialState, create_trial

from tuner.search import Outcome, Search
from tuner.space import DISTRIBUTIONS, from_params, to_params
from tuner.strategies.checkpoint import climb

EXPLORE_SHARE = 0.3
STARTUP_TRIALS = 20
EI_CANDIDATES = 24


def run(search: Search) -> Outcome:
    sampler = TPESampler(seed=search.spec.seed + search.evaluations, multivariate=True, n_startup_trials=STARTUP_TRIALS,
                         n_ei_candidates=EI_CANDIDATES)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    for h, value in search.seen.items():               # resume: TPE remembers what earlier runs told it
        params = to_params(search.cache[h].idx)
        if np.isfinite(value):
            study.add_trial(create_trial(params=params, distributions=DISTRIBUTIONS, value=value))
        else:
            study.add_trial(create_trial(params=params, distributions=DISTRIBUTIONS, state=TrialState.PRUNED))
    explore = int(search.spec.max_evals * EXPLORE_SHARE)
    proposals = 0
    stopped = search.stop_reason()
    while stopped is None and search.evaluations < explore and proposals < 20 * search.spec.max_evals:
        trial = study.ask(DISTRIBUTIONS)
        proposals += 1
        value = float(search.evaluate(from_params(trial.params)[None], {"phase": "tpe"})[0])
        if np.isfinite(value):
            study.tell(trial, value)
        else:
            study.tell(trial, state=TrialState.PRUNED)
        stopped = search.stop_reason()
    if stopped is None and search.best is not None:
        stopped = climb(search, search.best.idx)
    return search.finish(search.top(), stopped or "converged")
