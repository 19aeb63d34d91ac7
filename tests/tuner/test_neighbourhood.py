"""Neighbourhoods and the climb's steps: coupled and repaired moves reach what singles cannot."""

from __future__ import annotations

import dataclasses
import itertools
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import toy_cache
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.history import History
from tuner.objectives.builtin import BuiltinObjective
from tuner.objectives.cache import CacheObjective
from tuner.plan import KNOBS, SPACE, encode
from tuner.search import Search, Spec
from tuner.space import space_from_t1
from tuner.strategies import checkpoint
from tuner.strategies.checkpoint import LIKELY_TO_FAIL, climb, step_neighbours
from tuner.strategies.interactions import learn
from tuner.strategies.neighbourhood import REPAIR_ROWS, _root, combined, coupled, grid, nearest_feasible, pairs, repairs, row_keys, singles

POSITION = SPACE.position

OBJECTIVE = BuiltinObjective()

# Two local optima of the single-mutation neighbourhood (found by quick runs that stalled there).
# Scratchpad 96 KB would win, but only with fewer DMA stages or a shorter block_k (alone, both
# moves are infeasible or no better):
SCRATCHPAD_TRAP = {
    "q_layout": "swizzled_mn", "k_layout": "swizzled_nk", "v_layout": "swizzled_kd", "o_layout": "streamed",
    "block_m": 64, "block_n": 64, "block_k": 96, "num_warps": 8, "vector_width": 16, "accum": "sequential",
    "softmax": "online", "schedule": "split_pipeline", "dma_stages": 4, "prefetch_distance": 2, "dma_burst": 128,
    "split_k": 1, "swizzle": "tensorcore", "epilogue": "fused_scale", "scratchpad_kb": 128,
}
# The 4-warp persistent optimum: split_pipeline pays only together with 8 warps.
REGIME_TRAP = SCRATCHPAD_TRAP | {"block_k": 64, "num_warps": 4, "schedule": "persistent", "dma_stages": 2,
                                 "scratchpad_kb": 48}


def _dev(rows: np.ndarray) -> np.ndarray:
    values = OBJECTIVE.cycles(rows, "dev")
    values[~OBJECTIVE.feasible(rows)] = np.inf
    return values


def _best_single(center: np.ndarray) -> float:
    return float(_dev(singles(SPACE, center)).min())


def test_coupled_moves_stay_inside_one_group_and_change_two_knobs():
    center = encode(SCRATCHPAD_TRAP)
    pairs = (("schedule", "num_warps"), ("block_k", "dma_burst"))
    moves = coupled(SPACE, center, tuple(tuple(POSITION[n] for n in pair) for pair in pairs))
    changed = moves != center
    assert (changed.sum(axis=1) >= 2).all()
    groups = [{POSITION[name] for name in group} for group in pairs]
    assert all(any(set(np.flatnonzero(row)) <= g for g in groups) for row in changed)
    regime = [POSITION["schedule"], POSITION["num_warps"]]
    joint = {tuple(row[regime]) for row in moves if set(np.flatnonzero(row != center)) == set(regime)}
    assert len(joint) == (KNOBS[regime[0]].size - 1) * (KNOBS[regime[1]].size - 1)


def test_repairs_make_infeasible_moves_feasible_with_one_more_change():
    center = encode(SCRATCHPAD_TRAP)
    moves = singles(SPACE, center)
    infeasible = moves[~OBJECTIVE.feasible(moves)]
    assert len(infeasible)
    fixed = repairs(SPACE, center, moves, OBJECTIVE.feasible)
    assert len(fixed) and OBJECTIVE.feasible(fixed).all()
    for row in fixed:                                   # an infeasible single plus exactly one more knob
        assert any((row != move).sum() == 1 and (move != center).sum() == 1 for move in infeasible)
    smaller = center.copy()
    smaller[POSITION["scratchpad_kb"]] = KNOBS[POSITION["scratchpad_kb"]].index(96)
    smaller[POSITION["dma_stages"]] -= 1
    assert any((row == smaller).all() for row in fixed)


class _Unhinted(BuiltinObjective):
    """The task without its space file's hint: the search must learn its pairs."""

    space = dataclasses.replace(SPACE, coupled=())


