"""``quick``: Optuna TPE over the whole space (seeded), the learned model's picks, and local polish.

TPE explores (univariate, Optuna's defaults otherwise; ordinal knobs as integer indices so it sees
their order; nominal knobs categorical; infeasible or incorrect configurations are told as pruned).
Its first trials are a space-filling design: every value of every knob appears about equally often.
Every other exploration step is the learned model's pick instead (:mod:`.interactions`: main
effects and interacting pairs of the search's own evaluations): the unseen candidate it predicts
best among those not likely to fail. After each exploration share, up to ``STARTS`` of the best
configurations that lie apart from one another (distinct basins) are polished by the steps of
:func:`tuner.strategies.checkpoint.climb` (model-ordered first-improvement moves through singles,
the joint moves of learned pairs and repaired moves, with a patience, without its wider phases).
Everything the climbs score is told to TPE too, and exploration resumes until the budget is spent.

TPE's cost per proposal grows with the trials it holds, so it holds a window: past ``WINDOW``
trials its study is rebuilt from the best and the most recent quarter-window each, so rebuilds
come at most once per half-window of trials told.
"""

from __future__ import annotations

from itertools import islice

import numpy as np
import optuna
from optuna.samplers import TPESampler
from optuna.trial import TrialState, create_trial

from tuner.search import Outcome, Search
from tuner.space import WHOLE_SPACE, Profile, Space
from tuner.strategies.checkpoint import LIKELY_TO_FAIL, climb
from tuner.strategies.interactions import learned
from tuner.strategies.neighbourhood import singles

FIRST_EXPLORATION = 0.25           # share of the budget TPE explores before the first polish
LATER_EXPLORATION = 0.1            # share between later polishes
STARTUP_TRIALS = 20                # the space-filling design, before TPE's model
EI_CANDIDATES = 24                 # Optuna's default
MULTIVARIATE = False               # joint Parzen estimators did worse on the measured caches (perf/real_caches.py)
PATIENCE = 2                       # a polish ends after this many non-improving neighbours per varying knob
STARTS = 3                         # basins polished after each exploration share
WINDOW = 300                       # trials TPE holds at most (its cost per ask grows with them)
POOL_LIMIT = 200_000               # spaces up to this size are listed whole for the model's pick
POOL_SAMPLE = 20_000               # random candidates for the model's pick in larger spaces
PICK_TRIES = 1000                  # best-predicted candidates checked for one the search has not seen
DESIGN_TRIES = 50                  # redraws of a design row that the cheap feasibility check rules out


