"""Let the root scripts run with a bare ``python3``: put the repository on the path; where the running
interpreter lacks the dependencies, re-run under the repository's ``.venv`` (where the README's setup
installs them), or say in one line which command installs them."""

import os
import sys
from importlib.util import find_spec
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
NEEDED = ("anyio", "mcp", "numpy", "optuna", "pydantic", "sqlalchemy")

sys.path.insert(0, str(ROOT))
missing = [name for name in NEEDED if find_spec(name) is None]
if missing:
    if VENV_PYTHON.exists() and Path(sys.executable).absolute() != VENV_PYTHON.absolute():
        os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), *sys.argv])
    source = f"-e {ROOT}" if (ROOT / "pyproject.toml").is_file() else "tensor-plan-optimizer"
    sys.stderr.write(f"{Path(sys.argv[0]).name}: error: {sys.executable} lacks the dependency {missing[0]!r}; "
                     f"install the package with: {sys.executable} -m pip install {source}\n")
    raise SystemExit(2)
