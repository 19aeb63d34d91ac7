"""The HTML report: pure data functions (no plotly), sections per problem, and a real headless Chromium render."""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import sqlite3
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import OVERFLOWING, copy_workspace, toy_cache

from tuner import report, service
from tuner.history import Row
from tuner.objectives.builtin import BuiltinObjective
from tuner.plan import SPACE
from tuner.space import space_from_tune_params


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A workspace whose history holds a quick search, a local search and part of a profile."""
    root = copy_workspace(tmp_path_factory.mktemp("report") / "ws")
    ctx = service.Context.create(root)
    service.search_plans(ctx, "quick", max_evals=80, seed=3)
    service.local_neighborhood_search(ctx, fixture="tensor_plan_attempt1_best", max_evals=60)
    service.bounded_exhaustive_search(ctx, "iteration3_dev_core", max_evals=3000)
    ctx.close()
    return root


def test_figure_data_is_built_without_plotly(searched):
    ctx = service.Context.create(searched, tool="report")
    name = ctx.objective.name
    convergence = report.convergence_info(ctx.history, name)
    assert len(convergence) == 3
    for study in convergence:
        assert len(study["evaluations"]) == len(study["best"]) and np.all(np.diff(study["best"]) <= 0)
        assert np.all(np.diff(study["evaluations"]) > 0)
        if not study.get("sweep"):                          # the best of the first k evaluations, k counted from 1
            values = [v if v is not None else np.inf for _, v in ctx.history.outcomes(f"{study['study']}@{name}")]
            assert study["best"] == [min(values[:k], default=None) for k in study["evaluations"]]
    # the sweep's study holds its finalists only, best first: one point at the 3,000 plans it scored, not a line that
    # reached its best at the first of its "evaluations"
    sweep = [s for s in convergence if s["study"].startswith("exhaustive:")]
    finalists = [v for _, v in ctx.history.outcomes(f"{sweep[0]['study']}@{name}") if v is not None]
    assert sweep == [{"study": sweep[0]["study"], "evaluations": [3000], "best": [min(finalists)], "sweep": True}]
    drawn = report.figures({"convergence": convergence}, "cycles")[0][1]
    assert [(t.mode, list(t.x)) for t in drawn.data if t.name.startswith("exhaustive:")] == [("markers", [3000])]
    assert drawn.layout.xaxis.type == "log" and sorted(len(s["evaluations"]) for s in convergence)[-1] > 1
    importance = report.importance_info(ctx.history, name, "dev", SPACE)
    knobs = importance["knobs"]
    assert knobs and set(knobs) <= set(SPACE.names) and abs(sum(knobs.values()) - 1) < 1e-6
    assert importance == report.importance_info(ctx.history, name, "dev", SPACE)            # the same every time
    assert importance["study"].startswith("quick:") and importance["evaluations"] > 60        # the largest search's
    marginals = report.marginals_info(ctx.history, name, "dev", SPACE)
    for knob, m in marginals.items():
        assert len(m["values"]) == len(m["best"]) == len(m["median"]) >= 1
        assert all(b <= med for b, med in zip(m["best"], m["median"], strict=True)), knob
    scatter = report.scatter_info(ctx.history, name, "dev", "final")
    assert len(scatter["dev"]) == len(scatter["final"]) == len(scatter["correct"]) > 0
    dev, final = ctx.history.cached(name, "dev"), ctx.history.cached(name, "final")     # each plan's values in the two modes
    both = [h for h in sorted(final.keys() & dev.keys())[:report.SCATTER_POINTS] if None not in (dev[h].cycles, final[h].cycles)]
    assert list(zip(scatter["dev"], scatter["final"], strict=True)) == [(dev[h].cycles, final[h].cycles) for h in both]
    reports = {"winner": {m: ctx.objective.report(SPACE.decode(SPACE.default()), m) for m in ("dev", "final")}}
    trace = report.trace_info(reports)
    assert set(trace) == {"dev", "final"}
    for cases in trace["dev"]["winner"].values():
        assert cases and all(v >= 0 for v in cases.values())
    ctx.close()


def test_the_marginals_come_in_order_of_importance():
    """A space of dozens of knobs has as many marginals: the knobs that matter come first, the rest in the space's order."""
    marginal = {"values": ["1", "2"], "best": [1.0, 2.0], "median": [1.5, 2.5]}
    info = {"importance": {"study": "s", "evaluations": 10, "knobs": {"c": 0.6, "a": 0.4}},
            "marginals": {name: marginal for name in "abcd"}}
    headings = [heading for heading, _ in report.figures(info, "ms") if heading.startswith("Marginal")]
    assert headings == ["Marginal: c", "Marginal: a", "Marginal: b", "Marginal: d"]


