"""Stopping a command by a signal (Ctrl-C, SIGTERM, SIGHUP) at a point where stopping is safe.

A stop signal raises :class:`KeyboardInterrupt` in the main thread (:class:`Terminated` for SIGTERM and
SIGHUP), as Python does for Ctrl-C, so that a search saves what it scored and a measuring program is
killed. Two places are not safe:

- the main thread's database work (:func:`held`): raised there, a stop could land in SQLAlchemy's or the
  driver's own cleanup and leave a transaction open, or a lock of the connection pool taken, and the
  saving that follows would wait on it, for ever on the pool's lock. The stop waits until the work
  ends; a further signal, once it has waited ``ESCAPE_S``, is raised at once (the work hangs);
- a finalizer or a weak reference's callback, where Python only reports an exception and goes on: such
  a lost stop is raised again at the next safe point (:func:`check`: before database work, and between
  a search's evaluations), and not reported.

Once a stop is raised, further signals are ignored, so that the saving is not cut short.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

ALL = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """Signal ``signum`` (SIGTERM, SIGHUP) arrived: the command stops as on Ctrl-C (the search saves its state, a
    measuring program's process group is killed, temporary copies are removed)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def described(signum: int) -> str:
    """How a command that ``signum`` stopped ended, in words: ``interrupted`` (Ctrl-C), ``terminated by SIGTERM``."""
    return "interrupted" if signum == signal.SIGINT else f"terminated by {signal.Signals(signum).name}"


ESCAPE_S = 5.0                                      # a stop waiting this long on database work gives way to the next signal

_depth = 0                                          # how deep the main thread is in :func:`held`
_pending: tuple[KeyboardInterrupt, float] | None = None     # a stop that arrived there, and when
_raised: KeyboardInterrupt | None = None            # the stop raised
_lost = False                                       # whether a finalizer swallowed it
_reporter = sys.unraisablehook                      # what reports the other exceptions that finalizers raise


def _stop(signum: int, frame: object) -> None:
    global _pending
    stop = KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)
    if _depth and (_pending is None or time.monotonic() - _pending[1] < ESCAPE_S):
        _pending = _pending or (stop, time.monotonic())
        return
    _raise(stop)


def _raise(stop: KeyboardInterrupt) -> None:
    global _pending, _raised, _lost
    _pending, _raised, _lost = None, stop, False
    for signum in ALL:
        if signal.getsignal(signum) is _stop:
            signal.signal(signum, signal.SIG_IGN)
    raise stop


def _unraisable(unraisable: Any) -> None:
    global _lost
    if unraisable.exc_value is not None and unraisable.exc_value is _raised:
        _lost = True                                # raised again by check(); nothing to report
    else:
        _reporter(unraisable)


def check() -> None:
    """Raise again a stop that a finalizer or a callback swallowed (in the main thread; elsewhere nothing)."""
    if _lost and _raised is not None and _depth == 0 and threading.current_thread() is threading.main_thread():
        _raise(_raised)


@contextmanager
def on() -> Iterator[None]:
    """While the body runs (in the main thread), the stop signals stop it as described above; the handlers before
    are restored after."""
    global _pending, _raised, _lost, _reporter
    with _blocked():                                # a signal that comes while the handlers change waits for all of them
        _pending, _raised, _lost = None, None, False
        previous = {signum: signal.signal(signum, _stop) for signum in ALL}
        _reporter, sys.unraisablehook = sys.unraisablehook, _unraisable
    try:
        yield
    finally:
        with _blocked():
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            sys.unraisablehook = _reporter


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
    """A stop signal that arrives in the main thread while the body runs is raised when it ends, and a stop that a
    finalizer swallowed before it starts (in other threads this does nothing)."""
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    check()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth and _pending is not None:
            _raise(_pending[0])
