"""Spaces as data: T1 files, Kernel Tuner caches and the kernel-plan catalogue; the cache objective."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import zlib
from collections import Counter
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from conftest import ROOT, toy_cache

from tuner import search as search_module
from tuner import service
from tuner.history import History, Row
from tuner.objectives.base import RULED_OUT
from tuner.objectives.cache import NOT_MEASURED, CacheObjective, t4_result
from tuner.plan import SPACE
from tuner.search import Search, Spec
from tuner.space import WHOLE_SPACE, SpaceError, load_profile, load_space, space_from_t1
from tuner.strategies import STRATEGIES

CACHES = ROOT.parent / "shared" / "data" / "gpu-caches"
OTHER_GPU = ROOT / "perf" / "caches" / "convolution-RTX_2080Ti.json.gz"      # in the repository: real measurements CI has


def t1(params, conditions=()):
    return {"General": {"BenchmarkName": "toy"},
            "ConfigurationSpace": {"TuningParameters": params,
                                   "Conditions": [c if isinstance(c, dict) else {"Expression": c} for c in conditions]}}


def test_t1_values_conditions_defaults_and_kinds():
    space = space_from_t1(t1([{"Name": "bx", "Values": "[32 * i for i in range(1, 5)]", "Default": 64},
                              {"Name": "mode", "Values": ["a", "b"]}, {"Name": "tile", "Values": "[1, 2]", "Kind": "nominal"}],
                             ["bx * tile <= 128"]))
    assert space.names == ("bx", "mode", "tile") and space.size == 16
    assert [k.kind for k in space.knobs] == ["ordinal", "nominal", "nominal"]
    assert space.decode(space.default()) == {"bx": 64, "mode": "a", "tile": 1}
    idx = np.array([[3, 0, 1], [1, 1, 1], [3, 0, 0]], dtype=np.int16)
    assert space.allowed(idx).tolist() == [False, True, True]


def test_the_community_t1_files_read_as_kernel_tuner_reads_them():
    """The benchmark hub's hotspot file writes a value list with list(...) and a one-value knob whose Default is not its
    value; its GEMM file a Default as a one-item list. Kernel Tuner ignores Default; a knob of one value has that one."""
    space = space_from_t1(t1([{"Name": "block_size_x", "Type": "int", "Values": "[1, 2, 4, 8, 16] + list(range(32, 1024+1, 32))",
                               "Default": 256},
                              {"Name": "max_tfactor", "Type": "int", "Values": "[10]", "Default": 1},
                              {"Name": "GEMMK", "Type": "int", "Values": "[0]", "Default": [0]}],
                             ["block_size_x >= 32"]))
    assert space.knobs[0].choices == (1, 2, 4, 8, 16, *range(32, 1025, 32))
    assert space.decode(space.default()) == {"block_size_x": 256, "max_tfactor": 10, "GEMMK": 0}


def test_draws_are_uniform_among_what_the_restrictions_allow():
    space = space_from_t1(t1([{"Name": "x", "Values": [1, 2, 3]}, {"Name": "y", "Values": [1, 2, 3, 6]}, {"Name": "z", "Values": [0, 1, 2]},
                              {"Name": "w", "Values": ["a", "b"]}], ["x * y == 6", "z < 2", "1 < 2"]))
    grid = np.indices(space.sizes).reshape(4, -1).T
    allowed = {tuple(row) for row in grid[space.allowed(grid)]}
    counts = Counter(tuple(row) for row in space.draw(12_000, np.random.default_rng(0)))
    assert set(counts) == allowed and len(allowed) == 12                         # each allowed configuration, nothing else
    assert all(800 < n < 1200 for n in counts.values())                         # about 1,000 each
    assert len(space_from_t1(t1([{"Name": "x", "Values": [1, 2]}], ["x > 2"])).draw(5, np.random.default_rng(0))) == 0


def test_knobs_linked_past_what_draw_lists_are_drawn_again_where_their_restrictions_fail():
    """Three knobs of 256 values that one restriction links make 16.7 million configurations, too many to list: a draw
    redraws those the restriction rules out, and returns only allowed ones (fewer where it allows almost nothing)."""
    params = [{"Name": n, "Values": "list(range(256))"} for n in ("x", "y", "z")]
    roomy = space_from_t1(t1(params, ["x + y + z < 300"]))                    # allows about a quarter
    rows = roomy.draw(2_000, np.random.default_rng(0))
    assert len(rows) == 2_000 and roomy.allowed(rows).all() and all(len(set(rows[:, k])) > 200 for k in range(3))
    narrow = space_from_t1(t1(params, ["x < 64 and y < 64 and z < 64"]))     # one in 64: half the rows found in 50 tries
    rows = narrow.draw(200, np.random.default_rng(0))
    assert 50 < len(rows) < 200 and narrow.allowed(rows).all()


@pytest.mark.parametrize("strategy", ["quick", "bayes", "checkpoint", "focused"])
def test_a_space_that_allows_one_configuration_in_30000_is_still_searched(tmp_path, strategy):
    """Before, every draw and TPE proposal the restrictions ruled out cost nothing and found nothing: the searches scored
    no configuration at all and said they had converged."""
    values = list(range(1, 31))
    tune_params = {"a": values, "b": values, "c": values, "d": values}
    allowed = [(a, b, c, d) for a in values for b in values for c in values for d in values if a * b == 12 and c + d == 31 and c < 5]
    toy_cache(tmp_path, {k: 1.0 + abs(k[0] - 3) + abs(k[2] - 2) for k in allowed}, tune_params=tune_params)
    (tmp_path / "tight.t1.json").write_text(json.dumps(t1([{"Name": n, "Values": values, "Default": 1} for n in tune_params],
                                                          ["a * b == 12", "c + d == 31", "c < 5"])))
    objective = CacheObjective(tmp_path / "toy.json.gz", tmp_path / "tight.t1.json")
    assert len(allowed) * 30_000 <= objective.space.size == 30**4
    start = tuple(int(i) for i in objective.space.default())                     # ruled out, as is all around it
    local = strategy in ("checkpoint", "focused")                                   # they start from the default
    spec = Spec(strategy=strategy, mode="time", max_evals=len(allowed), seed=0, start=start if local else None)
    search = Search(History(f"sqlite:///{tmp_path / 'history.db'}"), objective, spec)
    outcome = STRATEGIES[strategy](search)
    assert outcome.new_evaluations >= (1 if local else len(allowed) // 2) and outcome.failed == 0
    assert outcome.best is not None and (local or outcome.best.value == objective.optimum == 1.0)


def _coupled(groups):
    data = t1([{"Name": "bx", "Values": [16, 32, 64, 128]}, {"Name": "mode", "Values": ["a", "b"]}, {"Name": "tile", "Values": [1, 2, 4]}])
    data["ConfigurationSpace"]["Coupled"] = groups
    return space_from_t1(data)


def test_a_t1_file_may_declare_knobs_that_pay_only_together():
    assert _coupled([["tile", "bx"], ["mode", "bx", "tile"]]).coupled == ((0, 2), (0, 1, 2))
    assert space_from_t1(t1([{"Name": "x", "Values": [1, 2]}])).coupled == ()
    assert _coupled([["tile", "bx"]]).fingerprint == _coupled([]).fingerprint       # a hint: same configurations, same history


def test_a_space_s_fingerprint_changes_with_what_the_search_sees():
    """The objective's name carries it: a knob's values, its kind (how the search models it) or a restriction edited
    start a new study, where an unchanged space resumes its own."""
    def fingerprint(kind="ordinal", values=(16, 32, 64), conditions=()):
        return space_from_t1(t1([{"Name": "bx", "Values": list(values), "Kind": kind}, {"Name": "tile", "Values": [1, 2]}],
                                conditions)).fingerprint

    same = fingerprint()
    assert fingerprint() == same
    assert len({same, fingerprint(kind="nominal"), fingerprint(values=(16, 32, 128)), fingerprint(conditions=["bx > 16"])}) == 4


@pytest.mark.parametrize(("groups", "fragment"), [
    ("bx,tile", "Coupled must be a list of lists of knob names"),
    ([["bx"]], "two or more distinct knob names"),
    ([["bx", "bx"]], "two or more distinct knob names"),
    ([["bx", {"name": "tile"}]], "two or more distinct knob names"),
    ({"bx": "tile"}, "Coupled must be a list of lists of knob names"),
    ([["bx", "warps"]], 'names unknown knobs ["warps"]'),
])
def test_bad_coupled_groups_are_refused_with_a_reason(groups, fragment):
    with pytest.raises(SpaceError) as caught:
        _coupled(groups)
    assert fragment in str(caught.value)


def test_coupled_groups_are_bounded():
    wide = t1([{"Name": f"k{j}", "Values": list(range(16))} for j in range(3)])
    wide["ConfigurationSpace"]["Coupled"] = [["k0", "k1", "k2"]]
    assert space_from_t1(wide).coupled == ((0, 1, 2),)                          # 4096 joint values
    wide["ConfigurationSpace"]["Coupled"] = [["k0", "k1", "k2"], ["k0", "k1"]]
    with pytest.raises(SpaceError, match=r'up to \["k0", "k1"\] have 4352 joint values; at most 4096 in all'):
        space_from_t1(wide)


def test_the_kernel_plan_catalogue_is_a_t1_file():
    assert SPACE.names[0] == "q_layout" and len(SPACE.knobs) == 19
    assert load_space(ROOT / "tuner" / "task" / "kernel_plan.t1.json") == SPACE


@pytest.mark.parametrize(("params", "conditions", "fragment"), [
    ([{"Name": "x", "Values": "__import__('os').system('x')"}], [], "__import__"),
    ([{"Name": "x", "Values": "[1, 2]"}], ["__import__('os').system('x')"], "__import__"),
    ([{"Name": "x", "Values": "5"}], [], "values must be a non-empty list"),
    ([{"Name": "x", "Values": {"a": 1}}], [], "values must be a non-empty list"),
    ([{"Name": "x", "Values": [1, 1]}], [], "repeats a value"),
    ([{"Name": "x", "Values": [1, 2], "Default": 3}], [], "knob 'x': Default 3 is not one of its values (allowed: 1, 2)"),
    ([{"Name": "x", "Values": [1, 2], "Default": True}], [], "Default true is not one of its values"),
    ([{"Name": "x", "Values": [1, 2]}], ["y > 1"], "unknown knobs ['y']"),
    ([{"Name": "x", "Values": [1, 2]}], ["x > 1", "y > 1"], "T1 file: condition 'y > 1' names unknown knobs ['y']"),
    ([{"Name": "x", "Values": [1, 2]}], ["(x).__class__"], "Attribute is not allowed"),
    ([{"Name": "x", "Values": [1, 2]}], ["abs(x - 2) < 1"], "T1 file: expression 'abs(x - 2) < 1': call of 'abs' is not allowed "
                                                         "(allowed: range, list, len, min, max)"),   # not a knob called abs
    ([{"Name": "x", "Values": [1, 2]}], ["x.bit_length() > 1"], "call of 'x.bit_length' is not allowed"),
    ([{"Name": "x", "Values": [1, 2]}], ["max(x, key=x) > 1"], "call of 'max' with a keyword argument is not allowed"),
    ([{"Name": "x", "Values": [1, 2]}], ["[x] * 100000 * 100000 == []"], "builds or steps through more than 100000 items"),
    ([{"Name": "x", "Values": [1, 2]}, {"Name": "s", "Values": ["a", "b"]}], ["x < s if s == 'b' else True"],   # fails for s = 'b' only
     "'<' not supported between instances of 'int' and 'str'"),
    ([{"Name": "x.y", "Values": [1, 2]}], [], "knob name"),
    ([{"Name": "__x", "Values": [1, 2]}], [], "knob name '__x' is not allowed (a plain identifier, not starting with two underscores)"),
    ([{"Name": "b" * 101, "Values": [1, 2]}], [], "b' (101 characters) is too long (at most 100 characters)"),
    ([{"Name": "True", "Values": [1, 2]}], [], "knob name 'True' is not allowed: a restriction could not name it"),   # True is the constant
    ([{"Name": "lambda", "Values": [1, 2]}], [], "knob name 'lambda' is not allowed"),
    ([{"Name": "len", "Values": [1, 2]}], [], "knob name 'len' is not allowed"),
    ([], [], "1 to 64 knobs"),
    ([{"Name": "x", "Values": [1, 2]}, {"Name": "y", "Values": [1, 2]}], [{"Expression": "x > 1", "Parameters": ["x", "z"]}],
     'T1 file: condition "x > 1" lists unknown knobs ["z"] in its Parameters; the knobs are ["x", "y"]'),   # was accepted
    ([{"Name": "x", "Type": "integer", "Values": [1, 2]}], [], 'T1 file: TuningParameters[0] (\'x\'): Type "integer" is not one of '
                                                          "int, uint, float, bool, string"),                   # was accepted
    ([{"Name": "x", "Values": [1, 2]}], [{"Expression": "x > 1", "Parameters": "x"}],
     'T1 file: condition "x > 1": its Parameters must be a list of knob names, got "x"'),
    ([{"Name": "x", "Values": [1, 2], "Kind": "categorical"}], [], "Kind 'categorical' is not allowed (allowed: ordinal, nominal)"),
    ([{"Name": "x", "Values": "list(range(10001))"}], [], "knob 'x' has 10001 values (at most 10000)"),
    ([{"Name": "x", "Values": [1, 2]}, {"Name": "y", "Values": [3]}, {"Name": "x", "Values": [3]}], [],
     "T1 file: knob name 'x' is given to more than one knob"),
    ([{"Name": "x", "Values": [1, 2]}], [{"Expression": 1}], "a condition must be an expression string, got 1"),
])
def test_bad_space_files_are_refused_with_a_reason(params, conditions, fragment):
    with pytest.raises(SpaceError) as caught:
        space_from_t1(t1(params, conditions))
    assert fragment in str(caught.value)


def test_values_written_as_a_range_or_a_tuple_are_its_items():
    space = space_from_t1(t1([{"Name": "bx", "Values": "range(4, 9, 2)"}, {"Name": "tile", "Values": "(8, 16)"}]))
    assert [k.choices for k in space.knobs] == [(4, 6, 8), (8, 16)]


def test_restrictions_that_chain_knobs_link_them_all_and_a_default_of_zero_counts():
    knobs = [{"Name": name, "Values": [1, 2]} for name in "abcd"]
    assert space_from_t1(t1(knobs, ["a <= b", "c <= d", "a <= d"])).linked == ((0, 1, 2, 3),)    # c joins through d
    space = space_from_t1({"ConfigurationSpace": {"TuningParameters": [{"Name": "zero", "Values": [1, 0], "Default": 0}]}}, "gemm.t1.json")
    assert space.decode(space.default()) == {"zero": 0} and space.name == "gemm.t1"      # no BenchmarkName: the file's name


def test_conditions_written_as_one_string_are_refused_not_read_as_characters():
    data = t1([{"Name": "x", "Values": [1, 2]}])
    data["ConfigurationSpace"]["Conditions"] = "x > 1"
    with pytest.raises(SpaceError, match=r"^T1 file: Conditions must be a list$"):
        space_from_t1(data)


def test_a_knob_that_mixes_strings_and_numbers_keeps_its_values_in_restrictions():
    space = space_from_t1(t1([{"Name": "m", "Values": ["a", 1, True, 2.5]}], ["m == 1 or m == 'a'"]))
    assert space.allowed(np.arange(4)[:, None]).tolist() == [True, True, True, False]      # as in Python, True == 1


def test_a_string_ending_in_a_nul_character_keeps_it_in_restrictions():
    space = space_from_t1(t1([{"Name": "s", "Values": ["a", "a\0", "b"]}], ["s != 'a' and len(s) < 3"]))
    assert space.allowed(np.arange(3)[:, None]).tolist() == [False, True, True]       # numpy's strings drop the NUL


def test_a_mixed_knob_keeps_its_values_when_a_restriction_is_evaluated_row_by_row():
    space = space_from_t1(t1([{"Name": "m", "Values": ["a", 1, 2.5]}, {"Name": "x", "Values": [0, 1, 2]}], ["m == 1 or 1 / x > 0"]))
    assert space.allowed(np.indices(space.sizes).reshape(2, -1).T).tolist() == [False, True, True, True, True, True, False, True, True]


def test_a_restriction_that_fails_past_the_sample_read_with_the_file_is_a_space_error_naming_the_configuration():
    space = space_from_t1(t1([{"Name": "x", "Values": [1, 2, 3]}, {"Name": "s", "Values": ["a", "b"]}, {"Name": "t", "Values": [1, 2, 3]}],
                             ["x < s if (s == 'b' and x == 3 and t == 2) else True"]))
    with pytest.raises(SpaceError, match=r'cannot be evaluated for \{"x": 3, "s": "b", "t": 2\}.*not supported'):
        space.allowed(np.indices(space.sizes).reshape(3, -1).T)


def test_cache_objective_scores_records_failures_and_absences(tmp_path):
    objective = CacheObjective(toy_cache(tmp_path, {(32, 1): 2.5, (64, 1): 1.25, (64, 2): "RuntimeFailedConfig", (128, 2): "weird",
                                                    (32, 2): 10**400}))                       # a time no float holds
    idx = objective.space.encode_many([{"bx": b, "tile": t} for b, t in [(32, 1), (64, 1), (64, 2), (128, 2), (128, 1), (32, 2)]])
    result = objective.evaluate(idx)
    assert result.cycles[:2].tolist() == [2.5, 1.25] and np.isinf(result.cycles[2:]).all()
    assert result.correct.tolist() == [True, True, False, False, False, False]
    assert result.reasons[:5] == [None, None, "RuntimeFailedConfig", "ErrorConfig: weird", NOT_MEASURED]
    assert result.reasons[5] == "ErrorConfig: " + "1" + "0" * 59
    assert objective.optimum == 1.25 and objective.modes == ("time",)
    assert objective.report({"bx": 64, "tile": 2})["reason"] == "RuntimeFailedConfig"
    (tmp_path / "zero").mkdir()
    zero = CacheObjective(toy_cache(tmp_path / "zero", {(32, 1): 0, (64, 1): -1.5, (128, 1): 2.0}))      # no run takes no time
    reasons = zero.evaluate(zero.space.encode_many([{"bx": b, "tile": 1} for b in (32, 64)])).reasons
    assert reasons == ["ErrorConfig: 0", "ErrorConfig: -1.5"]
    assert zero.optimum == 2.0


T4_INVALIDITY = {"InvalidConfig": "constraints", "CompilationFailedConfig": "compile", "RuntimeFailedConfig": "runtime"}


def _t4_result(config, time):
    """One result of a T4 results file, as Kernel Tuner's ``get_t4_results`` writes it (time: ms or an error marker)."""
    return {"configuration": config, "times": {"runtimes": []}, "invalidity": T4_INVALIDITY.get(time, "correct"), "correctness": 1,
            "measurements": [{"name": "time", "value": time, "unit": "ms"}], "objectives": ["time"]}


