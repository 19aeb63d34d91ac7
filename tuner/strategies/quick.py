"""``quick``: TPE over the whole space (seeded) and local polish.

TPE (:mod:`.parzen`, Optuna's default multivariate TPE with every knob categorical; infeasible or
incorrect configurations told as failed) explores: it proposes values that did well together, and
the polish below is what sees the knobs' order. Its first trials (as many as Optuna's random start,
10) are a space-filling design: each knob's values spread evenly over them. A proposal the search had
already scored costs no evaluation and is told again. After each exploration share, up to ``STARTS``
of the best configurations that lie apart from one another (distinct basins) are polished by the steps of
:func:`tuner.strategies.checkpoint.climb` (first-improvement moves through singles, the joint moves of
learned pairs and repaired moves, ordered by the model the search learns from its own evaluations
(:mod:`.interactions`), with a patience, without its wider phases). Everything the climbs score is
told to TPE too, and exploration resumes. The last ``ENDGAME`` share of the budget is kept for a climb
from the best without patience, so that what a run returns has, budget allowing, no improving step
neighbour; whatever that climb leaves (all of it when nothing scored has a value) goes to exploration
and polish again.

TPE's cost per proposal grows with the trials it holds, so it holds a window: past ``WINDOW``
trials it keeps the best and the most recent quarter-window each (distinct configurations), so this
comes at most once per half-window of trials told.
"""

from __future__ import annotations

from itertools import islice

import numpy as np

from tuner.search import Outcome, Search
from tuner.space import WHOLE_SPACE, Space, load_profile
from tuner.strategies.checkpoint import climb
from tuner.strategies.parzen import STARTUP_TRIALS, Parzen, gamma

FIRST_EXPLORATION = 0.25           # share of the budget TPE explores before the first polish
LATER_EXPLORATION = 0.1            # share between later polishes
PATIENCE = 2                       # a polish ends after this many new non-improving neighbours per varying knob
ENDGAME = 0.1                      # share of the budget kept for the last climb: from the best, without patience
STARTS = 3                         # basins polished after each exploration share
WINDOW = 300                       # trials TPE holds at most (its cost per ask grows with them)
DESIGN_TRIES = 50                  # redraws of a design row that the cheap feasibility check rules out
CROWDED = 16                       # random proposals in a row that were scored before: the space is nearly all scored
LISTED = 1 << 20                   # configurations of a space small enough to list what is left of it