def _climbed(tmp_path, plan: dict, explored: int = 0, objective: BuiltinObjective = OBJECTIVE) -> float:
    """Where the climb's steps from ``plan`` end, after ``explored`` random evaluations taught the search its space."""
    search = Search(History(f"sqlite:///{tmp_path / 'h.db'}"), objective, Spec(strategy="checkpoint", mode="dev", max_evals=400 + explored,
                                                                              seed=0))
    rng = np.random.default_rng(0)
    random = SPACE.uniform(4 * explored, rng)
    search.evaluate(random[OBJECTIVE.feasible(random)][:explored])
    assert climb(search, encode(plan), phases=()) == "converged"
    return search.best.value                            # random configurations are far worse than the traps


def test_steps_escape_a_trap_that_needs_a_repaired_move(tmp_path):
    center = encode(SCRATCHPAD_TRAP)
    start = float(_dev(center[None])[0])
    assert _best_single(center) >= start                # a local optimum of the feasible singles
    assert _climbed(tmp_path, SCRATCHPAD_TRAP) < 0.96 * start


def test_a_pair_that_pays_only_together_is_learned_from_evaluations():
    toy = space_from_t1({"ConfigurationSpace": {"TuningParameters": [{"Name": f"k{j}", "Values": [1, 2, 3, 4]} for j in range(6)]}})
    rng = np.random.default_rng(0)
    idx = np.stack([rng.integers(0, 4, 300) for _ in range(6)], axis=1).astype(np.int16)
    together = (idx[:, 2] == 3) & (idx[:, 4] == 3)                  # k2 = 4 and k4 = 4 pay only together
    values = np.exp(0.2 * idx[:, 0] + 0.1 * idx[:, 1] + 0.3 * (idx[:, 2] + idx[:, 4]) - 2.5 * together)
    values[idx[:, 5] == 0] = np.inf                                  # failures are left out of the fit
    model = learn(toy, idx, values)
    assert model.pairs[0] == (2, 4)
    best = toy.encode({"k0": 1, "k1": 1, "k2": 4, "k3": 1, "k4": 4, "k5": 2})
    near = best.copy()
    near[4] = 2
    assert model.predict(best[None])[0] < model.predict(near[None])[0]
    assert model.failure(idx[idx[:, 5] == 0]).min() > model.failure(idx[idx[:, 5] > 0]).max()
    assert learn(toy, idx[:10], values[:10]).pairs == ()             # too little to learn anything


def test_the_learned_model_ranks_knobs_credits_unseen_joint_cells_and_leaves_out_values_it_cannot_log():
    """``top_knobs``: the ordinal knobs of the largest effects (a nominal knob only when asked), in space order;
    ``untried``: credit only to moves that change both knobs of a kept pair into a cell no evaluation holds; a value of
    0 (a time a benchmark rounded down) is no measurement and breaks no prediction."""
    toy = space_from_t1({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "k0", "Values": [1, 2, 3, 4]}, {"Name": "s", "Values": ["a", "b", "c", "d"]},
        {"Name": "k2", "Values": [1, 2, 3, 4]}, {"Name": "k3", "Values": [1, 2, 3, 4]}]}})
    rng = np.random.default_rng(0)
    idx = np.stack([rng.integers(0, 4, 300) for _ in range(4)], axis=1).astype(np.int16)
    values = np.exp(0.1 * idx[:, 0] + 2.0 * idx[:, 1] + 0.3 * idx[:, 2] + 1.0 * idx[:, 3] - 2.5 * ((idx[:, 2] == 3) & (idx[:, 3] == 3)))
    values[:20] = 0.0
    model = learn(toy, idx, values)
    assert model.top_knobs(toy, 2) == (2, 3) and model.top_knobs(toy, 2, ordinal_only=False) == (1, 3)
    assert np.isfinite(model.predict(idx)).all() and (2, 3) in model.cells
    center = np.zeros(4, dtype=np.int16)
    moves = np.array([[0, 0, 3, 3], [0, 0, 3, 0], [0, 0, 0, 3], [1, 1, 0, 0]], dtype=np.int16)
    scored = idx[(idx[:, 2] != 3) | (idx[:, 3] != 3)]                                       # the cell (3, 3) never scored
    credit = model.untried(center, moves, scored)
    assert credit[0] > 0 and (credit[1:] == 0).all()
    assert model.untried(moves[2], moves[:1], scored)[0] == 0                              # one knob's move into it
    assert (model.untried(center, moves, idx) == 0).all()