def design(space: Space, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` configurations, each knob's values spread evenly over them (a Latin-hypercube-like
    design in index space); rows ``feasible`` rules out are redrawn a bounded number of times."""
    columns = [rng.permutation(np.arange(count) % size) for size in space.sizes]
    return np.stack(columns, axis=1).astype(np.int16).reshape(count, len(space.knobs))


def _feasible_design(search: Search, rng: np.random.Generator) -> np.ndarray:
    rows = design(search.space, STARTUP_TRIALS, rng)
    for _ in range(DESIGN_TRIES):
        bad = ~search.objective.feasible(rows)
        if not bad.any():
            break
        rows[bad] = np.stack([rng.integers(0, size, bad.sum()) for size in search.space.sizes], axis=1)
    return rows


class _Tpe:
    """A seeded TPE study told every evaluation of the search, holding at most ``WINDOW`` trials."""

    def __init__(self, search: Search) -> None:
        self.search, self.told = search, set[str]()
        self.seed = search.seed + search.evaluations
        self.study, self.size, self.cursor = self._study(), 0, 0

    def _study(self) -> optuna.Study:
        sampler = TPESampler(seed=self.seed, multivariate=MULTIVARIATE, n_startup_trials=STARTUP_TRIALS, n_ei_candidates=EI_CANDIDATES)
        self.seed += 1
        return optuna.create_study(direction="minimize", sampler=sampler)

    def _add(self, study: optuna.Study, hashes: list[str]) -> None:
        space = self.search.space
        self.size += len(hashes)
        for h in hashes:
            value = self.search.seen[h]
            finite = bool(np.isfinite(value))
            study.add_trial(create_trial(params=space.to_params(self.search.cache[h].idx), distributions=space.distributions,
                                         state=TrialState.COMPLETE if finite else TrialState.PRUNED,
                                         value=value if finite else None))

    def tell_seen(self) -> None:
        """Tell TPE what the search scored that it has not been told (climbs, earlier runs)."""
        new = [h for h in islice(self.search.seen, self.cursor, None) if h not in self.told]
        self.cursor = len(self.search.seen)
        self.told.update(new)
        self._add(self.study, new)
        self._bound()

    def _bound(self) -> None:
        if self.size < WINDOW:
            return
        seen = self.search.seen
        ranked = sorted(self.told, key=lambda h: (seen[h], h))[:WINDOW // 4]      # ties by hash: the same window every process
        recent = [h for h in list(seen)[-WINDOW:] if h in self.told]
        keep = list(dict.fromkeys(ranked + recent[-WINDOW // 4:]))          # at most half the window: a rebuild's cost
        self.study, self.size = self._study(), 0                            # is spread over half a window of asks
        self._add(self.study, keep)

    def propose(self) -> None:
        """Ask TPE for one configuration, score it and tell the result."""
        search = self.search
        trial = self.study.ask(search.space.distributions)
        idx = search.space.from_params(trial.params)
        value = float(search.evaluate(idx[None], {"phase": "tpe"})[0])
        if (h := search.space.hash_idx(idx)) in search.seen:        # scored, not ruled out before scoring
            self.told.add(h)
        self.size += 1
        if h in search.elsewhere:                                   # another worker is scoring it: told once it is synced
            self.study.tell(trial, state=TrialState.FAIL)
        else:
            self.study.tell(trial, value) if np.isfinite(value) else self.study.tell(trial, state=TrialState.PRUNED)
        self._bound()


def _starts(search: Search, polished: set[str]) -> list[np.ndarray]:
    """The best unpolished configurations, up to ``STARTS``, each differing from those chosen before it in
    at least a quarter of the knobs (at least two): distinct basins rather than one basin three times."""
    apart = max(2, len(search.space.knobs) // 4)
    chosen: list[np.ndarray] = []
    for _, h in sorted((v, h) for h, v in search.seen.items() if np.isfinite(v) and h not in polished):
        idx = search.cache[h].idx
        if all((idx != c).sum() >= apart for c in chosen):
            chosen.append(idx)
            if len(chosen) == STARTS:
                break
    return chosen


def _pool(search: Search, rng: np.random.Generator) -> np.ndarray:
    """Candidates for the model's pick: the whole space where it is small enough to list, else a random
    sample, with the singles of the best configurations; what cheap feasibility rules out is dropped."""
    space = search.space
    if space.size <= POOL_LIMIT:
        if "pool" not in search.memo:
            every = Profile(WHOLE_SPACE, "", tuple(tuple(range(int(s))) for s in space.sizes)).plans(0, space.size)
            search.memo["pool"] = every[search.objective.feasible(every)]
        return search.memo["pool"]
    sample = np.stack([rng.integers(0, int(s), POOL_SAMPLE) for s in space.sizes], axis=1).astype(np.int16)
    best = [c.idx for c in search.top(3)]
    rows = np.concatenate([sample, *(singles(space, b) for b in best)])
    return rows[search.objective.feasible(rows)]


def _model_pick(search: Search, rng: np.random.Generator) -> bool:
    """Score the unseen candidate the learned model predicts best (and not likely to fail); False if none."""
    model = learned(search)
    if not model.effects:
        return False
    pool = _pool(search, rng)
    predicted = model.predict(pool)
    predicted[model.failure(pool) > LIKELY_TO_FAIL] = np.inf
    for i in np.argsort(predicted, kind="stable")[:PICK_TRIES]:
        if np.isfinite(predicted[i]) and search.space.hash_idx(pool[i]) not in search.seen:
            search.evaluate(pool[i][None], {"phase": "model"})
            return True
    return False


def run(search: Search) -> Outcome:
    tpe = _Tpe(search)
    rng = np.random.default_rng(search.seed + 1)
    tpe.tell_seen()                                       # resume: TPE remembers what earlier runs scored
    if not tpe.told:
        search.evaluate(_feasible_design(search, np.random.default_rng(search.spec.seed)), {"phase": "design"})
        tpe.tell_seen()
    polished: set[str] = set()
    budget = search.spec.max_evals
    mark = search.evaluations + max(int(budget * FIRST_EXPLORATION), STARTUP_TRIALS)
    proposals = 0
    stopped = search.stop_reason()
    while stopped is None and proposals < 20 * budget:
        if search.evaluations >= mark and search.best is not None:
            for start in _starts(search, polished):
                polished.add(search.space.hash_idx(start))
                climb(search, start, phases=(), patience=PATIENCE * int((search.space.sizes > 1).sum()))
                tpe.tell_seen()
                if search.stop_reason():
                    break
            mark = search.evaluations + max(int(budget * LATER_EXPLORATION), 1)
        else:
            if not (proposals % 2 and _model_pick(search, rng)):
                tpe.propose()
            tpe.tell_seen()
            proposals += 1
        stopped = search.stop_reason()
    return search.finish(search.top(), stopped or "converged")