def design(space: Space, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` configurations, each knob's values spread evenly over them (a Latin-hypercube-like
    design in index space); rows ``feasible`` rules out are redrawn a bounded number of times."""
    columns = [rng.permutation(np.arange(count) % size) for size in space.sizes]
    return np.stack(columns, axis=1).astype(np.int16).reshape(count, len(space.knobs))


def feasible_design(search: Search, rng: np.random.Generator) -> np.ndarray:
    """The first ``STARTUP_TRIALS`` configurations of a search: :func:`design`, rows the objective rules out redrawn
    (``DESIGN_TRIES`` times at random, then among what the space's restrictions allow, however few that is)."""
    rows = design(search.space, STARTUP_TRIALS, rng)
    for _ in range(DESIGN_TRIES):
        bad = ~search.objective.feasible(rows)
        if not bad.any():
            return rows
        rows[bad] = search.space.uniform(bad.sum(), rng)
    bad = np.flatnonzero(~search.objective.feasible(rows))
    drawn = search.space.draw(len(bad), rng)
    rows[bad[:len(drawn)]] = drawn
    return rows


def _since(seen: dict[str, float], cursor: int) -> list[str]:
    """The hashes the search scored after its first ``cursor``, in order: read from the end of ``seen``, so a call
    costs what was added since, not the whole history."""
    return list(islice(reversed(seen), len(seen) - cursor))[::-1]


class _Tpe:
    """A seeded TPE (:class:`.parzen.Parzen`) told every evaluation of the search, holding at most ``WINDOW`` trials."""

    def __init__(self, search: Search) -> None:
        self.search, self.told, self.cursor, self.stalled = search, set[str](), 0, 0
        self.parzen = Parzen(search.space, search.seed + search.evaluations)
        self.left: np.ndarray | None = None                 # per configuration of a listed space: allowed and not scored
        self.left_cursor = 0

    def tell_seen(self) -> None:
        """Tell TPE what the search scored that it has not been told (climbs, earlier runs)."""
        new = [h for h in _since(self.search.seen, self.cursor) if h not in self.told]
        self.cursor = len(self.search.seen)
        self.told.update(new)
        self._add(new)
        self._bound()

    def _add(self, hashes: list[str]) -> None:
        for h in hashes:
            self.parzen.tell(self.search.cache[h].idx, self.search.seen[h])

    def _bound(self) -> None:
        if len(self.parzen) < WINDOW:
            return
        seen = self.search.seen
        ranked = sorted(self.told, key=lambda h: (seen[h], h))[:WINDOW // 4]      # ties by hash: the same window every process
        recent = [h for h in list(seen)[-WINDOW:] if h in self.told]
        self.parzen.forget()                                                # keeps at most half the window: a cut's
        self._add(list(dict.fromkeys(ranked + recent[-WINDOW // 4:])))     # cost is spread over half a window of asks

    def _left(self) -> np.ndarray | None:
        """Per configuration of the space (in :meth:`Profile.plans` order): whether the cheap check allows it, the
        search has not scored it and no other worker was found scoring it; ``None`` for a space of more than ``LISTED``
        configurations."""
        space, seen = self.search.space, self.search.seen
        if space.size > LISTED:
            return None
        if self.left is None:
            self.left = self.search.objective.feasible(load_profile(WHOLE_SPACE, space).plans(0, space.size))
        new = [self.search.cache[h].idx for h in _since(seen, self.left_cursor)]
        self.left_cursor = len(seen)
        if new:
            self.left[np.ravel_multi_index(np.stack(new, axis=1), space.sizes)] = False
        return self.left

    def propose(self) -> bool:
        """Ask TPE for one configuration, score it and tell the result, even when the search had scored it
        before: a repeated proposal weighs its configuration once more, which sharpens TPE around it.

        On knobs with few values TPE's choice is nearly deterministic, so once its good density is copies
        of one configuration it would propose that one again and again, an ask each time and no evaluation.
        So after a proposal that was not new, the next is the best of TPE's candidates that the search has
        not scored; when every candidate was scored, or as many proposals in a row as that density holds
        were not new, proposals are uniform at random (TPE's prior) until one is new. Where ``CROWDED`` of those
        in a row were not new either and the space is small enough to list, the proposal is drawn among the
        configurations left. False, proposing nothing, once none is left (every one the space allows is scored, or
        being scored by another worker)."""
        search, patience, idx = self.search, gamma(WINDOW), None
        if 0 < self.stalled < patience:
            idx = next((row for row in self.parzen.candidates() if search.space.hash_idx(row) not in search.seen), None)
            if idx is None:
                self.stalled = patience
        if idx is None and self.stalled >= patience + CROWDED and (left := self._left()) is not None:
            if not left.any():
                return False
            idx = np.array(np.unravel_index(self.parzen.rng.choice(np.flatnonzero(left)), search.space.sizes), dtype=np.int16)
        if idx is None:
            idx = self.parzen.ask(at_random=self.stalled >= patience)
            if self.stalled >= patience and search.space.conditions and not search.objective.feasible(idx[None])[0]:
                idx = next(iter(search.space.draw(1, self.parzen.rng)), idx)     # the restrictions allow few
        evaluations = search.evaluations
        value = float(search.evaluate(idx[None], {"phase": "tpe"})[0])
        self.stalled = 0 if search.evaluations > evaluations else self.stalled + 1
        if (h := search.space.hash_idx(idx)) in search.seen:        # scored, not ruled out before scoring
            self.told.add(h)
        if h not in search.elsewhere:                               # another worker is scoring it: told once it is synced
            self.parzen.tell(idx, value)
            self._bound()
        elif self.left is not None:                                 # not left to draw: the study waits for it at its end
            self.left[np.ravel_multi_index(idx, search.space.sizes)] = False
        return True


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


def _explore_and_polish(search: Search, tpe: _Tpe, polished: set[str], first: int | None = None) -> None:
    """TPE proposals, and after each exploration share (the first of ``first`` evaluations, by default a later
    share) a polish of the best configurations that lie apart, until the budget (as it stands) is spent."""
    budget = search.spec.max_evals
    later = max(int(budget * LATER_EXPLORATION), 1)
    mark = search.evaluations + (later if first is None else first)
    proposals = 0
    while search.stop_reason() is None and proposals < 20 * budget:
        if search.evaluations >= mark and search.best is not None:
            for start in _starts(search, polished):
                polished.add(search.space.hash_idx(start))
                climb(search, start, phases=(), patience=PATIENCE * int((search.space.sizes > 1).sum()))
                tpe.tell_seen()
                if search.stop_reason():
                    break
            mark = search.evaluations + later
        elif tpe.propose():
            tpe.tell_seen()
            proposals += 1
        else:                                           # nothing left to propose
            break


def run(search: Search) -> Outcome:
    tpe = _Tpe(search)
    tpe.tell_seen()                                       # resume: TPE remembers what earlier runs scored
    if not tpe.told:
        search.evaluate(feasible_design(search, np.random.default_rng(search.spec.seed)), {"phase": "design"})
        tpe.tell_seen()
    polished: set[str] = set()
    budget = search.spec.max_evals
    with search.holding_back(int(budget * ENDGAME)):
        _explore_and_polish(search, tpe, polished, max(int(budget * FIRST_EXPLORATION), STARTUP_TRIALS))
    if search.stop_reason() is None:
        if search.best is not None:
            climb(search, search.best.idx, phases=())     # no patience: the best's whole step neighbourhood
            tpe.tell_seen()
        _explore_and_polish(search, tpe, polished)        # what the climb left (the whole share when there is no best)
    return search.finish(search.top(), search.stop_reason() or "converged")
