"""Search space and profiles."""

from __future__ import annotations

import json

import numpy as np
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution

from tuner.plan import KNOBS, PROFILE_DIR, SPACE
from tuner.space import ProfileError, SpaceError, load_profile, profile_names, space_from_t1, space_from_tune_params

PLAN_KNOBS = {k.name: [k.choices[0]] for k in KNOBS}      # a profile of one plan, each test changing one knob's list


def test_every_knob_is_a_distribution_with_order_where_it_matters():
    for knob in KNOBS:
        dist = SPACE.distributions[knob.name]
        if knob.kind == "ordinal":
            assert isinstance(dist, IntDistribution) and (dist.low, dist.high) == (0, knob.size - 1)
        else:
            assert isinstance(dist, CategoricalDistribution) and list(dist.choices) == list(range(knob.size))


def test_params_are_a_valid_optuna_trial_of_the_index_vector(iteration2):
    from optuna.trial import create_trial

    from tuner.plan import encode

    idx = encode(iteration2)
    trial = create_trial(params=SPACE.to_params(idx), distributions=SPACE.distributions, value=1.0)     # validates each param
    assert [trial.params[name] for name in SPACE.names] == idx.tolist()


@pytest.mark.parametrize(("name", "size"), [("iteration3_dev_core", 1_814_400), ("iteration3_layout_relaxed", 1_990_656)])
def test_profiles_have_the_seed_sizes_and_enumerate_by_index(name, size):
    profile = load_profile(name, SPACE, PROFILE_DIR)
    assert profile.size == size
    head, tail = profile.plans(0, 1000), profile.plans(size - 1000, size + 50)
    assert len(tail) == 1000
    both = np.concatenate([head, tail])
    assert len({row.tobytes() for row in both}) == 2000
    for j, allowed in enumerate(profile.choices):
        assert set(both[:, j]) <= set(allowed)
    middle = profile.plans(123_457, 123_458)[0]
    assert any((middle == row).all() for row in profile.plans(123_400, 123_500))


def test_iteration2_lies_in_both_profiles(iteration2):
    from tuner.plan import encode

    idx = encode(iteration2)
    for name in ("iteration3_dev_core", "iteration3_layout_relaxed"):
        assert all(int(v) in allowed for v, allowed in zip(idx, load_profile(name, SPACE, PROFILE_DIR).choices, strict=True)), name


def test_a_user_adds_a_profile_by_adding_a_file(tmp_path, iteration2):
    knobs = {k: [v] for k, v in iteration2.items()} | {"block_m": [32, 48, 64], "num_warps": [4, 6, 8]}
    (tmp_path / "tiny.json").write_text(json.dumps({"description": "nine plans", "knobs": knobs}))
    assert "tiny" in profile_names(SPACE, tmp_path)
    assert load_profile("tiny", SPACE, tmp_path).size == 9


def test_a_profile_is_read_from_the_first_folder_that_holds_it_and_never_through_a_link_out_of_it(tmp_path, iteration2):
    """The workspace's ``studies/`` comes before the package's profiles, so a user's file of a shipped name replaces it
    there. A link that leads out of its folder is no profile: not listed, not read."""
    knobs = {k: [v] for k, v in iteration2.items()}
    first, second = tmp_path / "first", tmp_path / "second"
    for folder, size in ((first, 2), (second, 3)):
        folder.mkdir()
        (folder / "tiny.json").write_text(json.dumps({"knobs": knobs | {"block_m": [32, 48, 64][:size]}}))
    assert load_profile("tiny", SPACE, first, second).size == 2 and load_profile("tiny", SPACE, second, first).size == 3
    (first / "elsewhere.json").symlink_to(second / "tiny.json")
    (first / "here.json").symlink_to("tiny.json")
    assert profile_names(SPACE, first) == ["all", "here", "tiny"]
    with pytest.raises(ProfileError, match=r"^unknown profile 'elsewhere'; known profiles: all, here, tiny$"):
        load_profile("elsewhere", SPACE, first)
    assert load_profile("here", SPACE, first).size == 2