def test_a_t4_results_file_replays_like_the_same_measurements_in_a_kernel_tuner_cache(tmp_path):
    cache = json.loads(gzip.decompress(OTHER_GPU.read_bytes()))
    names, records = cache["tune_params_keys"], list(cache["cache"].values())
    results = [_t4_result({n: record[n] for n in names}, record["time"]) for record in records]
    (tmp_path / "results.json").write_text(json.dumps({"schema_version": "1.0.0", "results": results}))
    t4 = CacheObjective(tmp_path / "results.json")
    recorded = {n: [v for v in cache["tune_params"][n] if any(r[n] == v for r in records)] for n in names}
    assert {k.name: list(k.choices) for k in t4.space.knobs} == recorded          # a T4 file spans the values it records
    (tmp_path / "recorded.t1.json").write_text(json.dumps(t1([{"Name": n, "Values": v} for n, v in recorded.items()])))
    kt = CacheObjective(OTHER_GPU, tmp_path / "recorded.t1.json")
    assert [(k.name, k.choices, k.kind) for k in t4.space.knobs] == [(k.name, k.choices, k.kind) for k in kt.space.knobs]
    grid = np.indices(kt.space.sizes).reshape(len(names), -1).T.astype(np.int16)          # every configuration of the space
    mine, theirs = t4.evaluate(grid), kt.evaluate(grid)
    assert np.array_equal(mine.cycles, theirs.cycles) and mine.reasons == theirs.reasons
    assert Counter(mine.reasons) == {None: 5256, "CompilationFailedConfig": 1426, "RuntimeFailedConfig": 86, NOT_MEASURED: len(grid) - 6768}
    runs = []
    for objective in (t4, kt):
        spec = Spec(strategy="quick", mode="time", max_evals=60, seed=0)
        search = Search(History(f"sqlite:///{tmp_path / objective.source}.db"), objective, spec)
        STRATEGIES["quick"](search)
        runs.append(list(search.seen.values()))
    assert runs[0] == runs[1] and len(runs[0]) >= 60


