"""Wall-clock timing and the machine's matrix-multiply rate, shared by every runtime's bench."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from functools import lru_cache

import torch

from kdbert.errors import KdbertError

__all__ = ["percentile", "time_calls", "torch_matmul_rate"]


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least ``q`` of the data at or below."""
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def time_calls(call: Callable[[], object], warmup: int = 5, runs: int = 30) -> dict[str, float]:
    """Wall-clock times of ``runs`` calls of ``call()`` after ``warmup`` untimed ones.

    Returns ``median_ms``, ``p90_ms`` (nearest rank), ``mean_ms``, ``min_ms`` and ``runs``.
    """
    if runs < 1 or warmup < 0:
        raise KdbertError(f"runs={runs}, warmup={warmup} are invalid; pass runs >= 1 and warmup >= 0")
    times_ms: list[float] = []
    for i in range(warmup + runs):
        start = time.perf_counter()
        call()
        if i >= warmup:
            times_ms.append((time.perf_counter() - start) * 1000.0)
    times_ms.sort()
    return {
        "median_ms": statistics.median(times_ms),
        "p90_ms": percentile(times_ms, 0.9),
        "mean_ms": statistics.fmean(times_ms),
        "min_ms": times_ms[0],
        "runs": runs,
    }


@lru_cache(maxsize=None)
def torch_matmul_rate(threads: int, n: int = 1024) -> float:
    """FLOP/s of ``torch.mm`` on two fp32 ``n x n`` matrices (``2 n^3`` FLOPs) at ``threads``
    threads: median of 10 runs after 2 warm-up ones."""
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=generator), torch.randn(n, n, generator=generator)
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        timing = time_calls(lambda: torch.mm(a, b), warmup=2, runs=10)
    finally:
        torch.set_num_threads(previous)
    return 2 * n**3 / (timing["median_ms"] / 1000.0)