def test_profiles_of_another_space_are_not_offered_but_unreadable_ones_are(tmp_path, iteration2):
    """Beside a cache of two knobs, the tensor plan's profiles are not its profiles; one that cannot be read is
    still listed, so that asking for it says what is wrong with it."""
    cache = space_from_tune_params({"bx": [32, 64], "tile": [1, 2]}, ["bx", "tile"], "toy", "toy")
    (tmp_path / "tensor.json").write_text(json.dumps({"knobs": {k: [v] for k, v in iteration2.items()}}))
    (tmp_path / "toy_small.json").write_text(json.dumps({"knobs": {"bx": [32], "tile": [1, 2]}}))
    (tmp_path / "broken.json").write_text("{")
    assert profile_names(cache, tmp_path) == ["all", "broken", "toy_small"]
    assert profile_names(SPACE, tmp_path) == ["all", "broken", "tensor"]
    with pytest.raises(ProfileError, match=r"known profiles: all, broken, toy_small$"):
        load_profile("tensor_plan", cache, tmp_path)


@pytest.mark.parametrize("name", ["../fixtures/baseline_row_major", "/etc/passwd", "nope", "", "a/b"])
def test_bad_profile_names_are_refused(name):
    with pytest.raises(ProfileError, match="profile"):
        load_profile(name, SPACE, PROFILE_DIR)


@pytest.mark.parametrize(("content", "fragment"), [
    (json.dumps({"knobs": {"block_m": [50]}}), "must list every knob"),
    (json.dumps({"knobs": 1}), "needs a knobs object"),
    (json.dumps({"knobs": [["block_m"]]}), "needs a knobs object"),
    (json.dumps(["knobs"]), "needs a knobs object"),
    (json.dumps({"block_m": [32]}), r'as in \{"knobs": \{"q_layout": \["row_major", "col_major"\], \.\.\.\}\}'),   # the form, shown
    ('{"knobs": ', "is not valid JSON"),
    (json.dumps({"knobs": dict(PLAN_KNOBS, block_m=[])}), "profile 'broken': knob 'block_m' needs a non-empty list of values"),
    (json.dumps({"knobs": dict(PLAN_KNOBS, block_m=[50])}), "profile 'broken': knob 'block_m': 50 is not one of 16, 32, 48"),
    (json.dumps({"knobs": dict(PLAN_KNOBS, block_m=[64, 64])}), "profile 'broken': knob 'block_m' repeats a value"),
])
def test_malformed_profile_names_the_problem(tmp_path, content, fragment):
    (tmp_path / "broken.json").write_text(content)
    with pytest.raises(ProfileError, match=fragment):
        load_profile("broken", SPACE, tmp_path)


def test_a_value_is_found_by_its_type_too():
    (knob,) = space_from_tune_params({"m": [True, 1.0, 1, 2, "a", 0.0]}, ["m"], "toy", "toy").knobs
    assert [knob.index(v) for v in (True, 1.0, 1, 2, "a", 0.0, -0.0)] == [0, 1, 2, 3, 4, 5, 5]     # -0.0 == 0.0
    for value in (False, 2.0, "1", None, [1], {"m": 1}):
        assert value not in knob
        with pytest.raises(ValueError, match=r"knob 'm': .* is not one of true, 1\.0, 1, 2, a"):
            knob.index(value)
    assert all(v in knob for v in (True, 1.0, 1, 2, "a", 0.0, -0.0))


def test_a_restriction_evaluated_row_by_row_keeps_what_the_others_rule_out():
    """``tile / (bx - 64)`` divides by zero at bx=64, so it is evaluated configuration by configuration, and only where
    ``bx > 32`` allows: bx=32, which it would allow, stays ruled out; bx=64 is ruled out by the fault, as Python's
    ZeroDivisionError would rule it out."""
    space = space_from_t1({"ConfigurationSpace": {"TuningParameters": [{"Name": "bx", "Values": [32, 64, 128]},
                                                                       {"Name": "tile", "Values": [1, 2]}],
                                                  "Conditions": [{"Expression": "bx > 32"}, {"Expression": "tile / (bx - 64) < 1"}]}})
    idx = np.array([[b, t] for b in range(3) for t in range(2)], dtype=np.int16)
    assert space.allowed(idx).tolist() == [False, False, False, False, True, True]


