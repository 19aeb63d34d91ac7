"""``python -m tuner``."""

import signal
import sys

signal.signal(signal.SIGINT, lambda signum, frame: sys.exit(128 + signum))   # Ctrl-C while it loads: nothing began, no traceback

from tuner.cli import main  # noqa: E402  (after the handler: loading takes half a second)

raise SystemExit(main())