def test_a_limit_across_two_knobs_is_learned_even_when_most_configurations_fail():
    toy = space_from_t1({"ConfigurationSpace": {"TuningParameters": [{"Name": f"k{j}", "Values": [1, 2, 4, 8, 16]} for j in range(5)]}})
    rng = np.random.default_rng(0)
    idx, fresh = (rng.integers(0, 5, (n, 5)).astype(np.int16) for n in (200, 2000))
    values = np.where(idx[:, 0] + idx[:, 1] > 3, np.inf, np.exp(0.1 * idx[:, 2]))   # k0 * k1 > 8 fails (a launch limit)
    chance, fails = learn(toy, idx, values).failure(fresh), fresh[:, 0] + fresh[:, 1] > 3
    assert fails.mean() > 0.55                                       # most of the space fails
    assert (chance[fails] > LIKELY_TO_FAIL).mean() > 0.9             # and the model says so
    assert (chance[~fails] > LIKELY_TO_FAIL).mean() < 0.2            # without writing off what works


def test_steps_escape_a_trap_that_needs_a_joint_move_once_the_pair_is_learned(tmp_path):
    center = encode(REGIME_TRAP)
    start = float(_dev(center[None])[0])
    assert _best_single(center) >= start
    blind, taught = tmp_path / "blind", tmp_path / "taught"
    blind.mkdir(), taught.mkdir()
    assert _climbed(blind, REGIME_TRAP, objective=_Unhinted()) >= start                # nothing learned: stuck
    assert _climbed(taught, REGIME_TRAP, explored=500, objective=_Unhinted()) < 0.9 * start


def test_a_pair_the_space_file_declares_coupled_is_moved_jointly_from_the_start(tmp_path):
    assert SPACE.coupled == ((POSITION["num_warps"], POSITION["schedule"]),)
    center = encode(REGIME_TRAP)
    assert _climbed(tmp_path, REGIME_TRAP) < 0.9 * float(_dev(center[None])[0])           # no evaluation taught it


def test_the_step_neighbourhood_holds_every_feasible_single_once(tmp_path):
    """Nearest singles are listed first and again among all singles; each move must still come once, or it
    takes two of the polish's turns and two places in its patience."""
    search = Search(History(f"sqlite:///{tmp_path / 'h.db'}"), OBJECTIVE, Spec(strategy="checkpoint", mode="dev", max_evals=10, seed=0))
    center = encode(REGIME_TRAP)
    moves = step_neighbours(search, center, np.random.default_rng(0))
    assert len(np.unique(moves, axis=0)) == len(moves)
    feasible = singles(SPACE, center)
    assert {row.tobytes() for row in feasible[OBJECTIVE.feasible(feasible)]} <= {row.tobytes() for row in moves}


