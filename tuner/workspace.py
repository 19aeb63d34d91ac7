"""The workspace a tuner works on: confined paths, one write policy, plan references and fixtures.

Every path a caller gives is resolved inside the workspace root: ``..`` escapes, absolute paths
elsewhere and symlinks that lead out are refused. Every write goes through :meth:`Workspace.write`,
the one place the write policy is enforced: a workspace opened with ``writes`` may write only those
kinds (``plan``, ``fixture``, ``result``), each only where its kind allows; a write never follows a
symlink, never touches ``.git/``, the MCP manifests and launchers, profiles or code, and never replaces
a file without a backup in ``.harnessgym/backups/``. Writes go through a temporary file in the same
folder, ``fsync`` and ``rename``, so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

PLAN_FILE = "kernel_plan.json"
FIXTURE_DIRS = ("fixtures", ".harnessgym/fixtures")
SERVER_NAME = "tensor-plan-server"                          # the MCP server's name, as clients list it
SERVER_DIR = f".harnessgym/mcp/{SERVER_NAME}"               # its manifest and launcher
MANIFEST = f"{SERVER_DIR}/harnessgym-mcp.json"
TELEMETRY = ".harnessgym/mcp_calls.jsonl"                   # one line per call of .harnessgym/runtime/mcp_call.py
RESULT_PATH = ".harnessgym/iteration_result.json"
BACKUP_DIR = ".harnessgym/backups"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")   # a plain file name stem: fixtures, profiles
MAX_PATH_CHARS = 512                                        # longest path argument accepted
LIMITS = {"time_s": 86_400, "max_evals": 10_000_000, "limit": 100, "repeats": 100,    # largest budgets, rows and repeats a tool accepts,
          "tools": 50}                                                                # and tool names record_result may be told
WRITE_KINDS = ("plan", "fixture", "result", "output")       # what a workspace write may be
OUTPUT_DIR = "results"                                      # where the main job's report and winner go (not read as fixtures)
OUTPUT_BACKUPS = 3                                          # backups kept of each output (a report is 5 MB, made again each run)
PROTECTED = (".git", ".harnessgym/mcp", ".harnessgym/runtime", BACKUP_DIR, "studies", "fixtures", "tuner", "tests")
RESULT_KEYS = {"metrics", "plan_hash", "used_harness_tools"}  # an earlier result file, which a new result may replace
MAX_TEXT_BYTES = 1 << 20                                     # a plan, fixture, configuration or result file (a plan is < 1 KB)


class WorkspaceError(ValueError):
    """A path, name or reference the workspace refuses (the message says why)."""


def shortened(text: str, limit: int = 60, length: int | None = None) -> str:
    """``text``, or past ``limit`` characters its start and its end (where a path names its file) with its length
    (``length``: the length of what ``text`` shows, when not its own): error messages never echo a huge argument."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 5
    return f"{text[:head]}...{text[head - limit:]} ({len(text) if length is None else length} characters)"


def quoted(value: object, limit: int = 60) -> str:
    """``repr`` of ``value``, :func:`shortened`; a string's length is its own, not its quoted form's."""
    return shortened(repr(value), limit, len(value) if isinstance(value, str) else None)