def test_report_of_a_cache_leaves_out_what_does_not_apply(tmp_path):
    records = {(bx, tile): 1.0 + bx / 64 + tile for bx in (32, 64, 128) for tile in (1, 2)}
    records[(128, 2)] = "InvalidConfig"
    cache = toy_cache(tmp_path, records)
    ctx = service.Context.create(tmp_path, objective=f"cache:{cache}")
    service.search_plans(ctx, "quick", max_evals=6, seed=0)
    out = service.report(ctx)
    assert "trace" not in out["sections"] and "scatter" not in out["sections"] and "convergence" in out["sections"]
    text = (tmp_path / out["path"]).read_text()
    assert "Where the cycles go" not in text and "Marginal: bx" in text
    assert f"<h1>Tuning report: cache {cache.name} ({ctx.objective.name})</h1>" in text      # named as the user knows it
    ctx.close()


def test_the_report_opens_with_the_best_configuration_beside_the_default_and_the_speedup(tmp_path):
    """The report was figures only: the value a user tuned for, the configuration that reaches it and how far that is
    from where they started were nowhere on the page."""
    records = {(bx, tile): 3.0 - bx / 64 + tile for bx in (32, 64, 128) for tile in (1, 2)}      # the best: (128, 1), 2.0 ms
    ctx = service.Context.create(tmp_path, objective=f"cache:{toy_cache(tmp_path, records)}")
    assert service.local_neighborhood_search(ctx, max_evals=1)["best"]["time"] == 3.5     # a study whose best is the default
    searched = service.search_plans(ctx, "quick", max_evals=6, seed=0)
    summary = service.report_info(ctx)["summary"]
    assert summary["best"] == {"source": f"study:{searched['study']}", "plan_hash": searched["best"]["plan_hash"],
                               "plan": {"bx": 128, "tile": 1}, "time": 2.0}
    assert summary["baseline"]["source"] == "the space's default" and summary["baseline"]["plan"] == {"bx": 32, "tile": 1}
    assert summary["baseline"]["time"] == 3.5 and summary["speedup"] == {"time": 1.75} and summary["of_optimum"] == 1.0
    html = report.summary_html(summary, "ms")
    assert "<tr><td>time (ms, lower is better)</td><td>2</td><td>3.5</td></tr>" in html
    assert "<tr><td>speedup</td><td>time 1.75x</td></tr>" in html
    assert "<tr><td><b>bx</b></td><td><b>128</b></td><td><b>32</b></td></tr>" in html       # the knob that changed
    assert "<tr><td>tile</td><td>1</td><td>1</td></tr>" in html
    assert f"<tr><td>found by</td><td colspan='2'>study:{searched['study']}</td></tr>" in html
    out = service.report(ctx)
    page = (tmp_path / out["path"]).read_text()
    assert "summary" in out["sections"] and page.index("<h2>The best configuration</h2>") < page.index("<h2>Convergence")
    ctx.close()


def test_the_summary_runs_no_program_for_a_default_the_history_lacks(tmp_path, monkeypatch):
    """A report reads the history: a program's default that no search measured is left out of the summary, not run."""
    monkeypatch.chdir(tmp_path)                                 # the program's path is read from the working folder
    (tmp_path / "bench.py").write_text("import json, sys\nc = json.load(sys.stdin)\nopen(sys.argv[1], 'a').write('.')\n"
                                       "print(10 - c['a'])\n")
    (tmp_path / "space.t1.json").write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "a", "Values": [1, 2, 3], "Default": 1}]}}))
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "upper.json").write_text(json.dumps({"knobs": {"a": [2, 3]}}))
    ctx = service.Context.create(tmp_path, objective=f"command:bench.py {tmp_path / 'runs.log'}", space="space.t1.json")
    service.bounded_exhaustive_search(ctx, "upper")
    assert (tmp_path / "runs.log").read_text() == ".."
    summary = service.report_info(ctx)["summary"]
    assert summary["best"]["plan"] == {"a": 3} and summary["best"]["time"] == 7
    assert "baseline" not in summary and "speedup" not in summary and (tmp_path / "runs.log").read_text() == ".."
    assert report.summary_html(summary, "ms").count("<td") == 6           # the finder, the value and the knob, each named
    service.bounded_exhaustive_search(ctx, "all")                       # the default measured: its run, and no other
    summary = service.report_info(ctx)["summary"]
    assert summary["baseline"]["time"] == 9 and summary["speedup"] == {"time": round(9 / 7, 3)}
    assert (tmp_path / "runs.log").read_text() == "..."
    ctx.close()