T4_RESULTS_SCHEMA = {                                  # the constraints of the T4 results schema, version 1.0.0
    "type": "object", "required": ["schema_version", "results"],
    "properties": {
        "schema_version": {"type": "string", "pattern": r"^[0-9]+\.[0-9]+\.[0-9]+$"},
        "results": {"type": "array", "items": {
            "type": "object", "required": ["configuration", "times", "invalidity", "correctness"],
            "properties": {"configuration": {"type": "object"}, "objectives": {"type": "array"}, "times": {"type": "object"},
                           "invalidity": {"enum": ["timeout", "compile", "runtime", "correctness", "constraints", "correct"]},
                           "correctness": {"type": "number"},
                           "measurements": {"type": "array", "items": {"type": "object", "properties": {
                               "name": {"type": "string"}, "value": {"type": ["number", "string", "array"]},
                               "unit": {"type": "string"}}}}}}}}}


def test_a_configuration_given_as_an_object_is_scored_or_refused_naming_the_knob(tmp_path):
    """As an agent passes it through MCP: an object of knob values is looked up as it is; one outside the space is
    refused by the knob, the value and what is allowed, and runs nothing."""
    ctx = service.Context.create(tmp_path, objective=f"cache:{toy_cache(tmp_path, {(32, 1): 3.0, (64, 2): 1.5})}")
    scored = service.run_objective(ctx, plan={"bx": 64, "tile": 2})
    assert scored["plan_source"] == "inline configuration" and scored["time_ms"] == 1.5 and scored["correct"] is True
    assert service.run_objective(ctx, plan={"bx": 128, "tile": 2})["reason"] == NOT_MEASURED
    for wrong, said in (({"bx": 65, "tile": 2}, "knob 'bx': value 65 is not allowed (allowed: 32, 64, 128)"),
                        ({"bx": 64}, "missing knob 'tile' (allowed: 1, 2)"),
                        ({"bx": 64, "tile": 2, "z": 1}, "unknown knob 'z' (known knobs: bx, tile)"),
                        ({"bx": "64", "tile": 2}, 'knob \'bx\': value "64" must be an integer, one of: 32, 64, 128')):
        with pytest.raises(SpaceError) as caught:
            service.run_objective(ctx, plan=wrong)
        assert str(caught.value) == said


