"""The walkthrough notebook executes end to end (nbclient, the python3 kernel of this environment) and is stored without outputs."""

from __future__ import annotations

import nbformat
from conftest import ROOT
from nbclient import NotebookClient

NOTEBOOK = ROOT / "notebooks" / "walkthrough.ipynb"


def test_the_walkthrough_is_stored_without_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)


def test_the_walkthrough_executes_with_the_reports_figures_inline():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert not [o.text for o in outputs if o.get("name") == "stderr"]     # no warning for the reader to puzzle over
    plots = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    titles = [o["data"]["application/vnd.plotly.v1+json"]["layout"]["title"]["text"] for o in plots]
    assert [t.split(":")[0].split(" (")[0] for t in titles] == [
        "Convergence of every study", "Knob importance", "Failures", "Where the cycles go", "Where the cycles go",
        "dev against final of evaluated plans", "Marginal"], titles          # a few of its plans are incorrect
    assert any("dev best_cycles:" in o.get("text", "") for o in outputs)
    tables = [o["data"]["text/html"] for o in outputs if "<table class='summary'>" in o.get("data", {}).get("text/html", "")]
    assert len(tables) == 1 and "kernel_plan.json (" in tables[0] and "<td>speedup</td><td>dev " in tables[0]
    assert any(" of the optimum" in o.get("text", "") and "100 evaluations" in o.get("text", "") for o in outputs)   # the cache
