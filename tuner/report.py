"""The HTML report of a history: one self-contained file (plotly.js embedded, works offline).

Each figure's data comes from a pure ``*_info`` function of the history (tested without plotly, as
Optuna's ``_get_*_info`` are); :func:`page` only draws them. Sections that do not apply to the
problem (the trace breakdown without the tensor-plan task, the dev/final scatter without a held-out
mode) are left out. Values are the objective's (cycles or ms): lower is better.
"""

from __future__ import annotations

import math
from collections import Counter
from html import escape
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState, create_trial

from tuner.history import History
from tuner.objectives.base import reason_group
from tuner.search import shown
from tuner.space import Space

IMPORTANCE_TRIALS = 1000        # trials of the largest study the importance is fitted to (evenly spaced)
SCATTER_POINTS = 5000           # plans scored in both modes shown in the scatter
MARGINAL_SAMPLE = 20000         # evaluations the per-knob marginals summarise (a fixed sample by plan hash)
FAILURE_BARS = 12               # reasons for failing drawn one by one; the rest as one bar


def convergence_info(history: History, objective: str) -> list[dict[str, Any]]:
    """Per study of ``objective``: best-so-far value against the evaluation count (infeasible ones count, change
    nothing). An ``exhaustive`` sweep keeps only its finalists, not the order it scored its plans in: it is one point,
    its best after all of its evaluations (``sweep``)."""
    sweeps = {s["study_name"]: s for s in history.sweeps()}
    out = []
    for name in history.study_names():
        if not name.endswith(objective):
            continue
        values = np.array([v if v is not None else np.inf for _, v in history.outcomes(name)])
        if not np.isfinite(values).any():
            continue
        study = name.removesuffix(f"@{objective}")
        if name in sweeps and sweeps[name]["strategy"] == "exhaustive":
            out.append({"study": study, "evaluations": [sweeps[name]["evaluations"]], "best": [float(values.min())], "sweep": True})
            continue
        best = np.minimum.accumulate(values)
        keep = np.isfinite(best)
        out.append({"study": study, "evaluations": (np.flatnonzero(keep) + 1).tolist(), "best": best[keep].tolist()})
    return out


def importance_info(history: History, objective: str, mode: str, space: Space) -> dict[str, Any]:
    """Knob importance (Optuna's default, PED-ANOVA: deterministic, no scikit-learn) of the knobs with more than one
    value (``knobs``), over up to ``IMPORTANCE_TRIALS`` scored evaluations of the largest study of ``objective``
    (``study``, ``evaluations``): a search's, which samples the space as it searched it, before an ``exhaustive``
    sweep's, which keeps only its best plans. Empty when no study has enough varied evaluations."""
    tops = history.study_tops(objective, 1)
    sweeps = {s["study_name"] for s in history.sweeps() if s["strategy"] == "exhaustive"}
    candidates = [n for n in tops if tops[n][0] >= 10]
    if not candidates:
        return {}
    name = max(candidates, key=lambda n: (n not in sweeps, tops[n][0], n))
    scored = [(h, v) for h, v in history.outcomes(name) if v is not None]
    scored = [scored[i] for i in np.unique(np.linspace(0, len(scored) - 1, IMPORTANCE_TRIALS).astype(int))]
    rows = history.cached(objective, mode, [h for h, _ in scored])
    trials = [create_trial(params=space.to_params(rows[h].idx), distributions=space.distributions, value=v,
                           state=TrialState.COMPLETE) for h, v in scored if h in rows]
    study = optuna.create_study(direction="minimize")
    study.add_trials(trials)
    try:
        importance = optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError):                  # a study whose knobs never vary has no importance to give
        return {}
    return {"study": name.removesuffix(f"@{objective}"), "evaluations": len(trials),
            "knobs": {knob: float(value) for knob, value in importance.items() if space.by_name[knob].size > 1}}   # one value: no say