def _pair_trap() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 4 x 4 x 4 toy (lower is better): knobs a and b pay only together, along a = b and the more the higher
    both are, so the best cell, a = b = 3, is a joint move away from a = b = 1; c adds a little. Returns every
    configuration, its value, and which ones the tests score (all but the best cell)."""
    rows = np.array(list(itertools.product(range(4), repeat=3)), dtype=np.int16)
    a, b, c = rows.T.astype(float)
    return rows, np.exp(0.1 * c + 0.4 * np.abs(a - b) - 0.2 * np.minimum(a, b) * (a == b)), (a != 3) | (b != 3)


def test_only_joint_moves_into_a_learned_pairs_unscored_cell_are_credited():
    toy = space_from_t1({"ConfigurationSpace": {"TuningParameters": [{"Name": n, "Values": [1, 2, 3, 4]} for n in "abc"]}})
    rows, values, scoring = _pair_trap()
    scored = rows[scoring]
    model = learn(toy, scored, values[scoring])
    assert model.pairs[0] == (0, 1)
    center = np.array([1, 1, 0], dtype=np.int16)
    moves = np.array([[3, 3, 0], [2, 2, 0], [3, 1, 0], [1, 3, 0], [1, 1, 3]], dtype=np.int16)
    credit = model.untried(center, moves, scored)
    assert credit[0] == pytest.approx(model.cells[(0, 1)].std()) and credit[0] > 0    # both knobs, a cell never scored
    assert (credit[1:] == 0).all()                     # a scored cell, a single move of either knob, another knob
    assert (model.untried(center, moves, rows) == 0).all()                            # nothing left unscored


def test_the_steps_try_a_joint_move_into_an_unscored_cell_of_a_learned_pair_sooner(tmp_path, monkeypatch):
    rows, values, scoring = _pair_trap()
    knobs = {n: [1, 2, 3, 4] for n in "abc"}
    path = toy_cache(tmp_path, {tuple(int(v) + 1 for v in row): float(t) for row, t in zip(rows, values, strict=True)}, "pair.json", knobs)
    search = Search(History(f"sqlite:///{tmp_path / 'h.db'}"), CacheObjective(path, None),
                    Spec(strategy="checkpoint", mode="time", max_evals=100, seed=0))
    search.evaluate(rows[scoring])
    center, target = np.array([1, 1, 0], dtype=np.int16), np.array([3, 3, 0], dtype=np.int16)

    def place() -> int:
        moves = step_neighbours(search, center, np.random.default_rng(0))
        return int(np.flatnonzero((moves == target).all(axis=1))[0])

    credited = place()
    monkeypatch.setattr(checkpoint, "OPTIMISM", 0.0)
    assert credited < place()                          # the model alone ranks it among the worst: its cell holds no data


def test_joint_and_pair_moves_of_knobs_with_thousands_of_values_stay_bounded_and_near_the_center():
    """A learned pair of two knobs of 3,000 values each has 9 million joint values: its joint moves are the 4,096
    nearest the center (before, a search on such a space ran for minutes and grew to 2 GB); a nominal knob of 1,000
    values moves to its 16 nearest in a pair move."""
    wide = space_from_t1({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "a", "Values": "[i for i in range(3000)]"}, {"Name": "b", "Values": "[i for i in range(3000)]"},
        {"Name": "c", "Values": [f"v{i}" for i in range(1000)]}]}})
    center = np.array([1500, 5, 999], dtype=np.int16)
    moves = coupled(wide, center, ((0, 1),))
    assert len(moves) == 63 * 63 and ((moves != center).sum(axis=1) == 2).all() and (moves[:, 2] == 999).all()
    assert set(moves[:, 0]) == set(range(1468, 1532)) - {1500} and set(moves[:, 1]) == set(range(64)) - {5}
    joint = pairs(wide, center)
    assert ((joint != center).sum(axis=1) == 2).all() and set(joint[:, 2]) == set(range(983, 1000))    # 16 nearest, and the center
    assert len(joint) == 2 * 2 + 2 * 16 * 2


def test_the_repairs_of_moves_over_knobs_with_thousands_of_values_are_checked_a_bounded_batch_at_a_time():
    """Each infeasible move has a candidate fix per value of every knob it leaves alone: here 2,898 moves, 8.8 million
    candidates. They are built and checked at most ``REPAIR_ROWS`` at a time (before, all at once: one step of a
    space of 64 knobs of 1,000 values with one restriction grew to 7 GB), and each move keeps its nearest fix."""
    wide = space_from_t1({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "a", "Values": "list(range(3000))"}, {"Name": "b", "Values": "list(range(3000))"},
        {"Name": "c", "Values": "list(range(50))"}], "Conditions": [{"Expression": "a + b <= 3000"}]}})
    center = np.array([1500, 1400, 7], dtype=np.int16)
    checked = []

    def feasible(rows):
        checked.append(len(rows))
        return wide.allowed(rows)

    fixed = repairs(wide, center, singles(wide, center), feasible)
    assert checked[0] == 2999 + 2999 + 49 and max(checked[1:]) <= REPAIR_ROWS       # the moves, then their fixes
    nearest = [(a, 3000 - a, 7) for a in range(1601, 3000)] + [(3000 - b, b, 7) for b in range(1501, 3000)]
    assert sorted(map(tuple, fixed.tolist())) == sorted(nearest)


def _repaired_by_definition(space, center: np.ndarray, moves: np.ndarray, feasible) -> np.ndarray:
    """What ``repairs`` returns, written as its contract reads: for each infeasible move in turn, for each knob it
    leaves alone, every value of that knob the check allows at the least distance from the center's."""
    infeasible = moves[~feasible(moves)]
    candidates = [(i, j, v) for i, move in enumerate(infeasible) for j in range(len(center))
                  if move[j] == center[j] for v in range(space.sizes[j]) if v != center[j]]
    rows = np.array([np.where(np.arange(len(center)) == j, v, infeasible[i]) for i, j, v in candidates],
                    dtype=np.int16).reshape(-1, len(center))
    allowed = feasible(rows)

    def distance(j, v):
        return abs(v - int(center[j])) if space.ordinal[j] else 1
    least = {}
    for (i, j, v), ok in zip(candidates, allowed, strict=True):
        if ok:
            least[i, j] = min(least.get((i, j), np.inf), distance(j, v))
    return rows[[ok and distance(j, v) == least[i, j] for (i, j, v), ok in zip(candidates, allowed, strict=True)]]