def test_the_summary_of_the_tensor_plan_scored_by_its_own_benchmark_shows_the_current_plan(tmp_path):
    """With ``--objective command`` (benchmark.py runs), no search stored kernel_plan.json's value, yet the winner is
    chosen against it (compare_history runs it): the summary shows it, rather than leaving it out as a program's."""
    root = copy_workspace(tmp_path / "ws")
    ctx = service.Context.create(root, objective="command")
    service.local_neighborhood_search(ctx, fixture="tensor_plan_iteration2_neighborhood_best", max_evals=2)
    summary = service.report_info(ctx)["summary"]
    assert summary["baseline"]["source"] == "kernel_plan.json" and summary["baseline"]["dev"] == 2324424
    assert summary["speedup"]["dev"] == round(2324424 / summary["best"]["dev"], 3)
    ctx.close()


def test_a_caches_optimum_is_drawn_across_every_study_and_labelled_on_the_value_axis():
    info = {"convergence": [{"study": "a", "evaluations": [1, 4], "best": [9.0, 5.0]},
                            {"study": "b", "evaluations": [2, 30], "best": [8.0, 3.0]}]}
    drawn = report.figures(info, "ms", optimum=2.0)[0][1]
    assert [(list(t.x), list(t.y)) for t in drawn.data if t.name.startswith("the cache's optimum")] == [([1, 30], [2.0, 2.0])]
    assert list(drawn.layout.yaxis.tickvals) == [2, 3, 5, 7]                  # from the optimum up, not from the best found


@pytest.mark.parametrize(("tune_params", "sections"), [
    ({"bx": [32], "tile": [1]}, ["summary", "convergence"]),             # one configuration: nothing varies
    ({"bx": [32, 64], "tile": [1]}, ["summary", "convergence", "marginals"]),    # two: too few trials to fit importance
])
def test_a_report_on_a_space_too_small_for_a_section_leaves_the_section_out(tmp_path, tune_params, sections):
    records = {(bx, 1): bx / 32 for bx in tune_params["bx"]}
    ctx = service.Context.create(tmp_path, objective=f"cache:{toy_cache(tmp_path, records, tune_params=tune_params)}")
    assert service.search_plans(ctx, "quick", max_evals=5, seed=0)["evaluations"] == len(records)
    out = service.report(ctx)
    assert out["sections"] == sections and service.report_info(ctx)["importance"] == {}
    assert "<h1>Tuning report: cache " in (tmp_path / out["path"]).read_text()
    ctx.close()


