"""Stopping a command by a signal (Ctrl-C, SIGTERM, SIGHUP) at a point where stopping is safe.

A stop signal raises :class:`KeyboardInterrupt` in the main thread (:class:`Terminated` for SIGTERM and
SIGHUP), as Python does for Ctrl-C, so that a search saves what it scored and a measuring program is
killed. Only inside :func:`held`, the main thread's database work, it waits: raised there, it could
land in SQLAlchemy's or the driver's own cleanup and leave a transaction open, and the saving that
follows would then wait on the write lock that transaction holds, or on a lock of the connection pool
for ever. It is raised as the work ends; a second signal while it waits is raised at once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

ALL = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """Signal ``signum`` (SIGTERM, SIGHUP) arrived: the command stops as on Ctrl-C (the search saves its state, a
    measuring program's process group is killed, temporary copies are removed). Workers are sent it in turn:
    unlike Ctrl-C in a terminal, a ``kill`` of the first process reaches no other."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_depth = 0                                          # how deep the main thread is in :func:`held`
_pending: KeyboardInterrupt | None = None           # a stop that arrived there


def _stop(signum: int, frame: object) -> None:
    global _pending
    stop = KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)
    if _depth and _pending is None:                 # a second one raises at once: the database work may hang
        _pending = stop
        return
    _raise(stop)


def _raise(stop: KeyboardInterrupt) -> None:
    global _pending
    _pending = None
    for signum in ALL:                              # a further signal must not cut the saving short
        if signal.getsignal(signum) is _stop:
            signal.signal(signum, signal.SIG_IGN)
    raise stop


@contextmanager
def on() -> Iterator[None]:
    """While the body runs (in the main thread), the stop signals stop it as described above; the handlers before
    are restored after."""
    global _pending
    with _blocked():                                # a signal that comes while the handlers change waits for all of them
        _pending = None
        previous = {signum: signal.signal(signum, _stop) for signum in ALL}
    try:
        yield
    finally:
        with _blocked():
            for signum, handler in previous.items():
                signal.signal(signum, handler)


@contextmanager
def _blocked() -> Iterator[None]:
    """The stop signals are held by the system while the body runs, and delivered after."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, ALL)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


@contextmanager
def held() -> Iterator[None]:
    """A stop signal that arrives in the main thread while the body runs is raised when it ends (elsewhere, and in
    other threads, this does nothing)."""
    global _depth, _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth and _pending is not None:
            _raise(_pending)
