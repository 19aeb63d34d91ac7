"""The workspace a tuner works on: confined paths, atomic writes, plan references and fixtures.

Every path a caller gives is resolved inside the workspace root: ``..`` escapes, absolute paths
elsewhere and symlinks that lead out are refused. Writes go through a temporary file in the same
folder, ``fsync`` and ``rename``, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PLAN_FILE = "kernel_plan.json"
FIXTURE_DIRS = ("fixtures", ".harnessgym/fixtures")
SERVER_DIR = ".harnessgym/mcp/tensor-plan-server"           # the MCP server's manifest and launcher
MANIFEST = f"{SERVER_DIR}/harnessgym-mcp.json"
TELEMETRY = ".harnessgym/mcp_calls.jsonl"                   # one line per call of .harnessgym/runtime/mcp_call.py
RESULT_PATH = ".harnessgym/iteration_result.json"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")   # a plain file name stem: fixtures, profiles


class WorkspaceError(ValueError):
    """A path, name or reference the workspace refuses (the message says why)."""


@dataclass(frozen=True)
class Workspace:
    """A folder holding ``kernel_plan.json`` (and usually ``benchmark.py`` and ``fixtures/``)."""

    root: Path

    @classmethod
    def at(cls, root: str | Path = ".") -> Workspace:
        path = Path(root).resolve()
        if not path.is_dir():
            raise WorkspaceError(f"workspace {str(root)!r} is not a folder")
        return cls(path)

    @property
    def plan_path(self) -> Path:
        return self.root / PLAN_FILE

    def path(self, relative: str | Path) -> Path:
        """``relative`` resolved inside the workspace; :class:`WorkspaceError` if it would leave it."""
        text = str(relative)
        if not text or "\x00" in text:
            raise WorkspaceError(f"path {text!r} is empty or malformed")
        candidate = Path(text)
        resolved = (candidate if candidate.is_absolute() else self.root / candidate).resolve()
        if not resolved.is_relative_to(self.root):
            raise WorkspaceError(f"path {text!r} leads outside the workspace {str(self.root)!r}")
        return resolved

    def fixture_path(self, name: str) -> Path:
        """Path of fixture ``name`` (``fixtures/NAME.json`` or ``.harnessgym/fixtures/NAME.json``)."""
        check_name(name, "fixture")
        for folder in FIXTURE_DIRS:
            path = self.path(f"{folder}/{name}.json")
            if path.is_file():
                return path
        raise WorkspaceError(f"unknown fixture {name!r}; known fixtures: {', '.join(self.fixture_names()) or 'none'}")

    def fixture_names(self) -> list[str]:
        names: set[str] = set()
        for folder in FIXTURE_DIRS:
            directory = self.root / folder
            if directory.is_dir() and directory.resolve().is_relative_to(self.root):
                names |= {p.stem for p in directory.glob("*.json")}
        return sorted(names)

    def fixture(self, name: str) -> dict[str, Any]:
        path = self.fixture_path(name)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise WorkspaceError(f"fixture {name!r} is not valid JSON: {exc.msg}") from None
        return data if isinstance(data, dict) and "plan" in data else {"name": name, "plan": data}

    def current_plan(self) -> dict[str, Any]:
        from tuner.plan import load_plan  # the tensor plan's catalogue, loaded only where a plan is read

        return load_plan(self.plan_path)

    def resolve_plan(self, ref: str | dict[str, Any] | None) -> tuple[dict[str, Any], str]:
        """A plan and a label from a reference: ``None`` (the current plan), a plan object, a fixture
        name, or a JSON file inside the workspace."""
        from tuner.plan import load_plan, validate_plan

        if ref is None:
            return self.current_plan(), PLAN_FILE
        if isinstance(ref, dict):
            return validate_plan(ref), "inline plan"
        if not isinstance(ref, str):
            raise WorkspaceError(f"a plan reference must be a fixture name, a path or a plan object, got {type(ref).__name__}")
        if NAME_PATTERN.match(ref) and not ref.endswith(".json"):
            return validate_plan(self.fixture(ref)["plan"]), f"fixture {ref}"
        path = self.path(ref)
        if not path.is_file():
            raise WorkspaceError(f"no plan file {ref!r} in the workspace")
        return load_plan(path), ref


def check_name(name: str, what: str) -> str:
    """``name`` if it is a plain file name stem; :class:`WorkspaceError` otherwise."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name) or name in (".", ".."):
        raise WorkspaceError(f"{what} name {name!r} is not allowed (letters, digits, '_', '-', '.'; no path)")
    return name


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (temp file in the same folder, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


__all__ = ["MANIFEST", "PLAN_FILE", "RESULT_PATH", "SERVER_DIR", "TELEMETRY", "Workspace", "WorkspaceError",
           "atomic_write", "check_name"]