@settings(max_examples=60)
@given(sizes=st.lists(st.integers(1, 24), min_size=2, max_size=5), data=st.data())
def test_repairs_are_the_nearest_fixes_whichever_knobs_and_rings_they_try(sizes, data):
    """``repairs`` tries only the knobs of the restriction groups a move changes (``Space.linked``; from a center the
    restrictions rule out, every knob: any may mend what the center breaks), and an ordinal knob's values in rings of
    growing distance; neither changes what it returns. Same fixes, in the same order, as the contract written out one
    candidate at a time, on random spaces, restrictions and centers."""
    names = [f"k{i}" for i in range(len(sizes))]

    def pair():
        return data.draw(st.permutations(names))[:2]
    templates = [lambda: "{} + {} <= {}".format(*pair(), data.draw(st.integers(0, 60))),
                 lambda: "{} * {} != {}".format(*pair(), data.draw(st.integers(0, 30))),
                 lambda: "{} * {} <= {}".format(*pair(), data.draw(st.integers(0, 300))),
                 lambda: f"{data.draw(st.sampled_from(names))} != {data.draw(st.integers(0, 5))}"]
    conditions = [data.draw(st.sampled_from(templates))() for _ in range(data.draw(st.integers(1, 3)))]
    space = space_from_t1({"ConfigurationSpace": {"TuningParameters": [
        {"Name": n, "Values": list(range(size)), "Kind": data.draw(st.sampled_from(["ordinal", "nominal"]))}
        for n, size in zip(names, sizes, strict=True)], "Conditions": [{"Expression": c} for c in conditions]}})
    center = np.array([data.draw(st.integers(0, size - 1)) for size in sizes], dtype=np.int16)
    moves = np.concatenate([singles(space, center), coupled(space, center, ((0, 1),))])
    expected = _repaired_by_definition(space, center, moves, space.allowed)
    assert np.array_equal(repairs(space, center, moves, space.allowed, space.linked), expected)
    assert np.array_equal(repairs(space, center, moves, space.allowed), expected)


def test_the_model_of_knobs_with_thousands_of_values_stays_bounded_and_still_learns():
    """Pair cells and the failure model see a knob of 3,000 values as 32 runs of neighbouring values: a pair has
    1,024 cells, not 9 million, and the failure model 33 columns per knob, not 3,001 (before, a search on 12 such
    knobs with failures grew to 3.6 GB and ran past two minutes for 40 evaluations). What pays together and where
    it fails are still learned."""
    wide = space_from_t1({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "a", "Values": "[i for i in range(3000)]"}, {"Name": "b", "Values": "[i for i in range(3000)]"}]}})

    def value(idx):
        return np.where(idx[:, 0] > 2000, np.inf, 1 + np.abs(idx[:, 0].astype(float) - idx[:, 1]) / 100)

    idx = np.random.default_rng(0).integers(0, 3000, size=(400, 2)).astype(np.int16)
    model = learn(wide, idx, value(idx))
    assert model.pairs == ((0, 1),) and model.cells[(0, 1)].shape == (32, 32)
    assert model.failure(np.array([[2900, 10]]))[0] > LIKELY_TO_FAIL > model.failure(np.array([[100, 10]]))[0]
    unseen = np.random.default_rng(1).integers(0, 2000, size=(400, 2)).astype(np.int16)   # values seen once or never
    assert np.corrcoef(model.predict(unseen), np.log(value(unseen)))[0, 1] > 0.25         # what pays together: the cells