@dataclass(frozen=True)
class Workspace:
    """A folder holding ``kernel_plan.json`` (and usually ``benchmark.py`` and ``fixtures/``);
    ``writes``: the kinds of write allowed through it (none: read-only)."""

    root: Path
    writes: frozenset[str] = field(default=frozenset(WRITE_KINDS))

    @classmethod
    def at(cls, root: str | Path = ".", writes: frozenset[str] | tuple[str, ...] = WRITE_KINDS) -> Workspace:
        path = Path(root).resolve()
        try:
            is_dir = path.is_dir()
        except OSError as exc:                              # a name too long, a folder that may not be searched
            raise WorkspaceError(f"workspace {quoted(str(root))} cannot be read: {exc.strerror}") from None
        if not is_dir:
            raise WorkspaceError(f"workspace {quoted(str(root))} is not a folder")
        return cls(path, frozenset(writes))

    @property
    def plan_path(self) -> Path:
        return self.root / PLAN_FILE

    def path(self, relative: str | Path) -> Path:
        """``relative`` resolved inside the workspace; :class:`WorkspaceError` if it would leave it."""
        text = str(relative)
        if not text or "\x00" in text or len(text) > MAX_PATH_CHARS:
            raise WorkspaceError(f"path {quoted(text)} is empty, malformed or longer than {MAX_PATH_CHARS} characters")
        candidate = Path(text)
        resolved = (candidate if candidate.is_absolute() else self.root / candidate).resolve()
        if not resolved.is_relative_to(self.root):
            raise WorkspaceError(f"path {quoted(text)} leads outside the workspace")
        return resolved

    @contextmanager
    def plan_lock(self) -> Iterator[None]:
        """Held by one process at a time (``flock`` on the workspace folder): the plan's writers read what the plan is
        and replace it as one step, so that two applies (or an apply and a rollback) never interleave."""
        fd = os.open(self.root, os.O_RDONLY)
        try:
            with contextlib.suppress(OSError):              # a file system without locks: the writers still check the plan
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)                                    # releases the lock

    # --- the write policy ---------------------------------------------------------------------

    def write(self, kind: str, relative: str, text: str, replace: bool = True, backup_name: str | None = None) -> str | None:
        """Write ``text`` to ``relative`` as a write of ``kind`` (atomically); returns the backup kept of the
        file it replaced (workspace-relative), or ``None`` for a new file.

        ``replace=False`` refuses an existing file; ``backup_name`` names the backup (default: the path's).
        :class:`WorkspaceError` when the workspace does not allow ``kind`` or the path is not one it may write.
        """
        if kind not in self.writes:
            raise WorkspaceError(f"this tool may not write ({kind} writes are not declared for it)")
        target, rel = self._write_target(relative)
        _check_kind(kind, rel)
        backup = None
        exists = WorkspaceError(f"{rel} exists; replacing it needs overwrite=true (--overwrite on the command line; a backup is kept)")
        if target.exists():
            if not replace:
                raise exists
            if kind == "result" and not _is_result(target):
                raise WorkspaceError(f"{rel} is not an earlier result file; a result may replace only a result")
            name = backup_name or _backup_name(rel)
            backup = self.backup(target, name)
            if kind == "output":
                self._prune_backups(name, target.suffix, OUTPUT_BACKUPS)
        try:
            atomic_write(target, text, replace)
        except FileExistsError:
            raise exists from None                              # another process made it since the check above
        return backup

    def backup(self, source: Path, name: str | None = None) -> str:
        """Copy ``source`` to a new file ``.harnessgym/backups/NAME.<UTC stamp><its suffix>``; its workspace-relative path.
        NAME defaults to the source's own path in the workspace (``results/report.html``: ``results__report``)."""
        name = name or _backup_name(PurePosixPath(source.relative_to(self.root).as_posix()))
        folder, _ = self._write_target(BACKUP_DIR)
        data = source.read_bytes()
        folder.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        for attempt in range(100):
            path = folder / f"{name}.{stamp}{f'-{attempt}' if attempt else ''}{source.suffix}"
            try:
                atomic_write(path, data, replace=False)         # whole or not at all: a rollback restores it as it was
            except FileExistsError:
                continue
            return f"{BACKUP_DIR}/{path.name}"
        raise WorkspaceError(f"cannot name a new backup of {name}")

    def _prune_backups(self, name: str, suffix: str, keep: int) -> None:
        """Remove all but the newest ``keep`` backups made of ``name`` (as :meth:`backup` names them)."""
        folder, _ = self._write_target(BACKUP_DIR)
        made = re.compile(rf"{re.escape(name)}\.(\d{{8}}T\d{{12}})Z(?:-(\d+))?{re.escape(suffix)}")
        found = [(m[1], int(m[2] or 0), p) for p in folder.iterdir() if (m := made.fullmatch(p.name))]
        for *_, old in sorted(found)[:-keep]:                  # by time stamp, then the same stamp's count: oldest first
            old.unlink(missing_ok=True)                         # another run that wrote the same output pruned it first

    def _write_target(self, relative: str) -> tuple[Path, PurePosixPath]:
        """The unresolved path of ``relative`` and its workspace-relative form; refused when it leaves the
        workspace or any part of it on the way is a symlink (a write never follows one)."""
        self.path(relative)                                   # confinement and the length bound
        text = str(relative)
        candidate = Path(text) if Path(text).is_absolute() else self.root / text
        rel = PurePosixPath(os.path.normpath(candidate).removeprefix(str(self.root)).lstrip("/"))
        if not rel.parts or ".." in rel.parts:
            raise WorkspaceError(f"path {quoted(text)} does not name a file in the workspace")
        walk = self.root
        for part in rel.parts:
            walk = walk / part
            if walk.is_symlink():
                raise WorkspaceError(f"path {quoted(text)} goes through a symlink ({PurePosixPath(*walk.relative_to(self.root).parts)}); "
                                     "writes never follow symlinks")
        return self.root / rel, rel

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
            data = loads(read_text(path))
        except (OSError, ValueError) as exc:                # unreadable, not UTF-8, not JSON
            raise WorkspaceError(f"fixture {name!r} cannot be read as JSON: {json_reason(exc)}") from None
        return data if isinstance(data, dict) and "plan" in data else {"name": name, "plan": data}

    def current_plan(self) -> dict[str, Any]:
        from tuner.plan import load_plan  # the tensor plan's catalogue, loaded only where a plan is read

        if not self.plan_path.exists():
            raise WorkspaceError(f"the workspace holds no {PLAN_FILE}: the tensor plan's commands read it there "
                                 "(run them in a copy of this repository, or name one with --workspace DIR)")
        return load_plan(self.plan_path, PLAN_FILE)

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
            raise WorkspaceError(f"no plan file {quoted(ref)} in the workspace")
        return load_plan(path, ref), ref


def _backup_name(rel: PurePosixPath) -> str:
    """The name of a workspace file's backups: its relative path without the suffix, ``/`` as ``__``."""
    return str(rel.with_suffix("")).replace("/", "__")


