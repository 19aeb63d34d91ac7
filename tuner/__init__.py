"""tensor-plan-optimizer's tuner.

Its linear algebra is small (matrices of a few hundred rows), where BLAS threads do not pay, and tuner processes
that share a machine (cooperating workers, benchmark runs), each with a BLAS thread per core, slow one another
down many times over. So every process that imports the package before numpy gets one BLAS thread, unless its
environment already says how many (``BLAS_THREADS``); its subprocesses inherit that.
"""

import argparse
import os
import signal
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn

BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

for _name in BLAS_THREADS:
    os.environ.setdefault(_name, "1")


def package_version() -> str:
    """The installed package's version (``0+unknown`` in a checkout that was never installed)."""
    try:
        return version("tensor-plan-optimizer")
    except PackageNotFoundError:
        return "0+unknown"


def quiet_ctrl_c_while_loading() -> None:
    """Until a command installs its own handlers, Ctrl-C exits with 130 and no traceback: loading the tuner takes most of
    a second, and nothing has begun that a traceback would explain. For the commands' entry points only."""
    signal.signal(signal.SIGINT, lambda signum, frame: sys.exit(128 + signum))


def positive_number(kind: type[int] | type[float], cap: float) -> Callable[[str], int | float]:
    """An argparse type (the entry points'): a finite positive ``kind`` (int or float) no larger than ``cap``."""
    what = f"a positive {'integer' if kind is int else 'number'} up to {cap:,}"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text[:40]!r}") from None
        if not 0 < value <= cap:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text[:40]!r}")
        return value

    return parse


class Parser(argparse.ArgumentParser):
    """The entry points' argument parser: bad arguments are refused in one line that says where the options are listed
    (argparse's own refusal comes after its usage, which lists every option); exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} ('{self.prog} --help' lists the options)\n")