def trace_info(reports: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """``{mode: {plan label: {case: {component: cycles}}}}`` from benchmark reports with trace components
    (``reports[label][mode]``); infeasible plans are left out."""
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for label, by_mode in reports.items():
        for mode, report in by_mode.items():
            if report.get("feasible", True) and report.get("cases"):
                out.setdefault(mode, {})[label] = {c["name"]: dict(c.get("components", {})) for c in report["cases"]}
    return out


def scatter_info(history: History, objective: str, first: str, last: str) -> dict[str, list[Any]]:
    """Plans scored in both modes: their ``first`` and ``last`` values and whether they are correct in both."""
    pairs = [(a, b, ca and cb) for a, ca, b, cb in history.paired(objective, first, last, SCATTER_POINTS)
             if a is not None and b is not None]
    return {first: [p[0] for p in pairs], last: [p[1] for p in pairs], "correct": [p[2] for p in pairs]}


def marginals_info(history: History, objective: str, mode: str, space: Space) -> dict[str, dict[str, list[Any]]]:
    """Per varying knob: each value, the best and the median correct value of the evaluations that have it."""
    rows = [r for r in history.sample(objective, mode, MARGINAL_SAMPLE) if r.correct and r.cycles is not None]
    if not rows:
        return {}
    idx, values = np.stack([r.idx for r in rows]), np.array([r.cycles for r in rows])
    out = {}
    for j, knob in enumerate(space.knobs):
        if space.sizes[j] < 2:
            continue
        present = [v for v in range(space.sizes[j]) if (idx[:, j] == v).any()]
        out[knob.name] = {"values": [str(knob.choices[v]) for v in present],
                          "best": [float(values[idx[:, j] == v].min()) for v in present],
                          "median": [float(np.median(values[idx[:, j] == v])) for v in present]}
    return out


def noise_info(history: History, objective: str) -> dict[str, Any]:
    """Where the objective measures each configuration several times (a program's ``--repeats``): per configuration
    (once, up to ``SCATTER_POINTS``), the median of its runs and their spread (max/min - 1), and the median spread;
    empty elsewhere."""
    kept = [samples for samples in history.samples(objective).values()
            if len(samples) > 1 and all(isinstance(v, int | float) and v > 0 for v in samples)][:SCATTER_POINTS]
    if not kept:
        return {}
    spread = [max(samples) / min(samples) - 1 for samples in kept]
    return {"median": [float(np.median(samples)) for samples in kept], "spread": spread, "typical": float(np.median(spread))}


def failures_info(history: History, objective: str, mode: str) -> dict[str, Any]:
    """How many of the configurations ``objective`` scored in ``mode`` have no value (``scored``, ``failed``), and of
    those whose reason is known (``explained``: every one, but in a history an older version wrote, which kept the
    reasons only in a sample of a long search's trials; "incorrect" for a value that failed the problem's check), how many
    by the start of their reason, the most frequent first; empty when none failed."""
    scored, failed = history.failures(objective, mode)
    if not failed:
        return {}
    reasons = Counter(reason_group(why) if why is not None else "incorrect" for value, why in failed.values()
                      if why is not None or value is not None)
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    shown = dict(ranked[:FAILURE_BARS])
    if rest := sum(count for _, count in ranked[FAILURE_BARS:]):
        shown[f"{len(ranked) - FAILURE_BARS} other reasons"] = rest
    return {"scored": scored, "failed": len(failed), "explained": sum(reasons.values()), "reasons": shown}


def log_ticks(values: list[float]) -> dict[str, Any]:
    """Plotly axis settings that label a log axis over ``values`` with 4 to 12 round numbers written out in full
    (``20k``, ``1.5M``, ``7``), where plotly's own would write the digits of each decade alone (``2 5 10 2 5``); none
    where the values span too little for that."""
    positive = [v for v in values if v > 0]
    if not positive:
        return {}
    low, high = min(positive), max(positive)
    decades = range(int(np.floor(np.log10(low))), int(np.floor(np.log10(high))) + 1)
    for mantissas in ((1,), (1, 3), (1, 2, 5), (1, 1.5, 2, 3, 5, 7), (1, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9)):
        ticks = [float(m * 10.0**d) for d in decades for m in mantissas if low <= m * 10.0**d <= high]
        if 4 <= len(ticks) <= 12:
            return {"tickvals": ticks, "ticktext": [_short(t) for t in ticks]}
    return {}


def _short(value: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{round(value / scale, 6):g}{suffix}"
    return f"{round(value, 6):g}"


def figures(info: dict[str, Any], unit: str, optimum: float | None = None) -> list[tuple[str, Any]]:
    """``(heading, plotly figure)`` for every section of ``info`` (the ``*_info`` results) that has data; the
    convergence is drawn against ``optimum`` where the objective's best is known (a replayed cache)."""
    import plotly.graph_objects as go

    figures: list[tuple[str, go.Figure]] = []
    if info.get("convergence"):
        studies = info["convergence"]
        fig = go.Figure([go.Scatter(x=s["evaluations"], y=s["best"], mode="markers", marker={"size": 10, "symbol": "diamond"},
                                    name=f"{s['study']} (its best after {s['evaluations'][0]:,} evaluations)")
                         if s.get("sweep") else
                         go.Scatter(x=s["evaluations"], y=s["best"], mode="lines", name=s["study"], line_shape="hv")
                         for s in studies])
        drawn = [v for s in studies for v in s["best"]] + ([optimum] if optimum is not None else [])
        fig.update_layout(xaxis_title="evaluations", yaxis_title=f"best so far ({unit}, lower is better)", yaxis_type="log")
        fig.update_yaxes(**log_ticks(drawn))
        if any(s.get("sweep") for s in studies):        # a sweep's millions beside a search's hundreds
            fig.update_xaxes(type="log", **log_ticks([1] + [x for s in studies for x in s["evaluations"]]))
        if optimum is not None:                 # a trace, not a shape: a shape's label on a log axis is placed in log units
            last = max(s["evaluations"][-1] for s in info["convergence"])
            fig.add_trace(go.Scatter(x=[1, last], y=[optimum, optimum], mode="lines", line={"dash": "dash", "color": "black"},
                                     name=f"the cache's optimum, {optimum:g} {unit}"))
        figures.append(("Convergence of every study (its evaluations in order; a sweep of a profile: its best after all of them)",
                        fig))
    importance = (info.get("importance") or {}).get("knobs", {})
    if importance:
        knobs = list(importance)[::-1]
        fig = go.Figure(go.Bar(x=[importance[k] for k in knobs], y=knobs, orientation="h"))
        fig.update_layout(xaxis_title="importance (PED-ANOVA)", height=max(300, 22 * len(knobs)))
        of = info["importance"]
        figures.append((f"Knob importance (over {of['evaluations']:,} evaluations of {of['study']})", fig))
    if (failures := info.get("failures")) and failures["reasons"]:
        reasons = list(failures["reasons"])[::-1]
        fig = go.Figure(go.Bar(x=[failures["reasons"][r] for r in reasons], y=reasons, orientation="h"))
        fig.update_layout(xaxis_title="configurations", height=max(300, 26 * len(reasons)))
        which = ("by reason" if failures["explained"] == failures["failed"] else
                 f"the reasons of the {failures['explained']:,} whose trial was kept (an older history kept them only there, "
                 "in a sample of a long search's trials)")
        again = "; remeasure_failures --reason TEXT runs again those the machine caused" if failures.get("program") else ""
        figures.append((f"Failures: {failures['failed']:,} of the {failures['scored']:,} configurations scored have no value; "
                        + which + again, fig))
    for mode, plans in info.get("trace", {}).items():
        components = sorted({c for cases in plans.values() for comps in cases.values() for c in comps})
        bars = []
        for component in components:
            x = [[label for label in plans for _ in plans[label]], [case for label in plans for case in plans[label]]]
            y = [plans[label][case].get(component, 0) for label in plans for case in plans[label]]
            bars.append(go.Bar(x=x, y=y, name=component))
        fig = go.Figure(bars)
        fig.update_layout(barmode="stack", yaxis_title="cycles", height=480)
        figures.append((f"Where the cycles go: winner, baseline and iteration-2 per case ({mode})", fig))
    scatter = info.get("scatter")
    if scatter and scatter.get("correct"):
        (first, xs), (last, ys) = [(k, v) for k, v in scatter.items() if k != "correct"]
        fig = go.Figure()
        for correct, name in ((True, "correct in both modes"), (False, "incorrect")):
            keep = [i for i, c in enumerate(scatter["correct"]) if c == correct]
            fig.add_trace(go.Scatter(x=[xs[i] for i in keep], y=[ys[i] for i in keep], mode="markers", name=name,
                                     marker={"size": 5, "opacity": 0.6}))
        fig.update_layout(xaxis_title=f"{first} ({unit})", yaxis_title=f"{last} ({unit})", xaxis_type="log", yaxis_type="log")
        fig.update_xaxes(**log_ticks(xs))
        fig.update_yaxes(**log_ticks(ys))
        figures.append((f"{first} against {last} of evaluated plans", fig))
    if noise := info.get("noise"):
        fig = go.Figure(go.Scatter(x=noise["median"], y=noise["spread"], mode="markers", marker={"size": 6, "opacity": 0.7}))
        fig.update_layout(xaxis_title=f"median of its runs ({unit})", yaxis_title="spread of its runs (max/min - 1)",
                          yaxis_tickformat=".1%", height=400)
        figures.append((f"Noise: the repeated runs of {len(noise['spread']):,} configurations, each one's spread against its "
                        f"median (the median spread: {noise['typical']:.1%})", fig))
    for knob in sorted(info.get("marginals", {}), key=lambda k: -importance.get(k, -math.inf)):   # the most important first
        marginal = info["marginals"][knob]
        fig = go.Figure([go.Scatter(x=marginal["values"], y=marginal["best"], mode="lines+markers", name="best"),
                         go.Scatter(x=marginal["values"], y=marginal["median"], mode="lines+markers", name="median")])
        fig.update_layout(xaxis_title=knob, xaxis_type="category", yaxis_title=unit, height=320)
        figures.append((f"Marginal: {knob}", fig))
    for _, fig in figures:
        fig.update_layout(template="plotly_white", margin={"t": 30})
    return figures


def summary_html(summary: dict[str, Any], unit: str) -> str:
    """The summary's table: the winner's values and knobs beside the baseline's (where there is one), the knobs that
    differ in bold, and the speedup in each mode."""
    best, base, modes = summary["best"], summary.get("baseline"), summary["modes"]

    def row(cells: list[str], strong: bool = False, tag: str = "td") -> str:
        return "<tr>" + "".join(f"<{tag}>{'<b>' * strong}{escape(cell)}{'</b>' * strong}</{tag}>" for cell in cells) + "</tr>"

    head = [f"best ({best['plan_hash']})"] + ([f"{base['source']} ({base['plan_hash']})"] if base else [])
    rows = [row(["", *head], tag="th"),      # a study's long name across the value columns, which keep to their values' width
            f"<tr><td>found by</td><td colspan='{len(head)}'>{escape(best['source'])}</td></tr>"]
    rows += [row([f"{mode} ({unit}, lower is better)", shown(best[mode]), *([shown(base[mode])] if base else [])]) for mode in modes]
    if "of_optimum" in summary:
        rows.append(row(["of the optimum (the cache's best / the best found)", f"{summary['of_optimum']:.3f}"]))
    if summary.get("speedup"):
        rows.append(row(["speedup", ", ".join(f"{mode} {ratio:.2f}x" for mode, ratio in summary["speedup"].items())]))
    for knob, value in best["plan"].items():
        was = [str(base["plan"][knob])] if base else []
        rows.append(row([knob, str(value), *was], strong=bool(was) and was[0] != str(value)))
    return "<table class='summary'>" + "".join(rows) + "</table>"


def page(title: str, info: dict[str, Any], unit: str, optimum: float | None = None) -> str:
    """The report page: the summary (where a configuration has a value), then a figure per section that has data
    (plotly.js embedded once)."""
    import plotly.io as pio

    drawn = figures(info, unit, optimum)
    parts = [f"<h1>{escape(title)}</h1>"]
    if summary := info.get("summary"):
        parts += ["<h2>The best configuration</h2>", summary_html(summary, unit)]
    for i, (heading, fig) in enumerate(drawn):
        parts.append(f"<h2>{escape(heading)}</h2>")
        parts.append(pio.to_html(fig, full_html=False, include_plotlyjs=(i == 0), div_id=f"figure-{i}"))
    if not drawn:
        parts.append("<p>The history holds no scored plans of this objective yet.</p>")
    return ("<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>" + escape(title) + "</title>"
            "<style>body{font-family:sans-serif;margin:2em;max-width:1200px}"
            "table.summary{border-collapse:collapse}table.summary td,table.summary th{padding:2px 12px;text-align:left}"
            "</style></head><body>\n"
            + "\n".join(parts) + "\n</body></html>\n")
