"""The memory traffic a check that keeps the previous values cannot avoid (read every weight and its previous copy,
write the copy), measured two ways beside the transformer's rounds: compiled, computing nothing else (the floor), and
numpy's cost of it (not a floor)."""
from __future__ import annotations

import statistics
import time

import numpy as np


def kernel():
    """A compiled loop that moves exactly the bytes a keeping check must move and computes nothing else: per block,
    a sum over the weight and its previous copy (one read of each), then the block streamed into a third buffer
    with the engine's own non-temporal stores (the keep buffer). What the check costs beyond it is the statistics,
    the judging and the per-call work."""
    from numba import njit

    from msdebug_hooks.conditions._kernels import BLOCK, _store_fence, _stream_copy

    @njit(fastmath=True, nogil=True)
    def traffic(x, previous, keep):
        total = x.dtype.type(0)
        n = x.size
        for start in range(0, n, BLOCK):
            stop = min(start + BLOCK, n)
            for i in range(start, stop):
                total += x[i] + previous[i]
            _stream_copy(keep[start:stop], x[start:stop])
        _store_fence()
        return total

    return lambda x, previous, keep: traffic(x.reshape(-1), previous.reshape(-1), keep.reshape(-1))


def compiled_traffic(traffic, weights: list, kept: list, spares: list) -> None:
    """``traffic`` over every weight, its previous copy and a spare keep buffer."""
    for weight, previous, spare in zip(weights, kept, spares):
        traffic(weight, previous, spare)


def numpy_traffic(weights: list, kept: list) -> None:
    """What a check of every weight against its previous copy that keeps the new values at least costs in numpy:
    one read of each weight and of its copy (``np.max``), then the copy."""
    for weight, previous in zip(weights, kept):
        np.max(weight)
        np.max(previous)
        np.copyto(previous, weight)


def timed(body, repeats: int) -> list[tuple[float, float]]:
    """(wall, thread CPU) seconds of each of ``repeats`` calls of ``body``."""
    times = []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.thread_time()
        body()
        times.append((time.perf_counter() - wall, time.thread_time() - cpu))
    return times


def medians(times: list[tuple[float, float]]) -> tuple[float, float]:
    """The median wall and the median CPU seconds of ``timed``'s pairs."""
    return statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)