@pytest.mark.parametrize(("values", "given", "said"), [
    ([1.0, 2.5], 1, "value 1 must be a number with a decimal point (1.0, not 1), one of: 1.0, 2.5"),     # was "must be a number"
    ([True, False], 1, "value 1 must be true or false, one of: true, false"),                   # was "one of: True, False"
    ([1, 2.5], "1", 'value "1" must be a number, one of: 1, 2.5'),
    ([1, "a"], None, "value null must be one of the listed values, one of: 1, a"),
])
def test_a_value_of_the_wrong_type_is_refused_with_what_json_would_have_written(values, given, said):
    space = space_from_t1(t1([{"Name": "x", "Values": values}]))
    with pytest.raises(SpaceError, match=f"^knob 'x': {re.escape(said)}$"):
        space.validate({"x": given})


@pytest.mark.parametrize("thinned", [False, True])
def test_a_study_exported_as_t4_results_replays_as_the_measurements_it_made(tmp_path, monkeypatch, thinned):
    records = {(32, 1): 3.0, (32, 2): "CompilationFailedConfig", (64, 1): 2.0, (64, 2): 1.5, (128, 1): "InvalidConfig"}
    cache = toy_cache(tmp_path, records)                                       # (128, 2) was not measured
    workspace = tmp_path / "ws"
    workspace.mkdir()
    if thinned:                                          # a long run's trials: its failures' reasons are not kept
        monkeypatch.setattr(search_module, "DASHBOARD_TRIALS", 0)
        monkeypatch.setattr(search_module, "THIN_EVERY", 10**9)
    ctx = service.Context.create(workspace, objective=f"cache:{cache}")
    searched = service.search_plans(ctx, strategy="quick", max_evals=10, seed=0)
    assert (len(ctx.history.trials(searched["study"])) < 6) is thinned        # thinned: the first trial and the improvements
    exported = service.export_results(ctx)
    assert exported == {"path": "results/results.t4.json", "backup": None, "study": searched["study"], "results": 6, "failed": 3}
    written = (workspace / exported["path"]).read_bytes()
    data = json.loads(written)
    jsonschema.validate(data, T4_RESULTS_SCHEMA)
    assert data["metadata"]["timeunit"] == "milliseconds"
    order = [ctx.objective.space.decode(ctx.history.cached(ctx.objective.name, "time", [h])[h].idx)
             for h, _ in ctx.history.outcomes(searched["study"])]
    assert [r["configuration"] for r in data["results"]] == order              # in the order the search made them
    shown = {(r["configuration"]["bx"], r["configuration"]["tile"]): (r["invalidity"], [m["value"] for m in r["measurements"]])
             for r in data["results"]}
    assert shown == {(32, 1): ("correct", [3.0]), (32, 2): ("compile", []), (64, 1): ("correct", [2.0]), (64, 2): ("correct", [1.5]),
                     (128, 1): ("constraints", []), (128, 2): ("runtime", [])}
    replayed = CacheObjective(workspace / exported["path"])
    grid = np.indices(replayed.space.sizes).reshape(2, -1).T.astype(np.int16)
    again = {tuple(replayed.space.decode(row).values()): value for row, value in zip(grid, replayed.evaluate(grid).cycles, strict=True)}
    assert again == {c: (t if isinstance(t, float) else np.inf) for c, t in {**records, (128, 2): "not measured"}.items()}
    assert service.export_results(ctx)["backup"] and (workspace / exported["path"]).read_bytes() == written     # same bytes
    later = service.search_plans(ctx, strategy="quick", max_evals=10, seed=1)
    assert service.export_results(ctx)["study"] == later["study"]               # by default, the study updated last
    ctx.close()
    command = [sys.executable, "-m", "tuner", "--workspace", str(workspace), "--objective", f"cache:{cache}", "export_results"]
    out = subprocess.run([*command, "--study", "quick:nope"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 2 and "'quick:nope' names no study" in out.stderr and out.stderr.count("\n") == 1, out.stderr
    out = subprocess.run([*command, "--study", "quick:space:time:seed0", "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0 and json.loads(out.stdout)["study"] == searched["study"], out.stderr     # the start of its name


def test_a_tensor_plan_study_exported_as_t4_replays_in_its_own_mode_and_unit(workspace):
    ctx = service.Context.create(workspace)
    searched = service.search_plans(ctx, strategy="quick", max_evals=12, seed=0)
    exported = service.export_results(ctx)
    replayed = CacheObjective(workspace / exported["path"])        # the file measures dev (cycles), not a time
    assert (replayed.modes, replayed.unit) == (("dev",), "cycles")
    made = {h: value for h, value in ctx.history.outcomes(searched["study"])}
    rows = ctx.history.cached(ctx.objective.name, "dev", list(made))
    for h, value in made.items():
        row = replayed.space.encode(ctx.objective.space.decode(rows[h].idx))
        assert replayed.cycles(row[None])[0] == (value if value is not None else np.inf)
    best = ctx.objective.space.decode(rows[min((h for h in made if made[h] is not None), key=made.__getitem__)].idx)
    ctx.close()
    (workspace / "best.json").write_text(json.dumps(best))
    out = _cli("--objective", f"cache:{workspace / exported['path']}", "--json", "benchmark_plan", "--plan", "best.json", cwd=workspace)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["dev_cycles"] == {"dev": min(v for v in made.values() if v is not None)}


def test_a_t4_file_is_replayed_by_its_time_and_refused_where_it_would_be_maximized(tmp_path):
    results = [_t4_result({"bx": bx}, time) for bx, time in [(32, 2.0), (64, 1.0)]]
    for result in results:                              # Kernel Tuner's file when tuned for GFLOP/s: the time is there too
        result["measurements"].append({"name": "GFLOP/s", "value": 10 / result["measurements"][0]["value"], "unit": ""})
        result["objectives"] = ["GFLOP/s"]
    (tmp_path / "gflops.json").write_text(json.dumps({"results": results}))
    objective = CacheObjective(tmp_path / "gflops.json")
    assert (objective.modes, objective.unit, objective.optimum) == (("time",), "ms", 1.0)
    for result in results:
        del result["measurements"][0]                   # GFLOP/s alone: higher is better, which a minimizer would get wrong
    (tmp_path / "gflops.json").write_text(json.dumps({"results": results}))
    with pytest.raises(SpaceError, match="objective 'GFLOP/s' is higher-is-better and it measures no time"):
        CacheObjective(tmp_path / "gflops.json")


def test_a_cache_tuned_for_another_objective_replays_its_time_and_one_with_no_time_its_objective_in_its_unit(tmp_path):
    """A Kernel Tuner cache tuned for GFLOP/s records the time too: that is replayed, not refused. A T4 file that
    measures no time replays its objective (lower is better), in the unit it names, or in "units" where it names none."""
    data = {"kernel_name": "toy", "objective": "GFLOP/s", "tune_params_keys": ["bx"], "tune_params": {"bx": [32, 64]},
            "cache": {str(bx): {"bx": bx, "time": t, "GFLOP/s": 10 / t} for bx, t in ((32, 2.0), (64, 1.0))}}
    (tmp_path / "gflops.json").write_text(json.dumps(data))
    gflops = CacheObjective(tmp_path / "gflops.json")
    assert (gflops.modes, gflops.unit, gflops.optimum) == (("time",), "ms", 1.0)
    results = [{"configuration": {"bx": bx}, "invalidity": "correct", "measurements": [{"name": "score", "value": v}],
                "objectives": ["score"]} for bx, v in ((32, 3.0), (64, 4.0))]
    (tmp_path / "score.json").write_text(json.dumps({"results": results}))
    replayed = CacheObjective(tmp_path / "score.json")
    assert (replayed.modes, replayed.unit, replayed.optimum) == (("score",), "units", 3.0)


def test_a_kernel_tuner_cache_that_also_names_results_is_read_as_a_cache(tmp_path):
    """Its ``cache`` decides what it is: a key ``results`` of its own (another tool's notes) makes no T4 file of it."""
    path = toy_cache(tmp_path, {(32, 1): 3.0, (64, 1): 2.0}, name="toy.json")
    path.write_text(json.dumps(json.loads(path.read_text()) | {"results": "kept by another tool"}))
    assert CacheObjective(path).optimum == 2.0


@pytest.mark.parametrize(("value", "correct", "failure", "invalidity"), [
    (1.5, True, None, "correct"), (1.5, False, None, "correctness"), (None, False, "timeout", "timeout"),
    (None, False, "CompilationFailedConfig", "compile"), (None, False, "RuntimeFailedConfig", "runtime"),
    (None, False, "InvalidConfig", "constraints"), (None, False, RULED_OUT, "constraints"),
    (None, False, "bench.sh exited 3: out of memory", "runtime"), (None, False, None, "runtime"),
    (None, False, "ErrorConfig: timeout", "timeout"), (None, False, "ErrorConfig: correctness", "correctness"),   # replayed
    (None, False, "CompilationFailedConfig: nvcc exited 2", "compile")])       # a program's {"error": ...} with its detail
def test_a_t4_result_says_why_a_configuration_has_no_value(value, correct, failure, invalidity):
    result = t4_result({"bx": 32}, {"time": value}, "ms", correct, failure)
    assert result["invalidity"] == invalidity and result["correctness"] == int(correct)
    assert result["measurements"] == ([{"name": "time", "value": value, "unit": "ms"}] if value is not None else [])
    jsonschema.validate({"schema_version": "1.0.0", "results": [result]}, T4_RESULTS_SCHEMA)


def test_a_t4_knob_whose_values_python_finds_equal_has_one_order(tmp_path):
    results = [_t4_result({"m": m}, 1.0 + i) for i, m in enumerate([2, 1.0, True, "b", 1, "a"])]
    (tmp_path / "results.json").write_text(json.dumps({"results": results}))
    (knob,) = CacheObjective(tmp_path / "results.json").space.knobs
    assert [(v, type(v)) for v in knob.choices] == [(True, bool), (1.0, float), (1, int), (2, int), ("a", str), ("b", str)]


def test_a_t1_space_adds_restrictions_to_a_cache(tmp_path):
    cache = toy_cache(tmp_path, {(32, 1): 2.5, (64, 1): 1.25})
    (tmp_path / "toy.t1.json").write_text(json.dumps(t1([{"Name": "tile", "Values": [1, 2]}, {"Name": "bx", "Values": [32, 64, 128]}],
                                                         ["bx * tile <= 64"])))
    objective = CacheObjective(cache, tmp_path / "toy.t1.json")
    assert objective.space.names == ("tile", "bx")
    rows = objective.space.encode_many([{"tile": 2, "bx": 64}, {"tile": 1, "bx": 64}])
    assert objective.feasible(rows).tolist() == [False, True]
    assert objective.optimum == 1.25
    (tmp_path / "tight.t1.json").write_text(json.dumps(t1([{"Name": "tile", "Values": [1, 2]}, {"Name": "bx", "Values": [32, 64, 128]}],
                                                          ["bx * tile <= 32"])))
    assert CacheObjective(cache, tmp_path / "tight.t1.json").optimum == 2.5       # the best the space allows, not the record's
    (tmp_path / "other.t1.json").write_text(json.dumps(t1([{"Name": "z", "Values": [1, 2]}])))
    with pytest.raises(SpaceError, match="names knobs"):
        CacheObjective(cache, tmp_path / "other.t1.json")
    (tmp_path / "strings.t1.json").write_text(json.dumps(t1([{"Name": "tile", "Values": [1, 2]}, {"Name": "bx", "Values": ["32", "64"]}])))
    with pytest.raises(SpaceError, match=r"""no successful measurement of a configuration in space file 'strings.t1.json': """
                                         r"""a record has bx = 32, the space's values are \["32", "64"\]$"""):
        CacheObjective(cache, tmp_path / "strings.t1.json")           # the same knobs, but their values are strings there


def _cli(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tuner", "--workspace", str(cwd), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300, input=stdin)


def _gz(data) -> bytes:
    return gzip.compress(json.dumps(data).encode())


@pytest.mark.parametrize(("content", "fragment"), [
    (_gz({"tune_params": {"a": [1]}, "cache": {}})[:20], "cannot be read"),
    (_gz({"cache": {}}), "needs tune_params"),
    (_gz({"ConfigurationSpace": {"TuningParameters": []}}), "needs tune_params; this is a T1 space file, which --space takes"),
    (_gz({"tune_params": {"a": 3}, "tune_params_keys": ["a"], "cache": {}}), "values must be a non-empty list"),
    (_gz({"results": [_t4_result({"a": [1, 2]}, 1.0)]}), "results[0]: knob 'a': '[1, 2]' is not a number, string or boolean"),
    (_gz({"results": [{**_t4_result({"a": 1}, 1.0), "measurements": 5}]}), "results[0]: measurements must be a list"),
    (_gz({"results": [_t4_result({"a": 1}, 1.0), _t4_result({"b": 1}, 2.0)]}), "results[1] configures ['b'], results[0] ['a']"),
    (gzip.compress(b"[" * 100_000), "is not valid JSON: nested too deeply"),
    (gzip.compress(b'{"tune_params": {"a": [' + b"1" * 5000 + b"]}}"), "is not valid JSON: a number too long to read"),
    (gzip.compress(b'{"tune_params": {"a": [1], "a": [2]}, "cache": {}}'), "is not valid JSON: key 'a' appears twice in one object"),
    (_gz({"tune_params": {"a": [1, 10**400]}, "tune_params_keys": ["a"], "cache": {}}), "knob 'a': value 1000000"),
    (_gz({"tune_params": {"a": [1, float("nan")]}, "tune_params_keys": ["a"], "cache": {}}), "knob 'a': value NaN is not allowed"),
    (_gz({"tune_params": {"a": [1, 2]}, "objective": "score",       # a hyperparameter tuning's cache: no time, its score
          "cache": {"1": {"a": 1, "score": 0.2, "scores": [0.2]}, "2": {"a": 2, "score": -0.4, "scores": [-0.4]}}}),
     "its records hold no time, the value the tuner replays (ms, lower is better), but its objective 'score'"),
])
def test_bad_caches_exit_2_with_one_line_and_write_nothing(tmp_path, content, fragment):
    (tmp_path / "c.json.gz").write_bytes(content)
    before = sorted(p.name for p in tmp_path.iterdir())
    out = _cli("--objective", "cache:c.json.gz", "search_plans", "--max-evals", "5", cwd=tmp_path)
    assert out.returncode == 2 and fragment in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize(("option", "what"), [("--objective=cache:{}", "cache file"), ("--space={}", "space file")])
def test_a_file_that_cannot_be_opened_is_named_by_the_path_as_given(tmp_path, option, what):
    """Where a file is missing or is a folder, the error shows the path the user typed: its name alone hid a typo
    in a folder (``cache:../shraed/gemm.json.gz`` said ``'gemm.json.gz' does not exist``)."""
    cache = toy_cache(tmp_path, {(32, 1): 1.0})
    (tmp_path / "sub").mkdir()
    for given, why in [("sub/nowhere/toy.json.gz", "does not exist"), (str(tmp_path / "sub"), "cannot be read: Is a directory")]:
        other = ["--space", cache.name] if what == "cache file" else ["--objective", f"cache:{cache.name}"]
        out = _cli(*other, option.format(given), "search_plans", "--max-evals", "5", cwd=tmp_path)
        assert out.returncode == 2 and out.stderr.endswith(f"error: {what} {given!r} {why}\n"), out.stderr


@pytest.mark.parametrize("command", [("search_plans", "--max-evals", "5"), ("local_neighborhood_search",), ("run", "--time-s", "5"),
                                     ("bounded_exhaustive_search", "--profile", "all"), ("search_plans", "--workers", "3"),
                                     ("search_plans", "--strategy", "focused")])
@pytest.mark.parametrize(("never", "said"), [("bx > 1280", "no values of the knobs they name pass 'bx > 1280' together"),
                                             ("[]", "'[]' is false whatever the knobs' values")])     # reads no knob: searched nothing
def test_a_space_whose_restrictions_allow_nothing_exits_2_naming_them_and_writes_nothing(tmp_path, command, never, said):
    """A restriction with a typo (``bx > 1280``) used to give a search of no evaluation, no failure and no best."""
    toy_cache(tmp_path, {(32, 1): 1.0})
    (tmp_path / "never.t1.json").write_text(json.dumps(t1([{"Name": "bx", "Values": [32, 64, 128]}, {"Name": "tile", "Values": [1, 2]}],
                                                          [never, "tile >= 1"])))
    before = sorted(p.name for p in tmp_path.iterdir())
    out = _cli("--objective", "cache:toy.json.gz", "--space", "never.t1.json", *command, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.endswith(f"allow no configuration: {said}\n"), out.stderr
    assert len(out.stderr.splitlines()) == 1 and not out.stdout                      # said once, before any worker starts
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_file_is_read_only_up_to_its_bound_even_when_its_compressed_form_is_small(tmp_path, monkeypatch):
    """A few kB of gzip can hold gigabytes (a "zip bomb"): no more than the bound is ever decompressed, and a file
    past it is refused by name; one at the bound is read."""
    import tuner.space

    monkeypatch.setattr(tuner.space, "MAX_JSON_BYTES", 1 << 20)
    cache = json.dumps({"tune_params": {"bx": [32, 64]}, "tune_params_keys": ["bx"], "cache": {"32": {"bx": 32, "time": 1.5}}})
    at_bound = cache.encode().ljust(1 << 20)                                 # trailing spaces: still one JSON object
    (tmp_path / "fits.json.gz").write_bytes(gzip.compress(at_bound))
    assert CacheObjective(tmp_path / "fits.json.gz").space.names == ("bx",)
    packer, spaces = zlib.compressobj(9, zlib.DEFLATED, 31), b" " * (1 << 20)                # 31: the gzip format
    bomb = packer.compress(at_bound) + b"".join(packer.compress(spaces) for _ in range(256)) + packer.flush()
    (tmp_path / "bomb.json.gz").write_bytes(bomb)                                          # 256 kB of gzip, 257 MiB of text
    (tmp_path / "big.json").write_bytes(at_bound + b" ")
    assert (tmp_path / "bomb.json.gz").stat().st_size < 1 << 20
    with pytest.raises(SpaceError, match=r"^cache file 'bomb\.json\.gz' holds more than 1 MiB of JSON once decompressed, the most"):
        CacheObjective(tmp_path / "bomb.json.gz")
    with pytest.raises(SpaceError, match=r"^cache file 'big\.json' holds more than 1 MiB of JSON, the most a file may hold$"):
        CacheObjective(tmp_path / "big.json")


def test_a_cache_piped_in_is_named_by_what_it_holds(tmp_path):
    """A cache given as a pipe (``zcat c.json.gz | python -m tuner --objective cache:/dev/stdin ...``) was read a second
    time to name it, when the pipe had nothing left: every cache piped in took one name, so the second replayed the
    first one's times from the history. It is read once, and named by what it holds."""
    for scale in (1.0, 10.0):
        cache = toy_cache(tmp_path, {(bx, tile): scale * (bx + tile) for bx in (32, 64, 128) for tile in (1, 2)}, "c.json")
        out = _cli("--objective", "cache:/dev/stdin", "--json", "search_plans", "--strategy", "quick", "--seed", "0",
                   "--max-evals", "6", cwd=tmp_path, stdin=cache.read_text())
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        assert (result["best"]["time"], result["optimum"], result["new_evaluations"]) == (33 * scale, 33 * scale, 6)


def _left_open(tune_params: dict, records: dict[tuple, object]) -> str:
    """A Kernel Tuner cache as Kernel Tuner writes it while it tunes (``kernel_tuner.util``): the header without its
    last three characters (``}\\n}``), then each record appended with a comma after it; the closing braces come only
    when tuning ends, so an interrupted run leaves the file so."""
    names = list(tune_params)
    header = json.dumps({"device_name": "toy", "kernel_name": "toy", "tune_params_keys": names, "tune_params": tune_params,
                         "objective": "time", "cache": {}}, indent="")[:-3]
    return header + "".join("\n" + json.dumps({",".join(map(str, combo)): {**dict(zip(names, combo, strict=True)), "time": t}})[1:-1] + ","
                            for combo, t in records.items())


def test_a_cache_left_open_by_an_interrupted_tuning_is_read_as_kernel_tuner_reads_it(tmp_path):
    knobs, records = {"bx": [32, 64, 128], "tile": [1, 2]}, {(32, 1): 2.5, (64, 1): "CompilationFailedConfig", (64, 2): 1.5}
    (tmp_path / "open.json").write_text(_left_open(knobs, records))
    (tmp_path / "open.json.gz").write_bytes(gzip.compress(_left_open(knobs, records).encode()))
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + _left_open(knobs, records).encode())   # a BOM, as JSON read as bytes allows
    closed = CacheObjective(toy_cache(tmp_path, records, "closed.json", knobs))
    rows = np.array([[0, 0], [1, 0], [1, 1], [2, 1]], dtype=np.int16)
    for name in ("open.json", "open.json.gz", "bom.json"):
        cache = CacheObjective(tmp_path / name)
        assert cache.space.names == closed.space.names and cache.cycles(rows).tolist() == closed.cycles(rows).tolist()
        assert [cache.reason(row) for row in rows] == [None, "CompilationFailedConfig", None, NOT_MEASURED]
    (tmp_path / "cut.json").write_text(_left_open(knobs, records)[:-12])      # cut inside a record: not Kernel Tuner's doing
    with pytest.raises(SpaceError, match=r"'cut\.json' is not valid JSON"):
        CacheObjective(tmp_path / "cut.json")
    (tmp_path / "empty.json").write_text(_left_open(knobs, {}))              # opened, nothing measured yet
    with pytest.raises(SpaceError, match="holds no successful measurement"):
        CacheObjective(tmp_path / "empty.json")
    failed = toy_cache(tmp_path, {(32, 1): "InvalidConfig", (64, 1): "InvalidConfig", (128, 2): "RuntimeFailedConfig"}, name="failed.json")
    said = r"'failed\.json' holds no successful measurement \(its records: InvalidConfig 2, RuntimeFailedConfig 1\)$"
    with pytest.raises(SpaceError, match=said):
        CacheObjective(failed)


def test_a_hostile_t1_file_exits_2_and_writes_nothing(tmp_path):
    toy_cache(tmp_path, {(32, 1): 2.5})
    (tmp_path / "evil.t1.json").write_text(json.dumps(t1([{"Name": "bx", "Values": "[32, 64, 128]"}, {"Name": "tile", "Values": [1, 2]}],
                                                         ["__import__('os').system('touch pwned')"])))
    out = _cli("--objective", "cache:toy.json.gz", "--space", "evil.t1.json", "search_plans", cwd=tmp_path)
    assert out.returncode == 2 and "__import__" in out.stderr and "Traceback" not in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.t1.json", "toy.json.gz"]


def test_a_space_file_with_a_bad_coupled_group_exits_2_and_writes_nothing(tmp_path):
    toy_cache(tmp_path, {(32, 1): 2.5})
    data = t1([{"Name": "bx", "Values": "[32, 64, 128]"}, {"Name": "tile", "Values": [1, 2]}])
    data["ConfigurationSpace"]["Coupled"] = [["bx", "warps"]]
    (tmp_path / "toy.t1.json").write_text(json.dumps(data))
    out = _cli("--objective", "cache:toy.json.gz", "--space", "toy.t1.json", "search_plans", cwd=tmp_path)
    assert out.returncode == 2 and 'names unknown knobs ["warps"]' in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy.json.gz", "toy.t1.json"]


def test_a_configuration_the_space_file_rules_out_is_no_seed_whatever_the_history_holds(tmp_path):
    """A history an older version wrote may hold a time for a configuration that the space's restrictions rule out
    (bx=32 here): the seeds that resume_search_history offers leave it out."""
    cache = toy_cache(tmp_path, {(bx, t): bx / 32 + t for bx in (32, 64, 128) for t in (1, 2)})
    (tmp_path / "no32.t1.json").write_text(json.dumps(t1([{"Name": "bx", "Values": [32, 64, 128]}, {"Name": "tile", "Values": [1, 2]}],
                                                         ["bx > 32"])))
    ctx = service.Context.create(tmp_path, objective=f"cache:{cache}", space=str(tmp_path / "no32.t1.json"))
    space = ctx.objective.space
    ruled_out, allowed = space.encode({"bx": 32, "tile": 1}), space.encode({"bx": 64, "tile": 1})
    ctx.history.write(ctx.objective.name, "time", [Row(space.hash_idx(ruled_out), 0.5, True, None, ruled_out),
                                                   Row(space.hash_idx(allowed), 3.0, True, None, allowed)])
    assert [seed["plan"] for seed in service.resume_search_history(ctx)["seeds"]] == [{"bx": 64, "tile": 1}]
    ctx.close()


def test_a_measurement_the_space_file_rules_out_has_no_value_and_is_never_the_best(tmp_path):
    """A space file may restrict more than the tuning that made the cache did (a limit of another target): the cache then
    holds times of configurations that are not in the space. The main job took its default's time, the fastest of the
    file, as the best, outside the space, at 1.5 times "the cache's optimum"."""
    toy_cache(tmp_path, {(bx, t): bx / 32 + t for bx in (32, 64, 128) for t in (1, 2)})     # (32, 1) is the fastest: 2 ms
    (tmp_path / "no32.t1.json").write_text(json.dumps(t1([{"Name": "bx", "Values": [32, 64, 128], "Default": 32},
                                                           {"Name": "tile", "Values": [1, 2]}], ["bx > 32"])))
    objective = CacheObjective(tmp_path / "toy.json.gz", tmp_path / "no32.t1.json")
    default = objective.space.encode({"bx": 32, "tile": 1})
    older = History(f"sqlite:///{tmp_path / 'studies' / 'history.db'}")      # what an older version kept: the default's time
    older.write(objective.name.removesuffix(":allowed"), "time", [Row(objective.space.hash_idx(default), 2.0, True, None, default)])
    older.close()
    given = ("--objective", "cache:toy.json.gz", "--space", "no32.t1.json", "--json")
    out = _cli(*given, "run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["baseline"]["time"] is None and result["baseline"]["reason"] == f"{RULED_OUT}: 'bx > 32'"
    assert result["best"]["time"] == 3.0 and result["of_optimum"] == 1.0                  # (64, 1), the best the space allows
    assert json.loads((tmp_path / "results" / "tuner_run_best.json").read_text()) == {"bx": 64, "tile": 1}
    compared = json.loads(_cli(*given, "compare_history", cwd=tmp_path).stdout)
    assert compared["best_verified"]["plan"] == {"bx": 64, "tile": 1} and not compared["current_is_best"]
    scored = json.loads(_cli(*given, "run_objective", cwd=tmp_path).stdout)
    assert not scored["feasible"] and scored["reason"] == f"{RULED_OUT}: 'bx > 32'" and scored["time_ms"] is None

    toy_cache(tmp_path, {(32, 1): 1.0, (32, 2): "InvalidConfig"}, name="one.json")
    before = sorted(p.name for p in tmp_path.iterdir())
    out = _cli("--objective", "cache:one.json", "--space", "no32.t1.json", "compare_history", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.endswith(
        "cache file 'one.json' holds no successful measurement of a configuration the restrictions of space file "
        "'no32.t1.json' allow (they rule out all 1 that have a time) (its records: InvalidConfig 1)\n"), out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("strategy", ["quick", "bayes", "focused", "checkpoint", "exhaustive"])
def test_every_strategy_runs_on_a_measured_cache_and_resumes(tmp_path, strategy):
    records = {(bx, t): 1.0 + abs(bx - 64) / 32 + t for bx in (32, 64, 128) for t in (1, 2)} | {(128, 2): "RuntimeFailedConfig"}
    toy_cache(tmp_path, records)
    command = {"quick": ["search_plans", "--strategy", "quick", "--max-evals", "5"],
               "bayes": ["search_plans", "--strategy", "bayes", "--max-evals", "5"],
               "focused": ["search_plans", "--strategy", "focused", "--max-evals", "5"],
               "checkpoint": ["local_neighborhood_search", "--max-evals", "6"],
               "exhaustive": ["bounded_exhaustive_search", "--profile", "all"]}[strategy]
    out = _cli("--objective", "cache:toy.json.gz", "--json", *command, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["best"]["time"] == min(v for v in records.values() if isinstance(v, float)) or strategy in ("quick", "bayes", "focused")
    assert result["best"]["plan"] in [{"bx": b, "tile": t} for (b, t) in records] and "dev" not in result["best"]
    assert result["optimum"] == 1.0 + 1 and result["of_optimum"] == round(2.0 / result["best"]["time"], 4)    # the cache's best
    if strategy == "exhaustive":                    # its one failure: its reason is kept where the range was measured (dear)
        assert result["failed"] == 1 == sum(result["failure_reasons"].values()) and result["of_optimum"] == 1.0
        assert result["failure_reasons"] == {"RuntimeFailedConfig": 1}
    again = json.loads(_cli("--objective", "cache:toy.json.gz", "--json", *command, cwd=tmp_path).stdout)
    assert again["new_evaluations"] == 0
    ranks = json.loads(_cli("--objective", "cache:toy.json.gz", "--json", "rank_experiments", cwd=tmp_path).stdout)
    ranked = ranks["ranking"]
    assert ranked and ranked[0]["time"] == min(r["time"] for r in ranked)
    assert ranks["optimum"] == 2.0 and all(r["of_optimum"] == round(2.0 / r["time"], 4) for r in ranked)


@pytest.mark.skipif(not (CACHES / "gemm-RTX_3090.json.gz").is_file(), reason="the shared GPU caches are not beside this checkout")
def test_the_shipped_gemm_cache_replays_from_the_command_line(tmp_path):
    out = _cli("--objective", f"cache:{CACHES / 'gemm-RTX_3090.json.gz'}", "--json", "search_plans", "--strategy", "quick",
               "--seed", "0", "--max-evals", "100", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    best = json.loads(out.stdout)["best"]
    assert set(best["plan"]) >= {"MWG", "NWG", "VWM"} and 0 < best["time"] < 1000


def test_another_gpus_cache_replays_from_the_command_line(tmp_path):
    """perf/caches' RTX 2080 Ti cache is real measurements shipped with the repository: quick's best is one of its
    successful records, with the time it recorded, and a second run scores nothing again."""
    command = ("--objective", f"cache:{OTHER_GPU}", "--json", "search_plans", "--strategy", "quick", "--seed", "0", "--max-evals", "60")
    out = _cli(*command, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    recorded = json.loads(gzip.decompress(OTHER_GPU.read_bytes()))
    times = [r["time"] for r in recorded["cache"].values() if {k: r[k] for k in result["best"]["plan"]} == result["best"]["plan"]]
    assert times == [result["best"]["time"]] and result["new_evaluations"] == 60
    failed = [t.user_attrs["reason"] for t in History(f"sqlite:///{tmp_path / 'studies' / 'history.db'}").trials(result["study"])
              if t.state.name == "FAIL"]
    assert result["failed"] == len(failed) > 0 and result["failure_reasons"] == dict(Counter(failed).most_common(3))
    again = json.loads(_cli(*command, cwd=tmp_path).stdout)
    assert again["new_evaluations"] == again["failed"] == 0 and again["failure_reasons"] == {}


def test_perf_real_caches_reports_what_the_command_line_finds(tmp_path):
    """perf/real_caches.py's figure for quick is the fraction of optimum that `search_plans` reaches with the same
    seeds and budget; Optuna's TPE gets a row of its own, and every fraction lies in (0, 1]."""
    out = subprocess.run([sys.executable, str(ROOT / "perf" / "real_caches.py"), "--caches", str(OTHER_GPU.parent),
                          "--seeds", "2", "--budget", "25", "--jobs", "1", "--methods", "quick", "optuna TPE"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = {line[:25].strip(): line[25:].split() for line in out.stdout.splitlines() if line.startswith("  ") and "method" not in line}
    assert set(rows) == {"quick", "optuna TPE"} and OTHER_GPU.name in out.stdout
    assert all(0 < float(cells[0]) <= 1 for cells in rows.values())
    optimum = CacheObjective(OTHER_GPU).optimum
    reached = []
    for seed in (0, 1):
        (workspace := tmp_path / str(seed)).mkdir()
        command = ("--objective", f"cache:{OTHER_GPU}", "--json", "search_plans", "--strategy", "quick", "--seed", str(seed))
        result = json.loads(_cli(*command, "--max-evals", "25", cwd=workspace).stdout)
        assert result["optimum"] == optimum and result["of_optimum"] == round(optimum / result["best"]["time"], 4) <= 1
        reached.append(optimum / result["best"]["time"])
    assert rows["quick"][-2] == f"{np.mean(reached):.3f}"          # the mean at 25 evaluations, then its standard error


def test_perf_headroom_failure_oracles_spend_no_evaluation_on_a_failure_where_they_know(tmp_path, monkeypatch):
    """perf/headroom.py's failure oracles on the 2080 Ti cache (69% of its space fails): with failures known, a quick
    run scores nothing the cache holds no time for; known to exploration, its design and TPE score none while its
    climbs still do; as shipped, all three do. Every run spends its whole budget."""
    monkeypatch.syspath_prepend(str(ROOT / "perf"))
    import headroom

    def failed_by_phase(oracle: AbstractContextManager, name: str) -> Counter:
        history = History(f"sqlite:///{tmp_path / name}.db")
        search = Search(history, CacheObjective(OTHER_GPU), Spec(strategy="quick", mode="time", max_evals=60, seed=0))
        with oracle:
            STRATEGIES["quick"](search)
        assert search.scored == 60
        return Counter(t.user_attrs["phase"] for t in history.trials(search.name) if t.state.name == "FAIL")

    shipped = failed_by_phase(nullcontext(), "shipped")
    assert shipped["design"] > 0 and shipped["tpe"] > 0 and shipped["step"] > 0
    exploring = failed_by_phase(headroom.failures_known(everywhere=False), "exploring")
    assert exploring["design"] == exploring["tpe"] == 0 < exploring["step"]
    assert sum(failed_by_phase(headroom.failures_known(everywhere=True), "everywhere").values()) == 0


def test_perf_headroom_runs_only_the_problems_asked_for(tmp_path):
    """perf/headroom.py --only runs the named problems alone: a cache by the start of its file name, at the cache
    budget --budgets gives, with every oracle's row (of one seed: its median and mean alike, with no standard error)
    and no tensor-plan table (its refusals are in tests/test_perf_scripts.py)."""
    script = (sys.executable, str(ROOT / "perf" / "headroom.py"), "--caches", str(OTHER_GPU.parent), "--seeds", "1", "--jobs", "1")
    out = subprocess.run([*script, "--only", "convolution", "--budgets", "300", "40"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"{OTHER_GPU.name} (no restrictions; 40 evaluations" in out.stdout and "tensor plan" not in out.stdout
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("  ")]
    assert len(rows) == 5 and all(0 < float(row[-2]) <= 1 and row[-1] == row[-2] for row in rows)   # one seed: median = mean


def test_the_gemm_space_file_allows_what_the_rtx_3090_cache_measured():
    """perf/spaces/gemm.t1.json writes the GEMM kernel's restrictions: of its 82,944 configurations they allow
    17,956, the number the shipped RTX 3090 cache holds, and the default is one of them."""
    space = load_space(ROOT / "perf" / "spaces" / "gemm.t1.json")
    every = load_profile(WHOLE_SPACE, space).plans(0, space.size)
    assert space.size == 82_944 and int(space.allowed(every).sum()) == 17_956
    assert space.allowed(space.default()[None])[0]
    rules_out = space.encode(dict(space.decode(space.default()), MWG=16, VWM=8))     # 16 % (8 * 8) != 0
    assert not space.allowed(rules_out[None])[0]


def test_the_engine_imports_no_tensor_plan_code():
    code = ("import sys, tuner.search, tuner.history, tuner.gate, tuner.space, tuner.strategies, tuner.objectives.cache; "
            "print(sorted(m for m in sys.modules if m.startswith(('tuner.task', 'tuner.plan', 'tuner.objectives.builtin'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
    engine = [ROOT / "tuner" / name for name in ("space.py", "search.py", "history.py", "gate.py")]
    engine += sorted((ROOT / "tuner" / "strategies").glob("*.py"))
    knobs = [k.name for k in SPACE.knobs]
    for path in engine:
        text = path.read_text()
        assert not [k for k in knobs if f'"{k}"' in text or f"'{k}'" in text], path.name
