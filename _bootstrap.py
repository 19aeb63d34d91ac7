"""Let the root scripts run with a bare ``python3``: put the repository on the path and, when the
repository has a ``.venv`` that is not the running interpreter's, re-run under it (that is where
the README's setup installed the dependencies)."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
sys.path.insert(0, str(ROOT))
if (VENV / "bin" / "python").exists() and Path(sys.prefix).resolve() != VENV.resolve():
    os.execv(str(VENV / "bin" / "python"), [str(VENV / "bin" / "python"), *sys.argv])
