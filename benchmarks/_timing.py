"""The one timing helper of the benchmark scripts (each script runs from any folder:
a script run as ``python benchmarks/<script>`` has this folder first on
``sys.path``)."""

from __future__ import annotations

import time


def best_time(fn, repeat: int) -> float:
    """The fastest of ``repeat`` calls of ``fn()``, in seconds (noise only adds time)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)
