"""Search strategies, one module each, all with the same signature ``run(search) -> Outcome``.

Adding a strategy is adding a module here and a line in ``STRATEGIES``.
"""

from __future__ import annotations

from collections.abc import Callable

from tuner.search import Outcome, Search
from tuner.strategies import bayes, checkpoint, exhaustive, focused, quick, remeasure

STRATEGIES: dict[str, Callable[[Search], Outcome]] = {
    "quick": quick.run,
    "bayes": bayes.run,
    "focused": focused.run,
    "checkpoint": checkpoint.run,
    "exhaustive": exhaustive.run,
    "remeasure": remeasure.run,
}

__all__ = ["STRATEGIES"]
