"""tensor-plan-optimizer's tuner.

Its linear algebra is small (matrices of a few hundred rows), where BLAS threads do not pay, and tuner processes
that share a machine (cooperating workers, benchmark runs), each with a BLAS thread per core, slow one another
down many times over. So every process that imports the package before numpy gets one BLAS thread, unless its
environment already says how many (``BLAS_THREADS``); its subprocesses inherit that.
"""

import os
from importlib.metadata import PackageNotFoundError, version

BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

for _name in BLAS_THREADS:
    os.environ.setdefault(_name, "1")


def package_version() -> str:
    """The installed package's version (``0+unknown`` in a checkout that was never installed)."""
    try:
        return version("tensor-plan-optimizer")
    except PackageNotFoundError:
        return "0+unknown"