def test_a_local_search_from_a_start_that_the_restrictions_rule_out_far_around_starts_from_the_nearest_allowed_one(tmp_path):
    """A space's default may break its own restrictions (dedispersion's T1 file does). Where no single, repaired or pair
    move leaves it (a product of six knobs must reach 2**33, and the default is every knob's first value), the
    climb starts again from the nearest allowed configuration that draws find, and climbs to the optimum."""
    values = [2**e for e in range(8)]
    knobs = {f"k{j}": values for j in range(6)}
    allowed = [c for c in itertools.product(range(8), repeat=6) if sum(c) >= 33]
    records = {tuple(2**e for e in c): 1.0 + sum(abs(e - 6) for e in c) / 10 for c in allowed}      # best: every knob 2**6
    t1 = {"ConfigurationSpace": {"TuningParameters": [{"Name": k, "Values": v} for k, v in knobs.items()],
                                 "Conditions": [{"Expression": "k0*k1*k2*k3*k4*k5 >= 2**33"}]}}
    (tmp_path / "space.t1.json").write_text(json.dumps(t1))
    objective = CacheObjective(toy_cache(tmp_path, records, tune_params=knobs), tmp_path / "space.t1.json")
    start = objective.space.default()
    assert start.tolist() == [0] * 6 and not objective.feasible(start[None])[0]
    nearest = nearest_feasible(objective.space, start, objective.feasible, np.random.default_rng(0))
    assert objective.feasible(nearest[None])[0] and sum(nearest) == 33           # as near as allowed: no more than needed
    search = Search(History(f"sqlite:///{tmp_path / 'h.db'}"), objective,
                    Spec(strategy="checkpoint", mode="time", max_evals=300, start=tuple(start.tolist())))
    outcome = checkpoint.run(search)
    assert outcome.best is not None and outcome.best.value == 1.0


def test_single_moves_per_knob_are_the_values_nearest_the_centers():
    wide = space_from_t1({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "a", "Values": "list(range(3000))"}, {"Name": "c", "Values": [f"v{i}" for i in range(1000)]},
        {"Name": "t", "Values": [1, 2, 3]}]}})
    center = np.array([1500, 998, 0], dtype=np.int16)
    moves = singles(wide, center, per_knob=10)
    assert ((moves != center).sum(axis=1) == 1).all() and len(moves) == 10 + 10 + 2
    assert set(moves[:, 0]) - {1500} == set(range(1495, 1506)) - {1500}          # 5 either side
    assert set(moves[:, 1]) - {998} == set(range(989, 1000)) - {998}             # at the end: the 10 below it, and 999
    assert np.array_equal(singles(wide, center, per_knob=3000), singles(wide, center))


def test_pairs_move_two_knobs_ordinal_ones_one_step():
    toy = space_from_t1({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "a", "Values": [1, 2, 4, 8]}, {"Name": "b", "Values": [1, 2, 4]}, {"Name": "c", "Values": ["x", "y", "z"]}]}})
    center = np.array([1, 0, 1], dtype=np.int16)
    moves = pairs(toy, center)
    changed = moves != center
    assert (changed.sum(axis=1) == 2).all()
    assert set(map(tuple, moves[:, :2][changed[:, 0] & changed[:, 1]])) == {(0, 1), (2, 1)}     # a and b: one step each
    assert set(moves[:, 2][changed[:, 2]]) == {0, 2}                                            # c: every other value
    assert len(moves) == len(np.unique(moves, axis=0)) == 2 * 1 + 2 * 2 + 1 * 2


# more single moves (20) than the "combined" phase pairs (16); a nominal knob, and four ordinal ones for the grid to move together
KNOBS_OF_ANY_TABLE = {"a": [1, 2, 3, 4, 5, 6, 7, 8], "b": [1, 2, 4, 8, 16, 32], "c": ["v", "w", "x", "y", "z"], "d": [8, 16, 32],
                      "e": [0, 1, 2]}