def test_the_report_counts_the_configurations_without_a_value_by_reason(tmp_path, monkeypatch):
    """A search where most configurations fail (a replayed cache without its restrictions, a program that crashes)
    drew no section for them, and where every one failed the page said the history held no scored plans."""
    records = {(32, 1): 1.0, (64, 1): "InvalidConfig", (128, 1): "InvalidConfig", (32, 2): "RuntimeFailedConfig"}
    cache = toy_cache(tmp_path, records)                        # (64, 2) and (128, 2) not measured
    ctx = service.Context.create(tmp_path, objective=f"cache:{cache}")
    service.search_plans(ctx, "quick", max_evals=10, seed=0)      # the whole space of 6
    info = report.failures_info(ctx.history, ctx.objective.name, "time")
    assert info == {"scored": 6, "failed": 5, "explained": 5,
                    "reasons": {"InvalidConfig": 2, "not measured": 2, "RuntimeFailedConfig": 1}}
    out = service.report(ctx)
    assert "failures" in out["sections"]
    assert "Failures: 5 of the 6 configurations scored have no value; by reason</h2>" in (tmp_path / out["path"]).read_text()
    ctx.close()
    monkeypatch.chdir(tmp_path)                                 # the program's path is read from the working folder
    (tmp_path / "bench.py").write_text("import json\nprint(json.dumps({'error': 'no device'}))\n")
    (tmp_path / "space.t1.json").write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [{"Name": "a", "Values": [1, 2]}]}}))
    ctx = service.Context.create(tmp_path, objective="command:bench.py", space="space.t1.json")
    service.search_plans(ctx, "quick", max_evals=2, seed=0)
    assert report.failures_info(ctx.history, ctx.objective.name, "time") == {"scored": 2, "failed": 2, "explained": 2,
                                                                             "reasons": {"no device": 2}}
    out = service.report(ctx)
    assert out["sections"] == ["failures"]
    page = (tmp_path / out["path"]).read_text()
    assert "holds no scored plans" not in page
    assert "have no value; by reason; remeasure_failures --reason TEXT runs again those the machine caused</h2>" in page
    ctx.close()


def test_every_failure_of_a_long_search_is_counted_by_its_reason_and_an_older_historys_by_the_trials_it_kept(tmp_path):
    """Past its first 200 evaluations a search keeps a sample of its trials, and the reasons were kept only there: the
    history now keeps each failure's reason. A history written before that (its table empty) gives the reasons of the
    kept trials, and the heading says how many those explain."""
    tune_params = {"x": list(range(30)), "y": list(range(30))}
    records = {(x, y): 1.0 + x + y for x in range(30) for y in range(30) if (x + y) % 3}       # a third not measured
    cache = toy_cache(tmp_path, records, tune_params=tune_params)
    ctx = service.Context.create(tmp_path, objective=f"cache:{cache}")
    found = service.search_plans(ctx, "quick", max_evals=400, seed=0)
    info = report.failures_info(ctx.history, ctx.objective.name, "time")
    assert info["scored"] == 400 and info["failed"] == info["explained"] == found["failed"] > 0
    assert info["reasons"] == {"not measured": info["failed"]}
    assert [h for h, _ in report.figures({"failures": info}, "ms")] == [
        f"Failures: {info['failed']:,} of the 400 configurations scored have no value; by reason"]
    ctx.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "studies" / "history.db")) as db, db:
        db.execute("DELETE FROM tuner_reasons")
    ctx = service.Context.create(tmp_path, objective=f"cache:{cache}")
    older = report.failures_info(ctx.history, ctx.objective.name, "time")
    assert older["failed"] == info["failed"] and 0 < older["explained"] < older["failed"]
    assert older["reasons"] == {"not measured": older["explained"]}
    heading = [h for h, _ in report.figures({"failures": older}, "ms")]
    assert heading == [f"Failures: {older['failed']:,} of the 400 configurations scored have no value; the reasons of the "
                       f"{older['explained']:,} whose trial was kept (an older history kept them only there, in a sample of a long "
                       "search's trials)"]
    ctx.close()


def test_failures_beyond_the_drawn_reasons_are_one_bar():
    """A program whose every failure says something else (a stderr tail) would draw a bar per configuration."""
    class Failing:
        def failures(self, objective, mode):
            return 40, {f"h{i}": (None, f"exited 1: error {i}") for i in range(20)}

    info = report.failures_info(Failing(), "o", "time")
    assert info["failed"] == info["explained"] == 20 and len(info["reasons"]) == report.FAILURE_BARS + 1
    assert info["reasons"]["8 other reasons"] == 8 and sum(info["reasons"].values()) == 20


