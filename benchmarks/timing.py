"""Timing shared by the benchmark scripts: medians of cases run round-robin, so that load on the
machine (these are shared, noisy machines) hits every case alike."""
from __future__ import annotations

import time

import numpy as np


def interleaved_medians(cases, repeat, clock=time.perf_counter, scale=1.0):
    """Median time of each case (seconds times ``scale``), after one warm-up call each."""
    for fn in cases.values():
        fn()
    times = {name: [] for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            t0 = clock()
            fn()
            times[name].append(clock() - t0)
    return {name: float(np.median(v)) * scale for name, v in times.items()}
