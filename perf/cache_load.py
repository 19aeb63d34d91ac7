"""Loading a large measured cache, side by side in one run (one core; numbers vary by machine).

    python perf/cache_load.py [--records 400000]

Writes a Kernel Tuner cache of that many records (seeded; each record holds what Kernel Tuner writes: the knobs,
``time``, ``times``, ``GFLOP/s`` and the rest; 10% failed to compile) as ``.json.gz`` in a temporary folder, then
times reading its JSON alone (decompressing and parsing, what no loader can avoid) and ``CacheObjective`` loading
it (the same, plus each record's configuration encoded and its time kept). Prints records/s for both and the
share of the load that is not the JSON.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from arguments import at_least_one

from tuner.objectives.cache import CacheObjective
from tuner.space import read_json

TUNE_PARAMS = {"block_size_x": [16 * i for i in range(1, 33)], "block_size_y": [1, 2, 4, 8, 16, 32],
               "tile_size_x": list(range(1, 11)), "tile_size_y": list(range(1, 11)), "sh_power": [0, 1],
               "blocks_per_sm": [0, 1, 2, 3, 4], "temporal_tiling_factor": list(range(1, 12))}


def write_cache(path: Path, records: int, seed: int = 0) -> None:
    """A Kernel Tuner cache of ``records`` distinct configurations of ``TUNE_PARAMS`` (1,056,000 at most)."""
    rng = np.random.default_rng(seed)
    combos = list(itertools.product(*TUNE_PARAMS.values()))
    chosen = np.sort(rng.choice(len(combos), size=min(records, len(combos)), replace=False))
    times = rng.uniform(1, 10, size=(len(chosen), 8)).round(6)
    cache = {}
    for i, (row, t) in enumerate(zip(chosen, times, strict=True)):
        combo = combos[row]
        record = dict(zip(TUNE_PARAMS, combo, strict=True))
        record.update(time="CompilationFailedConfig" if i % 10 == 9 else float(t[0]), times=t[1:].tolist(),
                      compile_time=1.5, verification_time=0, benchmark_time=3.2, GFLOP_s=1000 / float(t[0]),
                      strategy_time=0, framework_time=0.1, timestamp="2024-01-01 00:00:00.000000")
        cache[",".join(map(str, combo))] = record
    with gzip.open(path, "wt") as file:
        json.dump({"device_name": "synthetic", "kernel_name": "hotspot", "tune_params_keys": list(TUNE_PARAMS),
                   "tune_params": TUNE_PARAMS, "objective": "time", "cache": cache}, file)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=at_least_one, default=400_000, help="records in the cache (default 400,000)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cache.json.gz"
        write_cache(path, args.records)
        started = time.perf_counter()
        read_json(path, "cache file")
        parse = time.perf_counter() - started
        started = time.perf_counter()
        objective = CacheObjective(path)
        load = time.perf_counter() - started
    records = len(objective._time) + len(objective._reason)
    print(f"a Kernel Tuner cache of {records:,} records ({len(objective._time):,} with a time)")
    print(f"  its JSON alone:    {records / parse:>10,.0f} records/s ({parse:.2f} s)")
    print(f"  CacheObjective:    {records / load:>10,.0f} records/s ({load:.2f} s)")
    print(f"  beyond the JSON:   {1 - parse / load:>10.0%} of the load")


if __name__ == "__main__":
    main()
