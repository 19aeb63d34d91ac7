"""The reaper: a process that outlives a tuner killed outright (SIGKILL, the out-of-memory killer) only to kill the
benchmark runs that tuner leaves behind, each with its process group, and to remove its private copies.

Its stdin is a pipe from the tuner, which writes ``run PGID`` when a run starts, ``done PGID`` once that run's group
is killed, and ``copy PATH`` for each private copy it makes. At the pipe's end (the tuner closed it, or died), it
kills every group still running and removes every copy still there, then exits. It runs as a script in a session of
its own (no terminal signal reaches it; the tuner stops its runs itself on those), and imports nothing of the tuner.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys


def main() -> None:
    running: set[int] = set()
    copies: set[str] = set()
    for line in sys.stdin:
        what, _, argument = line.rstrip("\n").partition(" ")
        if what == "run":
            running.add(int(argument))
        elif what == "done":
            running.discard(int(argument))
        elif what == "copy":
            copies.add(argument)
    for group in running:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    for path in copies:
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
