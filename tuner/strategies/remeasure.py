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
    # the failures asked for (not the runs that a longer time limit alone counts as not measured), less those a
    # resumed round measured already
    todo = [idx for h, idx in search.unmeasured.items() if h in search.spec.remeasure and h not in search.seen]
    for start in range(0, len(todo), BATCH):
        if stopped := search.stop_reason():
            return search.finish(search.top(), stopped)
        search.evaluate(np.stack(todo[start:start + BATCH]), {"phase": "again"})
    return search.finish(search.top(), search.stop_reason() or "exhausted")