def test_the_figure_data_leaves_out_what_its_figure_cannot_draw(iteration2):
    """The marginals summarise correct values only (a lower value that failed the check is no best); the scatter draws
    plans with a value in both modes (a log axis has no place for a failure); the noise, configurations run more than
    once, each time with a positive value; the failures, the most frequent reason first, ties by name; the trace, plans that ran."""
    class Held:
        def sample(self, objective, mode, limit):
            return [Row("a", 1.0, False, None, np.array([0])), Row("b", 4.0, True, None, np.array([0])),
                    Row("c", 6.0, True, None, np.array([1])), Row("d", 8.0, True, None, np.array([1])),
                    Row("e", None, False, None, np.array([1]))]

        def paired(self, objective, first, second, limit):
            return [(1.0, True, 2.0, True), (3.0, True, None, False), (None, False, 5.0, True), (4.0, True, 6.0, False)]

        def samples(self, objective):
            return {"a": [1.0, 1.2], "b": [2.0], "c": [0.0, 1.0], "d": ["fast", 1.0]}    # c, d: a history written by hand

        def failures(self, objective, mode):
            return 9, {"h1": (None, "c"), "h2": (None, "b"), "h3": (None, "a"), "h4": (None, "b"), "h5": (2.0, None)}

    held, space = Held(), space_from_tune_params({"k": [1, 2]})
    assert report.marginals_info(held, "o", "time", space) == {"k": {"values": ["1", "2"], "best": [4.0, 6.0], "median": [4.0, 7.0]}}
    assert report.scatter_info(held, "o", "dev", "final") == {"dev": [1.0, 4.0], "final": [2.0, 6.0], "correct": [True, False]}
    assert report.noise_info(held, "o") == {"median": [1.1], "spread": [pytest.approx(0.2)], "typical": pytest.approx(0.2)}
    assert list(report.failures_info(held, "o", "time")["reasons"].items()) == [("b", 2), ("a", 1), ("c", 1), ("incorrect", 1)]
    crowded = dict(iteration2, **OVERFLOWING)
    reports = {label: {"dev": BuiltinObjective().report(plan, "dev")} for label, plan in (("ran", iteration2), ("not", crowded))}
    assert set(report.trace_info(reports)["dev"]) == {"ran"} and reports["not"]["dev"]["cases"]


ALTERNATING = """import json, sys
c = json.load(sys.stdin)
with open(sys.argv[1], "a+") as log:                     # every other run of the program is 10% slower
    log.seek(0)
    count = len(log.read().splitlines())
    log.write("run\\n")
print((1.0 + c["a"] + c["b"] / 10) * (1.1 if count % 2 else 1.0))
"""


def test_the_report_of_a_noisy_program_shows_how_far_its_repeated_runs_spread(tmp_path, monkeypatch):
    """With ``--repeats``, each configuration's runs are kept but no section showed them: how noisy the benchmark is
    decides which differences a search can see."""
    monkeypatch.chdir(tmp_path)                                 # the program's path is read from the working folder
    (tmp_path / "bench.py").write_text(ALTERNATING)
    (tmp_path / "space.t1.json").write_text(json.dumps({"ConfigurationSpace": {"TuningParameters": [
        {"Name": "a", "Values": [1, 2, 3]}, {"Name": "b", "Values": [1, 2]}]}}))
    program = f"command:bench.py {tmp_path / 'runs.log'}"
    for repeats in (2, 1):
        ctx = service.Context.create(tmp_path, objective=program, space="space.t1.json", objective_repeats=repeats)
        service.search_plans(ctx, "quick", max_evals=6, seed=0)
        info = service.report_info(ctx)
        if repeats == 1:
            assert "noise" not in info                          # one run per configuration: nothing to show
            break
        noise = info["noise"]
        assert len(noise["spread"]) == 6 and noise["typical"] == pytest.approx(0.1)
        assert noise["spread"] == pytest.approx([0.1] * 6)
        assert sorted(noise["median"]) == pytest.approx(sorted(1.05 * (1 + a + b / 10) for a in (1, 2, 3) for b in (1, 2)))
        out = service.report(ctx)
        assert "noise" in out["sections"]
        assert "Noise: the repeated runs of 6 configurations, each one&#x27;s spread against its median (the median spread: 10.0%)" \
            in (tmp_path / out["path"]).read_text()
        ctx.close()


