"""``remeasure``: the configurations whose recorded runs failed, run again.

A real benchmark's failure may say more about the machine than about the configuration (a busy or missing GPU, a
driver not loaded, a full disk). :class:`tuner.search.Search` counts the failures of ``Spec.remeasure`` as not
measured (``search.unmeasured``); this strategy proposes each once, in the order of their plan hashes, and the new
results take the failures' places in the history. It ends ``exhausted`` when none is left.
"""

from __future__ import annotations

import numpy as np

from tuner.search import Outcome, Search

BATCH = 256                         # configurations per call of Search.evaluate (a program's runs are claimed one by one)


def run(search: Search) -> Outcome:
    todo = [idx for h, idx in search.unmeasured.items() if h not in search.seen]     # a resumed run: those left
    for start in range(0, len(todo), BATCH):
        if stopped := search.stop_reason():
            return search.finish(search.top(), stopped)
        search.evaluate(np.stack(todo[start:start + BATCH]), {"phase": "again"})
    return search.finish(search.top(), search.stop_reason() or "exhausted")
