"""Let the root scripts run with a bare ``python3``: put the repository on the path and, when the
dependencies are missing from this interpreter, re-run under the repository's ``.venv``."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
try:
    import numpy  # noqa: F401
    import pydantic  # noqa: F401
except ImportError:
    venv_python = ROOT / ".venv" / "bin" / "python"
    if venv_python.exists() and Path(sys.executable).resolve() != venv_python.resolve():
        os.execv(str(venv_python), [str(venv_python), *sys.argv])
    raise