@settings(max_examples=25)
@given(seed=st.integers(0, 2**32 - 1), failing=st.sampled_from([0.0, 0.3, 0.7]))
def test_a_checkpoint_climb_converges_only_where_no_single_pair_or_grid_move_improves(seed, failing):
    """The contract of ``checkpoint``: on any table of times, failures among them, it says "converged" only at a
    configuration that no single move, no move of two knobs (ordinal ones one step) and no +-1 grid move improves."""
    rng = np.random.default_rng(seed)
    values = list(KNOBS_OF_ANY_TABLE.values())
    rows = np.array(list(itertools.product(*(range(len(v)) for v in values))), dtype=np.int16)
    times = [float(t) if rng.random() >= failing else "RuntimeFailedConfig" for t in rng.lognormal(size=len(rows))]
    with tempfile.TemporaryDirectory() as folder:
        path = toy_cache(Path(folder), {tuple(v[i] for v, i in zip(values, row, strict=True)): t
                                        for row, t in zip(rows, times, strict=True)}, "any.json", KNOBS_OF_ANY_TABLE)
        objective = CacheObjective(path, None)
        spec = Spec(strategy="checkpoint", mode="time", max_evals=len(rows), seed=seed)
        search = Search(History(f"sqlite:///{folder}/h.db"), objective, spec)
        start = rows[rng.integers(len(rows))]
        assert climb(search, start) == "converged"
        truth = objective.cycles(rows, "time")                      # inf where the table holds no time
    end = search.best.idx if search.best is not None else start     # nothing scored has a time: the climb stays put

    def improving(moves: np.ndarray) -> int:
        at = np.ravel_multi_index(moves.T.astype(np.intp), tuple(search.space.sizes))
        return int((truth[at] < truth[np.ravel_multi_index(tuple(end), tuple(search.space.sizes))]).sum())

    ordinal = tuple(j for j in range(len(values)) if search.space.ordinal[j])
    assert improving(singles(search.space, end)) == improving(pairs(search.space, end)) == 0
    assert improving(grid(search.space, end, ordinal)) == 0


@given(value=st.integers(1, 10**15), degree=st.integers(1, 4))
def test_the_integer_root_is_exact_where_floating_point_is_not(value, degree):
    root = _root(value, degree)
    assert root**degree <= value < (root + 1) ** degree


def test_a_small_knob_leaves_the_rest_of_its_share_of_joint_moves_to_the_large_one():
    space = space_from_t1({"ConfigurationSpace": {"TuningParameters": [{"Name": "a", "Values": "list(range(1000))"},
                                                                       {"Name": "s", "Values": [0, 1]}]}})
    moves = coupled(space, np.array([500, 0], dtype=np.int16), ((0, 1),), limit=100)
    assert len(moves) == 49 and set(moves[:, 0]) == set(range(475, 525)) - {500}     # 50 x 2 joint values, not 10 x 2


TOY = space_from_t1({"ConfigurationSpace": {"TuningParameters": [
    {"Name": "a", "Values": [1, 2, 4, 8]}, {"Name": "b", "Values": [1, 2, 4]}, {"Name": "c", "Values": ["x", "y", "z", "w"]}]}})


def test_near_single_moves_step_ordinal_knobs_once_and_nominal_ones_anywhere():
    center = np.array([1, 1, 1], dtype=np.int16)
    moved = {(int(np.flatnonzero(row != center)[0]), int(row[row != center][0])) for row in singles(TOY, center, near=True)}
    assert moved == {(0, 0), (0, 2), (1, 0), (1, 2), (2, 0), (2, 2), (2, 3)}


def test_the_grid_lists_its_configurations_nearest_first():
    center = np.array([1, 1, 1], dtype=np.int16)
    distance = np.abs(grid(TOY, center, (0, 1, 2)).astype(int) - center).sum(axis=1)
    assert len(distance) == 26 and (np.diff(distance) >= 0).all() and distance[0] == 1


def test_combined_moves_join_two_best_singles_of_different_knobs_only():
    center = np.array([1, 1, 1], dtype=np.int16)
    moves = singles(TOY, center)
    values = np.where((moves != center)[:, 2], 0.0, 1.0 + np.arange(len(moves)))      # the best three all move knob c
    joined = combined(center, moves, values, keep=4)
    assert len(joined) == 3 and ((joined != center).sum(axis=1) == 2).all()


def test_row_keys_of_rows_laid_out_in_any_order_compare_their_values():
    idx = np.arange(12, dtype=np.int16).reshape(4, 3)
    assert np.array_equal(row_keys(idx[:, ::-1]), row_keys(idx[:, ::-1].copy()))
