"""Installed anywhere: the helper, launcher and manifest work from a venv outside the repository that holds
the package as a wheel built with ``pip wheel``; an interpreter without the dependencies gets one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import anyio
import pytest
from conftest import ROOT
from mcp import Client, StdioServerParameters

HELPER = ".harnessgym/runtime/mcp_call.py"
BARE_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}     # no test venv on PATH: `python3` is not ours


def _venv(where: Path, with_pip: bool) -> Path:
    subprocess.run([sys._base_executable, "-m", "venv", *([] if with_pip else ["--without-pip"]), str(where)],
                   check=True, capture_output=True, timeout=300)
    return where / "bin" / "python"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The package built as a wheel with ``pip wheel`` from a copy of its sources (the repository stays untouched)."""
    source = tmp_path_factory.mktemp("source")
    for item in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / item, source / item)
    shutil.copytree(ROOT / "tuner", source / "tuner", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
                   check=True, capture_output=True, timeout=600)
    return next(out.glob("tensor_plan_optimizer-*.whl"))


def test_helper_works_from_a_venv_outside_the_repository(workspace, wheel, tmp_path):
    python = _venv(tmp_path / "elsewhere", with_pip=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True, timeout=600)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")     # the dependencies, offline
    shutil.rmtree(workspace / "tuner")                                      # the package comes from the wheel only
    call = [str(python), HELPER, "--server", "tensor-plan-server", "--tool", "run_objective", "--arguments", '{"mode":"dev"}']
    out = subprocess.run(call, cwd=workspace, capture_output=True, text=True, env=BARE_ENV, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["best_cycles"] > 0
    where = subprocess.run([str(python), "-c", "import tuner; print(tuner.__file__)"], cwd=tmp_path, capture_output=True, text=True)
    assert where.stdout.startswith(str(site))
    installed = subprocess.run([str(python), "-m", "tuner", "--workspace", str(workspace), "mcp", "install", "--client", "claude"],
                               cwd=tmp_path, capture_output=True, text=True, env=BARE_ENV, timeout=120)
    assert json.loads(installed.stdout)["mcpServers"]["tensor-plan-server"]["command"] == str(python)
    assert not list((workspace / "studies").iterdir())                    # the task's profiles come with the package
    swept = subprocess.run([str(python), "-m", "tuner", "--workspace", str(workspace), "--json", "bounded_exhaustive_search",
                            "--profile", "iteration3_layout_relaxed", "--max-evals", "30"],
                           cwd=tmp_path, capture_output=True, text=True, env=BARE_ENV, timeout=300)
    assert swept.returncode == 0, swept.stderr[-2000:]
    assert json.loads(swept.stdout)["evaluations"] == 30
    shutil.rmtree(workspace / ".harnessgym")                                # a workspace of the installed package alone
    entry = json.loads(subprocess.run([str(python), "-m", "tuner", "--workspace", str(workspace), "mcp", "install", "--client", "claude"],
                                      cwd=tmp_path, capture_output=True, text=True, env=BARE_ENV, timeout=120).stdout)
    entry = entry["mcpServers"]["tensor-plan-server"]
    assert entry["command"] == str(python) and entry["args"] == ["-m", "tuner.mcp_server", "--workspace", str(workspace)]

    async def served() -> dict:                                             # the real MCP client starts what the entry names
        params = StdioServerParameters(command=entry["command"], args=entry["args"], env=BARE_ENV, cwd=str(tmp_path))
        async with Client(params, read_timeout_seconds=300) as client:
            return (await client.call_tool("run_objective", {"mode": "dev"})).structured_content

    assert anyio.run(served)["best_cycles"] > 0


def test_an_interpreter_without_the_dependencies_gets_one_line_naming_the_install_command(workspace, tmp_path):
    python = _venv(tmp_path / "bare", with_pip=False)
    out = subprocess.run([str(python), HELPER, "--server", "tensor-plan-server", "--tool", "run_objective"],
                         cwd=workspace, capture_output=True, text=True, env=BARE_ENV, timeout=120)
    lines = out.stderr.splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert "lacks the dependency" in lines[0] and f"{python} -m pip install" in lines[0]