def test_a_restriction_that_cannot_be_evaluated_for_a_value_is_refused_when_the_space_is_read():
    """The one-value knob and the four-value knob are both tried on every value when the space is read: the string
    ``"x"`` breaks the arithmetic there, not in the middle of a search."""
    data = {"ConfigurationSpace": {"TuningParameters": [{"Name": "bx", "Values": [32]}, {"Name": "mode", "Values": [1, 2, 3, "x"]}],
                                   "Conditions": [{"Expression": "bx + mode > 0"}]}}
    with pytest.raises(SpaceError, match=r"restriction 'bx \+ mode > 0' cannot be evaluated for \{\"bx\": 32, \"mode\": \"x\"\}"):
        space_from_t1(data)


def test_a_configuration_beside_a_plan_object_is_not_read_as_that_plan_and_a_boolean_ordinal_knob_shows_booleans():
    """``{"plan": {...}}`` stands for its plan (a fixture), but an object that also names knobs is a configuration with an
    unknown knob ``plan``; a knob of booleans declared ordinal is shown (optuna-dashboard) as its booleans, not 0 and 1."""
    space = space_from_t1({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "bx", "Values": [32, 64]}, {"Name": "flag", "Values": [False, True], "Kind": "ordinal"}]}})
    assert space.validate({"plan": {"bx": 64, "flag": True}}) == {"bx": 64, "flag": True}
    with pytest.raises(SpaceError, match="unknown knob 'plan'"):
        space.validate({"bx": 32, "flag": False, "plan": {"bx": 64, "flag": True}})
    shown = space.shown_distributions["flag"]
    assert isinstance(shown, CategoricalDistribution) and list(shown.choices) == [False, True]
    assert space.shown_internal(space.encode({"bx": 64, "flag": True})) == {"bx": 64.0, "flag": 1.0}


def test_a_configuration_with_many_unknown_knobs_names_five_and_counts_the_rest():
    space = space_from_t1({"ConfigurationSpace": {"TuningParameters": [{"Name": "bx", "Values": [32, 64]}]}})
    with pytest.raises(SpaceError) as refused:
        space.validate({"bx": 32} | {f"k{i}": 1 for i in range(7)})
    assert str(refused.value) == "unknown knobs 'k0', 'k1', 'k2', 'k3', 'k4' and 2 more (known knobs: bx)"
    with pytest.raises(SpaceError, match=r"^unknown knob 'k0' \(known knobs: bx\)$"):
        space.validate({"bx": 32, "k0": 1})


def test_a_nominal_knob_of_numbers_is_shown_as_its_choices_and_a_configuration_s_text_is_in_space_order():
    space = space_from_t1({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "bx", "Values": [32, 64, 128]}, {"Name": "algo", "Values": [3, 1, 2], "Kind": "nominal"}]}})
    shown = space.shown_distributions
    assert isinstance(shown["bx"], IntDistribution) and (shown["bx"].low, shown["bx"].high) == (32, 128)
    assert isinstance(shown["algo"], CategoricalDistribution) and list(shown["algo"].choices) == [3, 1, 2]    # no order
    assert space.shown_internal(space.encode({"bx": 64, "algo": 3})) == {"bx": 64.0, "algo": 0.0}                # its index
    assert space.to_json({"algo": 1, "bx": 32}) == '{\n  "bx": 32,\n  "algo": 1\n}\n'


def test_a_stored_choice_is_its_index_even_where_python_finds_an_equal_value_before_it():
    space = space_from_t1({"ConfigurationSpace": {"TuningParameters": [{"Name": "flag", "Values": [1, True, "x"]}]}})
    assert space.shown_internal(space.encode({"flag": True})) == {"flag": 1.0}         # 1 == True: a lookup by value says 0