def test_a_caches_convergence_is_drawn_against_its_optimum_in_headless_chromium(tmp_path):
    """The optimum's line sits at the optimum on the log axis, which still spans the studies' values (a shape's label
    there is placed in log units, and once stretched the axis to 10^10 ms)."""
    from playwright.sync_api import sync_playwright

    records = {(bx, tile): 1.0 + bx / 64 + tile for bx in (32, 64, 128) for tile in (1, 2)}
    ctx = service.Context.create(tmp_path, objective=f"cache:{toy_cache(tmp_path, records)}")
    service.search_plans(ctx, "quick", max_evals=6, seed=0)
    path = tmp_path / service.report(ctx)["path"]
    ctx.close()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_function("document.getElementById('figure-0') && document.getElementById('figure-0')._fullLayout")
        shown = page.evaluate("(() => { const f = document.getElementById('figure-0'); return {range: f._fullLayout.yaxis.range, "
                              "lines: f._fullData.map(t => [t.name, t.y])}; })()")
        browser.close()
    optimum = min(records.values())
    assert [y for name, y in shown["lines"] if name.startswith("the cache's optimum")] == [[optimum, optimum]]
    studies = [v for name, y in shown["lines"] if not name.startswith("the cache's optimum") for v in y]
    low, high = shown["range"]                                            # log10 of ms
    assert studies and low <= np.log10(optimum) and np.log10(max(studies)) <= high <= np.log10(max(studies)) + 1


def test_each_figure_draws_its_data_where_a_reader_looks_for_it():
    """The most important knob and the most frequent failure on top (a horizontal bar chart draws its first category at
    the bottom); correct and incorrect plans as two series; a section with nothing to draw left out; plotly.js embedded
    once however many figures; a page with no figure says why."""
    info = {"importance": {"study": "s", "evaluations": 40, "knobs": {"a": 0.7, "b": 0.3}},
            "failures": {"scored": 9, "failed": 4, "explained": 4, "reasons": {"x": 3, "y": 1}},
            "scatter": {"dev": [1.0, 2.0, 3.0], "final": [1.5, 2.5, 3.5], "correct": [True, False, True]}}
    importance, failures, scatter = (fig for _, fig in report.figures(info, "cycles"))
    assert list(importance.data[0].y) == ["b", "a"] and list(failures.data[0].y) == ["y", "x"]
    assert [(t.name, list(t.x)) for t in scatter.data] == [("correct in both modes", [1.0, 3.0]), ("incorrect", [2.0])]
    assert report.figures({"scatter": {"dev": [], "final": [], "correct": []}}, "cycles") == []
    assert report.page("t", info, "cycles").count("window.PlotlyConfig") == 1
    assert "<p>The history holds no scored plans of this objective yet.</p>" in report.page("t", {}, "cycles")


def test_a_log_axis_is_labelled_with_round_numbers_written_out():
    assert report.log_ticks([5.66, 50.1, 9.9]) == {"tickvals": [7, 10, 15, 20, 30, 50], "ticktext": ["7", "10", "15", "20", "30", "50"]}
    assert report.log_ticks([178866, 2.3e6])["ticktext"] == ["200k", "500k", "1M", "2M"]
    assert report.log_ticks([0.0031, 0.021])["ticktext"] == ["0.005", "0.007", "0.01", "0.015", "0.02"]
    assert report.log_ticks([1, 1e30]) == report.log_ticks([178866, 190000]) == report.log_ticks([0]) == {}   # plotly's own


def _importance_of_mode(folder: Path, modes: list) -> dict[str, float]:
    """Knob importance after scoring every configuration of a cache whose time depends on mode (``modes[1]`` is faster)."""
    folder.mkdir()
    tune_params = {"mode": modes, "bx": [16, 32, 48, 64, 80, 96], "precision": [32]}
    records = {f"{m},{b},32": {"mode": m, "bx": b, "precision": 32, "time": 3.0 - 2 * i + b / 1e4}
               for i, m in enumerate(modes) for b in tune_params["bx"]}
    (folder / "cache.json").write_text(json.dumps({"tune_params_keys": list(tune_params), "tune_params": tune_params, "cache": records}))
    ctx = service.Context.create(folder, objective=f"cache:{folder / 'cache.json'}")
    service.bounded_exhaustive_search(ctx, "all")
    importance = service.report_info(ctx)["importance"]["knobs"]
    ctx.close()
    return importance