def _check_kind(kind: str, rel: PurePosixPath) -> None:
    """Refuse ``rel`` for a write of ``kind``: the plan is only ``kernel_plan.json``, a fixture only
    ``fixtures/NAME.json``, an output only a file under ``results/``, a result any other ``.json``
    outside the protected folders and manifests."""
    text = str(rel)
    if kind == "plan":
        allowed = text == PLAN_FILE
    elif kind == "fixture":
        allowed = len(rel.parts) == 2 and rel.parts[0] == "fixtures" and rel.suffix == ".json"
    elif kind == "output":
        allowed = rel.parts[0] == OUTPUT_DIR and rel.suffix in (".json", ".html")    # results/ alone has no suffix
    else:
        protected = any(text == p or text.startswith(p + "/") for p in PROTECTED) or ".git" in rel.parts
        allowed = rel.suffix == ".json" and text != PLAN_FILE and not protected and rel.name != Path(MANIFEST).name
    if not allowed:
        raise WorkspaceError(f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} write may not touch {quoted(text)} "
                             + {"plan": f"(only {PLAN_FILE})", "fixture": "(only fixtures/NAME.json)",
                                "output": f"(only .json or .html files under {OUTPUT_DIR}/)",
                                "result": "(a .json file outside .git, manifests, backups, studies, fixtures, code and the plan)"}[kind])


class DuplicateKeyError(ValueError):
    """A JSON object that names one key twice: which value was meant is not known (Python's parser keeps the last)."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The object of ``pairs``; :class:`DuplicateKeyError` naming the first key given twice."""
    data = dict(pairs)
    if len(data) < len(pairs):
        twice = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
        raise DuplicateKeyError(f"key {quoted(twice)} appears twice in one object")
    return data


def loads(text: str | bytes) -> Any:
    """``json.loads`` for text from outside (files, a benchmark's output): whatever Python's parser cannot
    hold, nesting past its recursion limit or an integer of more than 4,300 digits, is a ``ValueError`` too,
    as malformed JSON (``json.JSONDecodeError``), bytes that are not UTF-8 and an object that names a key twice
    (:class:`DuplicateKeyError`) are."""
    try:
        return json.loads(text, object_pairs_hook=_unique)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError | DuplicateKeyError):
            raise
        raise ValueError("a number too long to read") from None       # int_max_str_digits


def read_text(path: Path) -> str:
    """A small file of the workspace (a plan, fixture, configuration or result) as UTF-8 text: ``OSError``, or
    ``ValueError`` when it holds more than ``MAX_TEXT_BYTES`` or is not UTF-8 (:func:`json_reason` says which)."""
    with open(path, "rb") as file:
        raw = file.read(MAX_TEXT_BYTES + 1)                     # a huge file is refused, never read whole
    if len(raw) > MAX_TEXT_BYTES:
        raise ValueError(f"larger than {MAX_TEXT_BYTES >> 20} MiB, far more than a plan or configuration needs")
    return raw.decode("utf-8")


def json_reason(exc: OSError | ValueError) -> str:
    """What went wrong reading a JSON file, in a few words."""
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return getattr(exc, "msg", None) or getattr(exc, "strerror", None) or str(exc) or exc.__class__.__name__


def _is_result(path: Path) -> bool:
    try:
        data = loads(read_text(path))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and set(data) >= RESULT_KEYS


def check_name(name: str, what: str) -> str:
    """``name`` if it is a plain file name stem; :class:`WorkspaceError` otherwise."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise WorkspaceError(f"{what} name {quoted(name)} is not allowed (letters, digits, '_', '-', '.'; no path)")
    return name


def _linked(temp: str, path: Path) -> bool:
    """Whether ``temp`` became ``path`` through a hard link, which never replaces a file (``FileExistsError``); ``False``
    on a file system without hard links, where ``path`` does not exist yet."""
    try:
        os.link(temp, path)
    except FileExistsError:
        raise
    except OSError:
        if path.exists():
            raise FileExistsError(path) from None
        return False
    os.unlink(temp)
    return True


def atomic_write(path: Path, text: str | bytes, replace: bool = True) -> None:
    """Replace ``path`` with ``text`` (UTF-8) or bytes atomically (temp file in the same folder, fsync, rename), keeping
    its mode; ``replace=False``: create it, ``FileExistsError`` when it exists (a hard link, which never replaces)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.is_file() else 0o644      # a replaced file keeps its mode
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:                                              # named by the file wanted, not by a temp name
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode() if isinstance(text, str) else text)
            handle.flush()
            os.fsync(handle.fileno())
        if replace or not _linked(temp, path):
            os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


__all__ = ["BACKUP_DIR", "LIMITS", "MANIFEST", "MAX_PATH_CHARS", "OUTPUT_DIR", "PLAN_FILE", "RESULT_PATH", "SERVER_DIR",
           "SERVER_NAME", "TELEMETRY", "WRITE_KINDS", "Workspace", "WorkspaceError", "atomic_write", "check_name", "quoted"]
