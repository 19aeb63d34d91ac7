"""A search run: the machinery every strategy shares.

Strategies only propose configurations (index vectors of the objective's space); :class:`Search`
filters out what is cheaply known infeasible, answers what the history already holds from the
cache, claims the rest (:mod:`tuner.claims`: workers on other processes and hosts share the study
and its budget, and never score a plan twice), scores them in batches, tracks the best correct
configuration, learns what the other workers scored, shows progress (a bar on a terminal, else a log
line every ``PROGRESS_S`` seconds) and writes history in bulk.
Nothing here knows a knob.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

from tuner import stopping
from tuner.claims import Worker
from tuner.history import History, Row, TrialRecord, rows_of
from tuner.objectives import Evaluations, Objective
from tuner.objectives.base import reason_group, runs_program
from tuner.space import Space

Progress = Callable[[int, int, str], None]


DASHBOARD_TRIALS = 200              # a run's first trials, all kept as Optuna trials; past them, improvements and every 20th
THIN_EVERY = 20                     # (every evaluation stays in tuner_members: resume and the summaries stay exact)
SYNC_S = 1.0                        # how often a search reads what the study's other workers scored
POLL_S = 1.0                        # the longest wait between looks at work other workers are finishing
REASONS_SHOWN = 3                   # the most common failure reasons a search's result lists
PROGRESS_S = 30.0                   # how often a search logs where it stands when no terminal shows its progress bar

@dataclass(frozen=True)
class Spec:
    """What to search: ``strategy`` and its target in ``mode`` (the objective's first mode); budgets
    count new evaluations and seconds; ``include_final`` checks the finalists in the objective's
    held-out mode, where it has one."""

    strategy: str
    mode: str
    max_evals: int = 500
    time_s: float | None = None
    seed: int = 0
    start: tuple[int, ...] | None = None        # index vector to start from (checkpoint, focused)
    target: str = "space"                       # what the study is about: fixture, plan hash, profile
    profile: Any = None                         # a tuner.space.Profile (exhaustive)
    include_final: bool = False
    remeasure: frozenset[str] = frozenset()     # plan hashes whose failures the history holds count as not measured

    def study_name(self, objective: str) -> str:
        """The study (and resume key) of this search against ``objective``."""
        return f"{self.strategy}:{self.target}:{self.mode}:seed{self.seed}@{objective}"


def of_optimum(optimum: float, found: float | None) -> float:
    """The fraction of a known optimum that a best value ``found`` reaches (lower is better, so optimum / found: 1.0
    where it is the optimum), to 4 places; 0.0 where nothing was found."""
    return round(optimum / found, 4) if found else 0.0


def number(value: float | None) -> int | float | None:
    """A value as JSON shows it best: an integer when it is one (cycles), else the float (ms)."""
    if value is None or not np.isfinite(value):
        return None
    return int(value) if float(value).is_integer() else float(value)


def shown(value: float | None) -> str:
    """A value as people read it: ``178,866`` (cycles), ``68.1166`` (ms, six significant digits); ``-`` for none."""
    value = number(value)
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else f"{value:,.6g}"


@dataclass
class Candidate:
    """A scored configuration: its value in the search's mode and, when checked, in the held-out mode."""

    idx: np.ndarray
    value: float
    correct: bool
    held_out: float | None = None
    held_out_correct: bool | None = None

    def as_dict(self, space: Space, modes: tuple[str, ...]) -> dict[str, Any]:
        """``{plan_hash, plan, MODE: value, correct[, HELD_OUT: value, HELD_OUT_correct]}``."""
        plan = space.decode(self.idx)
        out: dict[str, Any] = {"plan_hash": space.hash(plan), "plan": plan, modes[0]: number(self.value), "correct": self.correct}
        if self.held_out is not None and len(modes) > 1:
            out |= {modes[1]: number(self.held_out), f"{modes[1]}_correct": self.held_out_correct}
        return out


@dataclass
class Outcome:
    """What a search did: new evaluations, cache hits, seconds, and its best candidates (best first)."""

    study_name: str
    strategy: str
    evaluations: int
    new_evaluations: int
    trials: int
    cached: int
    seconds: float
    stopped: str
    top: list[Candidate] = field(default_factory=list)
    failed: int = 0                                             # new evaluations without a value
    failure_reasons: dict[str, int] = field(default_factory=dict)   # their most common reasons, with counts
    cached_failed: int = 0                                      # cache hits without a value: found failed before, not measured again

    @property
    def best(self) -> Candidate | None:
        return self.top[0] if self.top else None


class Search:
    """One run of ``spec`` against ``objective``, recorded in ``history``: one worker of the study, which any
    number of processes running the same search share. ``seed`` is the spec's for the study's first worker
    and a stream of its own for every other, so workers explore apart. :meth:`finish` or :meth:`close` ends it."""

    def __init__(self, history: History, objective: Objective, spec: Spec, progress: Progress | None = None,
                 should_stop: Callable[[], bool] | None = None, flush_every: int = 256, flush_seconds: float = 2.0,
                 worker: int | None = None, log: Callable[[str], None] | None = None) -> None:
        self.history, self.objective, self.spec, self.space = history, objective, spec, objective.space
        self.held_out_mode = objective.modes[1] if spec.include_final and len(objective.modes) > 1 else None
        self.name = spec.study_name(objective.name)
        self.study = history.study(self.name, {"objective": objective.name, "strategy": spec.strategy},
                                   metric=f"{spec.mode} ({objective.unit})")
        self.cache = history.cached(objective.name, spec.mode)
        self.stale = history.stale(objective, spec.mode, self.cache)     # failures killed at a shorter limit: measured again
        self.stale |= {h for h in spec.remeasure if h in self.cache and self.cache[h].cycles is None}    # and those asked
        # an objective that runs a program (it has a time limit per run) is claimed and scored one configuration at a
        # time, so that the time budget or a cancel ends a batch between runs, not after hundreds of them
        self.one_by_one = runs_program(objective)
        # the configurations of those failures, by plan hash (an earlier run of the study puts those it saw back: sync)
        self.unmeasured = {h: self.cache.pop(h).idx for h in sorted(self.stale)}
        record = history.sweep(self.name)
        self.progress_state: dict[str, Any] = record["progress"] if record else {}
        # an earlier run of the study converged (no neighbour of its optimum improves): a rerun has nothing left to do
        self.converged = bool(record and record["state"] == "done" and self.progress_state.get("stopped") == "converged")
        self.scored = 0                                     # new evaluations this worker made (counted ones)
        self.worker = Worker(history, self.name, {"strategy": spec.strategy, "objective": objective.name, "mode": spec.mode,
                                                  "target": spec.target})
        self.seed = spec.seed if self.worker.slot == 0 else int(np.random.SeedSequence([spec.seed, self.worker.slot]).generate_state(1)[0])
        self.elsewhere: set[str] = set()                    # plans of the last batch that other workers are scoring
        self.trials_written = 0
        self._thinned = 0                                   # evaluations of this run kept as members only, not as trials
        self.cached_hits = self.cached_failed = 0
        self.failures: Counter[str] = Counter()             # reasons of this worker's new evaluations that have no value
        self.started = time.monotonic()
        self.seen: dict[str, float] = {}
        self._rows: list[Row] = []
        self._trials: list[TrialRecord] = []
        self._members: list[tuple[str, float | None]] = []
        self._last_flush = time.monotonic()
        self.flush_every, self.flush_seconds = flush_every, flush_seconds
        self.best: Candidate | None = None
        self.memo: dict[str, Any] = {}                      # what strategies keep for this run
        self._held_back = 0                                 # evaluations kept for a strategy's last phase (:meth:`holding_back`)
        self.synced, self._last_sync = -1, time.monotonic()
        self.sync()                                         # resume: what earlier runs (and other workers) saw
        self._external_progress = progress
        self._should_stop = should_stop
        label = spec.strategy if worker is None else f"{spec.strategy} worker {worker}"
        self._bar = tqdm(total=spec.max_evals, initial=min(self.evaluations, spec.max_evals), unit="eval", leave=False,
                         desc=label, position=worker or 0, disable=not sys.stderr.isatty(),
                         file=sys.stderr)        # a line of its own for each local worker
        # where no terminal shows the bar (a pipe, a log file, an agent's shell): a line every PROGRESS_S seconds
        self._log = (lambda line: log(f"{label}: {line}")) if log is not None and self._bar.disable else None
        self._logged = self.started

    # --- budgets ----------------------------------------------------------------------------

    @property
    def evaluations(self) -> int:
        """The study's evaluations, every worker's, as of this worker's last claim."""
        return self.worker.evaluations

    @property
    def budget(self) -> int:
        """The study's evaluation budget as it stands: the spec's, less what :meth:`holding_back` keeps."""
        return self.spec.max_evals - self._held_back

    @property
    def remaining(self) -> int:
        return max(self.budget - self.evaluations, 0)

    @contextmanager
    def holding_back(self, count: int) -> Iterator[None]:
        """Within, the evaluation budget ends ``count`` evaluations early: a strategy's reserve for its last phase."""
        previous, self._held_back = self._held_back, count
        try:
            yield
        finally:
            self._held_back = previous

    def stop_reason(self) -> str | None:
        """Why the search must stop now, or ``None``."""
        if self.remaining <= 0:
            return "evaluation budget"
        return self.interrupted()

    def interrupted(self) -> str | None:
        """The time budget or a cancel, or ``None``: the reasons to stop that do not wait for other workers. A stop
        signal that a finalizer swallowed is raised here again (:func:`tuner.stopping.check`)."""
        stopping.check()
        if self.spec.time_s is not None and time.monotonic() - self.started >= self.spec.time_s:
            return "time budget"
        if self._should_stop is not None and self._should_stop():
            return "cancelled"
        return None

    def report(self, done: int, total: int, message: str) -> None:
        """Progress to the terminal bar and to the caller's callback."""
        self._bar.total = total
        self._bar.n = min(done, total)
        self._bar.set_postfix_str(message, refresh=True)
        if self._external_progress is not None:
            self._external_progress(done, total, message)

    # --- evaluation -------------------------------------------------------------------------

    def evaluate(self, idx: np.ndarray, attrs: dict[str, Any] | None = None, counted: bool = True) -> np.ndarray:
        """Values of proposals in the search's mode (``inf`` for infeasible, incorrect, over budget, left unscored by
        the time budget or a cancel, or being scored by another worker: those are in ``elsewhere``), in order.

        Infeasible plans are never scored; plans the history holds come from the cache and do not count
        against the budget; new plans are claimed and scored up to the study's remaining budget (all of them
        when ``counted`` is false: the strategy accounts for them itself).
        """
        idx = np.asarray(idx, dtype=np.int16).reshape(-1, idx.shape[-1] if np.ndim(idx) > 1 else len(idx))
        feasible = self.objective.feasible(idx)
        hashes = [self.space.hash_idx(row) if ok else "" for row, ok in zip(idx, feasible, strict=True)]
        unseen: dict[str, int] = {}                         # plan hash -> first position in this batch
        for i, h in enumerate(hashes):
            if h and h not in self.seen and h not in unseen:
                unseen[h] = i
        self.elsewhere, others = set(), False
        for n, chunk in enumerate(self._chunks(unseen)):
            if n and self.interrupted():                    # a program's runs: the time budget or a cancel ends the batch
                break
            if self.one_by_one:                             # measured since this search started, by another study
                self.recall(idx[[i for h, i in chunk.items() if h not in self.cache]])
            claimed = self.worker.claim([(f"plan:{h}", int(counted and h not in self.cache), idx[i].tolist()) for h, i in chunk.items()],
                                        self.budget)
            self.elsewhere |= {item.removeprefix("plan:") for item in claimed.elsewhere}
            others = others or bool(claimed.done or claimed.elsewhere)
            granted = {item.removeprefix("plan:") for item in claimed.granted}
            for h in chunk:                                 # in the batch's order: the same members every run
                if h in granted and h in self.cache:
                    row = self.cache[h]
                    self._accept(row.idx, h, row.cycles, row.correct, row.max_abs, attrs, cached=True)
            self._score([chunk[h] for h in chunk if h in granted and h not in self.cache], idx, attrs, counted)
            if self._log is not None and (now := time.monotonic()) - self._logged >= PROGRESS_S:
                self._logged = now
                self._log(self._standing(now))
            if self.one_by_one and time.monotonic() - self._last_flush >= self.flush_seconds:
                self.flush()                                # a batch of a program's runs is kept as it goes, not at its end
        if others or time.monotonic() - self._last_sync >= SYNC_S:
            self.sync()
        values = np.array([self.seen.get(h, np.inf) if h else np.inf for h in hashes], dtype=float)
        if time.monotonic() - self._last_flush >= self.flush_seconds or len(self._rows) >= self.flush_every:
            self.flush()
        return values

    def _chunks(self, unseen: dict[str, int]) -> list[dict[str, int]]:
        """``unseen`` (plan hash -> position), in order, in the parts claimed and scored at once: all of it, or for an
        objective that runs a program (``one_by_one``) parts that each end with one configuration the history lacks."""
        if not self.one_by_one:
            return [unseen] if unseen else []
        chunks: list[dict[str, int]] = []
        chunk: dict[str, int] = {}
        for h, i in unseen.items():
            chunk[h] = i
            if h not in self.cache:
                chunks.append(chunk)
                chunk = {}
        return [*chunks, chunk] if chunk else chunks

    def _score(self, todo: list[int], idx: np.ndarray, attrs: dict[str, Any] | None, counted: bool) -> None:
        """Score the claimed configurations ``idx[todo]`` and accept their results."""
        if todo:
            result = self.objective.evaluate(idx[todo], self.spec.mode)
            self.scored += len(todo) * counted
            samples = result.samples or [[]] * len(todo)
            hashes = [self.space.hash_idx(idx[i]) for i in todo]
            for i, row, measured in zip(todo, self._cached(result, hashes, idx[todo]), samples, strict=True):
                extra = {"reason": row.reason} if row.reason is not None else {}
                extra |= {"samples": measured} if measured else {}              # a noisy objective's every measurement
                self._accept(idx[i], row.plan_hash, row.cycles, row.correct, row.max_abs,
                             {**(attrs or {}), **extra} if extra else attrs, cached=False)
            self._bar.update(len(todo) * counted)

    def _cached(self, result: Evaluations, hashes: list[str], idx: np.ndarray) -> list[Row]:
        """The cache rows of new results, added to the search's cache and to the rows the next flush writes; those
        without a value are counted by reason."""
        rows = rows_of(result, hashes, idx)
        for row in rows:
            self.cache[row.plan_hash] = row
            if row.cycles is None or not row.correct:
                self.count_failed(row.reason or ("incorrect" if row.cycles is not None else "infeasible"))
        self._rows += rows
        return rows

    def count_failed(self, reason: str | None, count: int = 1) -> None:
        """Count ``count`` new evaluations without a value, by the start of their ``reason`` (:func:`reason_group`)."""
        if count:
            self.failures[reason_group(reason)] += count

    def measure(self, idx: np.ndarray) -> tuple[np.ndarray, int]:
        """Values of ``idx`` in the search's mode (``inf``: ruled out, infeasible or incorrect) for a sweep that claims
        its own ranges, and how many the objective scored now: those the history holds come from its evaluation cache,
        the others are scored and go into it (not into the study's members or trials: a sweep keeps each range's
        best), so no plan is measured twice."""
        values = np.full(len(idx), np.inf)
        allowed = np.flatnonzero(self.objective.feasible(idx))
        hashes = [self.space.hash_idx(idx[i]) for i in allowed]
        if self.one_by_one:                                 # measured since this sweep started, by another study
            self.recall(idx[[i for i, h in zip(allowed, hashes, strict=True) if h not in self.cache]])
        todo = [k for k, h in enumerate(hashes) if h not in self.cache]
        held = [self.cache[h] for h in hashes if h in self.cache]
        self.cached_hits += len(held)
        self.cached_failed += sum(row.cycles is None or not row.correct for row in held)
        if todo:
            rows = idx[allowed[todo]]
            self._cached(self.objective.evaluate(rows, self.spec.mode), [hashes[k] for k in todo], rows)
        for i, h in zip(allowed, hashes, strict=True):
            row = self.cache[h]
            values[i] = row.cycles if row.cycles is not None and row.correct else np.inf
        return values, len(todo)

    def recall(self, idx: np.ndarray) -> None:
        """Add to the search's cache what the history now holds of ``idx`` (what other workers measured since this one
        started, in ranges of a sweep, which no plan claim records, or other studies of the objective), so that
        evaluating them runs nothing again. The failures this search is to measure again (``stale``) stay out."""
        if len(idx):
            found = self.history.scored(self.objective, self.spec.mode, idx, measure=False)
            self.cache |= {h: row for h, row in found.items() if h not in self.stale}

    def sync(self) -> None:
        """Learn what this study's evaluations are, in order, since the last look: earlier runs' and other workers'."""
        for seq, row, value in self.history.members(self.name, self.objective.name, self.spec.mode, self.synced):
            self.synced = seq
            if row.plan_hash not in self.seen:
                self.cache[row.plan_hash] = row
                self.seen[row.plan_hash] = value if value is not None else np.inf
                if value is not None and (self.best is None or value < self.best.value):
                    self.best = Candidate(row.idx, value, True)
        self._last_sync = time.monotonic()

    def _accept(self, idx: np.ndarray, h: str, cycles: float | None, correct: bool, max_abs: float | None,
                attrs: dict[str, Any] | None, cached: bool) -> None:
        value = cycles if (cycles is not None and correct) else np.inf
        self.seen[h] = value
        self.cached_hits += cached
        self.cached_failed += cached and not np.isfinite(value)
        record_attrs = {"correct": correct, "max_abs": max_abs, "cached": cached, **(attrs or {})}
        if cycles is not None and not correct:
            record_attrs["cycles"] = cycles
        improves = bool(np.isfinite(value) and (self.best is None or value < self.best.value))
        self._members.append((h, value if np.isfinite(value) else None))
        accepted = self.trials_written + len(self._trials) + self._thinned
        if improves or accepted < DASHBOARD_TRIALS or accepted % THIN_EVERY == 0:        # what a person looks at
            self._trials.append(TrialRecord(idx.copy(), value if np.isfinite(value) else None, record_attrs))
        else:
            self._thinned += 1
        if improves:
            self.best = Candidate(idx.copy(), value, True)
            self.report(self.evaluations, self.spec.max_evals, f"best {shown(value)}")

    def _standing(self, now: float) -> str:
        """Where the search stands: its evaluations against the budgets, failures, best value so far."""
        spec, failed = self.spec, sum(self.failures.values())
        best = f"{shown(self.best.value)} {self.objective.unit}" if self.best is not None else "none yet"
        return (f"{self.evaluations:,} of at most {spec.max_evals:,} evaluations ({self.scored:,} new, {failed:,} of them "
                f"failed), best {spec.mode} {best}, {now - self.started:,.0f} s"
                + (f" of {spec.time_s:,.0f} s" if spec.time_s is not None else ""))

    def flush(self, progress: dict[str, Any] | None = None, state: str = "running") -> None:
        """Write pending evaluations, trials and the resume point in one transaction."""
        if progress is not None:
            self.progress_state = progress
        sweep = {"study_name": self.name, "strategy": self.spec.strategy, "objective": self.objective.name,
                 "mode": self.spec.mode, "target": self.spec.target, "state": state, "progress": self.progress_state}
        replaced = {r.plan_hash for r in self._rows} & self.stale if self.stale else set()
        self.history.write(self.objective.name, self.spec.mode, self._rows, self.study._study_id, self._trials, sweep, self.space,
                           self._members, replaced)
        self.stale -= replaced
        self.trials_written += len(self._trials)
        self._rows, self._trials, self._members = [], [], []
        self._last_flush = time.monotonic()

    def finish(self, top: list[Candidate], stopped: str, progress: dict[str, Any] | None = None) -> Outcome:
        """Wait for the study's other workers to finish what they hold (and redo what dead ones held) unless
        time ran out or the search was cancelled, check finalists in the held-out mode if asked, write
        everything, and describe the run. ``top`` is recomputed when other workers added to the study; ties rank by plan hash."""
        if stopped not in ("time budget", "cancelled") and self._drain():
            top = self.top(max(len(top), 10))
        top.sort(key=lambda c: (c.value, self.space.hash_idx(c.idx)))      # ties by plan hash: every worker ranks alike
        if self.held_out_mode is not None and top:
            # a program's runs would outlast the time budget or the cancel by up to len(top) runs: the values the history
            # holds then, and the rest unchecked (the gate measures the plan it tries)
            self.check_held_out(top, measure=not (self.one_by_one and stopped in ("time budget", "cancelled")))
            top.sort(key=lambda c: (c.held_out_correct is not True, c.held_out_correct is False, c.value))   # unchecked between
        done = stopped in ("converged", "exhausted")
        if done:                                            # the reason, for a rerun to know (see ``converged``)
            progress = {**(progress if progress is not None else self.progress_state), "stopped": stopped}
        self.flush(progress, state="done" if done else "cancelled" if stopped == "cancelled" else "stopped")
        self.close()
        return Outcome(self.name, self.spec.strategy, self.evaluations, self.scored, self.trials_written, self.cached_hits,
                       round(time.monotonic() - self.started, 3), stopped, top, self.failures.total(),
                       dict(self.failures.most_common(REASONS_SHOWN)), self.cached_failed)

    def _drain(self) -> bool:
        """Until no plan of the study is claimed and unscored: redo the plans of dead workers, wait for live
        ones. Whether other workers added to what this one saw."""
        seen, pause = len(self.seen), 0.05
        while self.interrupted() is None:
            self.flush()                                    # this worker's own results first: they are done for the others
            stale, busy = self.worker.unfinished()
            if stale:
                self.evaluate(np.array(stale, dtype=np.int16), {"phase": "redo"})
            elif not busy:
                break
            else:
                time.sleep(pause)
                pause = min(2 * pause, POLL_S)
        self.sync()
        return len(self.seen) > seen

    def close(self) -> None:
        """End this worker's part: whatever it still holds is free for the others. Idempotent."""
        self._bar.close()
        with suppress(Exception):                           # a history that is gone: its claims go stale on their own
            self.worker.leave()

    def check_held_out(self, candidates: list[Candidate], measure: bool = True) -> None:
        """Fill ``held_out``/``held_out_correct`` (cached in history under the held-out mode); without ``measure``, only
        where the history holds a value that stands (the others stay unchecked, ``None``)."""
        assert self.held_out_mode is not None
        rows = self.history.scored(self.objective, self.held_out_mode, np.stack([c.idx for c in candidates]), measure)
        for c in candidates:
            if (row := rows.get(self.space.hash_idx(c.idx))) is not None:
                c.held_out, c.held_out_correct = (row.cycles if row.cycles is not None else float("inf")), row.correct

    def evaluated(self) -> tuple[np.ndarray, np.ndarray]:
        """Every configuration this run (and its earlier runs) saw, in order, with its value (``inf``: infeasible)."""
        if not self.seen:
            return np.empty((0, len(self.space.knobs)), dtype=np.int16), np.empty(0)
        return np.stack([self.cache[h].idx for h in self.seen]), np.fromiter(self.seen.values(), float, len(self.seen))

    def top(self, n: int = 10) -> list[Candidate]:
        """Best correct plans seen by this run (and its earlier runs), best first."""
        best = sorted(((v, h) for h, v in self.seen.items() if np.isfinite(v)))[:n]
        return [Candidate(self.cache[h].idx, v, True) for v, h in best]