def test_importance_is_fitted_to_a_search_before_a_sweep_and_says_which(tmp_path):
    """A sweep keeps only its best plans: fitted to those, the importance says which knobs vary among good plans, not
    which matter. It was fitted to the study with the most members, a sweep of 64 finalists before a search of 15
    (and the cache hits it found, which cost no evaluation of its budget)."""
    knobs = {f"k{i}": [0, 1, 2, 3] for i in range(4)}
    records = {combo: 1.0 + 3 * combo[0] + combo[1] / 10 for combo in itertools.product(*knobs.values())}
    ctx = service.Context.create(tmp_path, objective=f"cache:{toy_cache(tmp_path, records, 'four.json', knobs)}")
    service.bounded_exhaustive_search(ctx, "all")                           # 256 plans: its 64 best are its members
    service.search_plans(ctx, "quick", max_evals=15, seed=0)
    importance = service.report_info(ctx)["importance"]
    scored = [v for _, v in ctx.history.outcomes(f"{importance['study']}@{ctx.objective.name}") if v is not None]
    assert importance["study"].startswith("quick:") and importance["evaluations"] == len(scored) < 64
    assert set(importance["knobs"]) == set(knobs)
    headings = [heading for heading, _ in report.figures(service.report_info(ctx), "ms")]
    assert f"Knob importance (over {len(scored)} evaluations of {importance['study']})" in headings
    ctx.close()


def test_importance_tells_true_from_one(tmp_path):
    # 1 and True are equal to Python, and to Optuna's lookup of a categorical value: they must stay two values
    mixed, plain = _importance_of_mode(tmp_path / "mixed", [1, True]), _importance_of_mode(tmp_path / "plain", ["1", "True"])
    assert mixed == pytest.approx(plain) and mixed["mode"] > 0.1
    assert set(mixed) == {"mode", "bx"}                                  # a knob of one value has no say, and no bar


def _png_is_blank(png: bytes) -> bool:
    """Whether a PNG's pixels take (almost) one value: the decoded image rows have too few distinct bytes."""
    data, pos = b"", 8
    while pos < len(png):
        length = int.from_bytes(png[pos:pos + 4], "big")
        if png[pos + 4:pos + 8] == b"IDAT":
            data += png[pos + 8:pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(data))) < 8


def test_the_report_renders_every_figure_in_headless_chromium(searched):
    from playwright.sync_api import sync_playwright

    ctx = service.Context.create(searched, tool="report")
    out = service.report(ctx)
    assert set(out["sections"]) == {"summary", "convergence", "importance", "marginals", "scatter", "trace",
                                    "failures"}                         # some plans are incorrect
    summary, best = service.report_info(ctx)["summary"], service.compare_history(ctx)["best_verified"]
    assert summary["best"]["plan_hash"] == best["plan_hash"] and summary["baseline"]["source"] == "kernel_plan.json"
    assert summary["speedup"] == {m: round(summary["baseline"][m] / best[m], 3) for m in ("dev", "final")}
    assert summary["baseline"]["dev"] == 2324424 and "of_optimum" not in summary      # the task's baseline (README)
    path = Path(searched / out["path"])
    assert "the cache's optimum" not in path.read_text()                 # the tensor plan's best is not known
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length > 0 && "
                               "[...document.querySelectorAll('.js-plotly-plot')].every(d => d.querySelector('svg.main-svg'))")
        plots = page.eval_on_selector_all(".js-plotly-plot", "ds => ds.map(d => d.querySelectorAll('svg.main-svg path, "
                                                             "svg.main-svg rect').length)")
        headings = page.eval_on_selector_all("h2", "hs => hs.length")
        summary_rows = page.eval_on_selector_all("table.summary tr", "rs => rs.length")
        labels = page.eval_on_selector_all("#figure-0 .ytick text", "ts => ts.map(t => t.textContent)")
        shot = page.screenshot(full_page=False)
        browser.close()
    assert errors == []
    marginals = sum(1 for size in SPACE.sizes if size > 1)
    assert headings - 1 == len(plots) == 1 + 1 + 1 + 2 + 1 + marginals    # the summary, then convergence, importance,
                                                                            # failures, trace x2, scatter, marginals
    assert summary_rows == 2 + 2 + 1 + len(SPACE.knobs)     # the heads and the finder, dev and final, the speedup, every knob
    assert all(count > 0 for count in plots)
    scale = {"k": 1e3, "M": 1e6}                        # the convergence's log axis: round numbers in full, in order
    ticks = [float(t.rstrip("kM")) * scale.get(t[-1], 1) for t in labels]      # (not a decade's digits: 2 5 100k 2 5 1M)
    assert len(ticks) >= 4 and ticks == sorted(set(ticks))
    assert not _png_is_blank(shot)
