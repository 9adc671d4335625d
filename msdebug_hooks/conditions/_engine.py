"""Which statistics engine runs (the compiled numba pass, or numpy's chunked pass), and the compiled pass's driver.

Why a separate module: numba takes about a second to import and load its cached kernels, and ``import
msdebug_hooks`` must stay light, so the kernels are imported here on first use, or ahead of time by
``warm_up_statistics()`` (call it when a debugger or monitor attaches, so that no training step waits for it).
numpy stays as the fallback when numba cannot be imported or compiled; it is said once, as a warning.
``MSDEBUG_STATISTICS_ENGINE=numpy`` chooses the fallback on purpose.
"""
from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager
from types import ModuleType, SimpleNamespace
from typing import Iterator

import numpy as np

from msdebug_hooks._log import get_logger
from msdebug_hooks.conditions._dtypes import bfloat16_to_float32, f32_at_least, f32_at_most, work_chunks, work_dtype

ENGINE_VARIABLE = "MSDEBUG_STATISTICS_ENGINE"
COMPILE_NOTICE_AFTER = 3.0   # seconds of loading after which the kernels are being compiled, not loaded: say so

_log = logging.getLogger("msdebug_hooks.conditions")
_lock = threading.Lock()
_kernels: ModuleType | None = None
_resolved = False
_forced: str | None = None  # tests: "numpy" or "compiled" for a block of code


def kernels() -> ModuleType | None:
    """The compiled kernels module, or None when the numpy fallback runs (numba missing or failing, or chosen)."""
    global _kernels, _resolved
    if _forced == "numpy":
        return None
    if not _resolved:
        with _lock:
            if not _resolved:
                _kernels = _load()
                _resolved = True
    if _kernels is None and _forced == "compiled":
        raise RuntimeError("the compiled statistics engine was required but numba is not available")
    return _kernels


def _load() -> ModuleType | None:
    choice = os.environ.get(ENGINE_VARIABLE, "").strip().lower()
    if choice == "numpy":
        _log.debug("watchpoint statistics: numpy's chunked pass (%s=numpy)", ENGINE_VARIABLE)
        return None
    # loading takes about a second; compiling (the first time on a machine, or after an upgrade) 20-30 s: say so
    # when it takes long, rather than leave a training script silent at the attach
    slow = threading.Timer(COMPILE_NOTICE_AFTER, _compile_notice)
    slow.daemon = True
    slow.start()
    try:
        from msdebug_hooks.conditions import _step_kernels as compiled   # the pass and the one-call kernels
    except Exception as exc:  # ImportError, or numba failing to compile / load on this platform
        _log.warning("watchpoint statistics run on numpy's chunked pass, 3-5x slower on large tensors: the compiled "
                     "engine is not available (%s: %s); install numba>=0.60 to get it", type(exc).__name__, exc)
        return None
    finally:
        slow.cancel()
    import numba
    _log.debug("watchpoint statistics: compiled single-pass kernels (numba %s)", numba.__version__)
    return compiled


def _compile_notice() -> None:
    """Said through the project's logger, which reaches stderr even without a logging configuration."""
    get_logger("statistics").info("compiling the watchpoint statistics kernels for this machine (numba, once: "
                                  "20-30 s; later runs load them from its disk cache in about a second)")


def engine_name() -> str:
    """"numba" or "numpy": the engine ``compute_statistics`` uses now."""
    return "numba" if kernels() is not None else "numpy"


def warm_up_statistics() -> str:
    """Compile, or load from numba's disk cache, every statistics kernel, so that no training step pays for it.

    Call it when a debugger, monitor or analyzer attaches (about 1 s with a warm disk cache, 10-20 s the very first
    time on a machine). Cheap once done (a flag check). Returns the engine that runs: "numba" or "numpy".
    """
    return engine_name()


@contextmanager
def forced_engine(name: str) -> Iterator[None]:
    """Run a block with "numpy" or "compiled" statistics (for tests comparing the two; not thread-safe)."""
    global _forced
    if name not in ("numpy", "compiled"):
        raise ValueError(f"engine={name!r}: expected 'numpy' or 'compiled'")
    before, _forced = _forced, name
    try:
        yield
    finally:
        _forced = before


# --- the driver -----------------------------------------------------------------------------------------------------

def pass_mode(k: ModuleType, needed: frozenset[str]) -> int:
    """The smallest block summary that covers ``needed`` (nan/inf counts come with every mode; the update ratio
    comes from the previous-value loop, whatever the mode)."""
    needed = needed - {"update_ratio"}
    if needed & {"mean", "sd", "positive_count", "negative_count"}:
        return k.MODE_FULL
    if not needed:
        return k.MODE_SPECIALS
    if needed <= {"max", "min"}:
        return k.MODE_EXTREMES
    if needed <= {"abs_mean", "zero_count"}:
        return k.MODE_ABS_ZERO
    return k.MODE_FULL


def native(a: np.ndarray) -> np.ndarray:
    """``a`` as an aligned, C-contiguous, native-byte-order array (the layout the kernels are compiled for)."""
    if a.dtype.isnative and a.flags.c_contiguous and a.flags.aligned:
        return a
    return np.ascontiguousarray(a, a.dtype.newbyteorder("="))


def int_view(a: np.ndarray) -> np.ndarray:
    return a.view(np.int32 if a.dtype.itemsize == 4 else np.int64)


def array_address(a: np.ndarray) -> int:
    """Where ``a``'s data starts: what the kernels that take arrays by address read, and what a parameter's storage
    address is compared with."""
    return a.__array_interface__["data"][0]


_START: dict[str, np.ndarray] = {}


def new_state(k: ModuleType, rows: int | None = None, n_counts: int = 0) -> tuple[np.ndarray, ...]:
    """(fstate, istate, counts) zeroed, with max = -inf and min = +inf; ``rows`` for one row per segment."""
    start = _START.get("f")
    if start is None:
        start = np.zeros(k.F_SLOTS)
        start[k.F_MAX], start[k.F_MIN] = -np.inf, np.inf
        _START["f"] = start
    if rows is None:
        return start.copy(), np.zeros(k.I_SLOTS, np.int64), np.zeros(n_counts, np.int64)
    fstate = np.empty((rows, k.F_SLOTS))
    fstate[:] = start      # (np.tile costs several times more for the few rows of a step)
    return fstate, np.zeros((rows, k.I_SLOTS), np.int64), np.zeros((rows, n_counts), np.int64)


def totals(k: ModuleType, fstate: np.ndarray, istate: np.ndarray, counts: np.ndarray,
           n_ranges: int) -> SimpleNamespace:
    """The running totals as ``stats._finish`` reads them (the fields of ``stats._Accumulator``)."""
    return totals_of(k, fstate.tolist(), istate.tolist(), counts.tolist(), n_ranges)


def totals_of(k: ModuleType, f: list[float], i: list[int], c: list[int], n_ranges: int) -> SimpleNamespace:
    n = i[k.I_N]
    return SimpleNamespace(
        n=n, nan=i[k.I_NAN], pinf=i[k.I_PINF], ninf=i[k.I_NINF], zero=i[k.I_ZERO], pos=i[k.I_POS],
        any_number=bool(i[k.I_ANY]), mx=f[k.F_MAX], mn=f[k.F_MIN], sum=f[k.F_SUM], mean=f[k.F_MEAN], m2=f[k.F_M2],
        abs_sum=f[k.F_ABS], diff_sum=f[k.F_DIFF], prev_abs_sum=f[k.F_PREV_ABS], in_range=c[:n_ranges],
        close=[count == n for count in c[n_ranges:]])


_ARRAYS: dict[tuple, np.ndarray] = {}  # a watchpoint set's bounds and tolerances, built once (read-only)


def range_bounds(ranges: tuple[tuple[float, float], ...], dtype: np.dtype) -> np.ndarray:
    """(R, 2) inclusive bounds in the work dtype such that comparing a work-dtype x to them is comparing double(x)
    to the double bounds (float32: the nearest float32 inside the range)."""
    key = ("bounds", ranges, dtype.char)
    found = _ARRAYS.get(key)
    if found is None:
        if dtype == np.float32:
            with np.errstate(over="ignore"):
                pairs = [(f32_at_least(a), f32_at_most(b)) for a, b in ranges]
            found = np.array(pairs, np.float32).reshape(len(ranges), 2)
        else:
            found = np.array(ranges, np.float64).reshape(len(ranges), 2)
        found = _ARRAYS[key] = _frozen(found)
    return found


def tolerance_array(tolerances: tuple[tuple[float, float], ...]) -> np.ndarray:
    key = ("tolerances", tolerances)
    found = _ARRAYS.get(key)
    if found is None:
        found = _ARRAYS[key] = _frozen(np.array(tolerances, np.float64).reshape(len(tolerances), 2))
    return found


def _frozen(a: np.ndarray) -> np.ndarray:
    if len(_ARRAYS) > 256:  # watchpoint sets change rarely; never let a stream of new ones grow this
        _ARRAYS.clear()
    a.flags.writeable = False
    return a


_NOWHERE = {np.dtype(np.float32): np.empty(0, np.float32), np.dtype(np.float64): np.empty(0, np.float64)}


def compiled_totals(k: ModuleType, flat: np.ndarray, kind: str, prev_flat: np.ndarray | None, prev_kind: str | None,
                    needed: frozenset[str], ranges: tuple[tuple[float, float], ...],
                    tolerances: tuple[tuple[float, float], ...], chunk: int,
                    keep_into: np.ndarray | None = None) -> tuple[SimpleNamespace, bool]:
    """(the totals ``stats._finish`` reads, whether ``flat`` was copied into ``keep_into``) from the compiled pass:
    ``compiled_state`` with its state arrays read out."""
    fstate, istate, counts, fused = compiled_state(k, flat, kind, prev_flat, prev_kind, needed, ranges, tolerances,
                                                   chunk, keep_into)
    return totals(k, fstate, istate, counts, len(ranges)), fused


def compiled_state(k: ModuleType, flat: np.ndarray, kind: str, prev_flat: np.ndarray | None, prev_kind: str | None,
                   needed: frozenset[str], ranges: tuple[tuple[float, float], ...],
                   tolerances: tuple[tuple[float, float], ...], chunk: int,
                   keep_into: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(fstate, istate, counts, whether ``flat`` was copied into ``keep_into``) from the compiled pass
    (``_kernels.accumulate``): float32/float64 tensors in one call, copied into ``keep_into`` (a writable flat array
    of their dtype) in the same pass; converted dtypes, and a previous value of another work dtype, one cache-sized
    chunk at a time (the caller copies then)."""
    work = work_dtype(kind)
    fstate, istate, counts = new_state(k, n_counts=len(ranges) + len(tolerances))
    mode = pass_mode(k, needed)
    paired = prev_flat is not None
    tol = tolerance_array(tolerances)
    if kind in ("f4", "f8") and (not paired or prev_kind == kind):
        x = native(flat)
        prev = native(prev_flat) if paired else x[:0]
    elif flat.shape[0] <= chunk and (not paired or work == np.float64 or work_dtype(prev_kind) == work):
        x = _as_work(flat, kind, work)  # one exact conversion (float64 holds every supported dtype exactly)
        prev = _as_work(prev_flat, prev_kind, work) if paired else x[:0]
    else:
        x = None
    if x is not None:
        fused = (keep_into is not None and keep_into.dtype == x.dtype and kind in ("f4", "f8")
                 and keep_into is native(keep_into))
        k.accumulate(x, int_view(x), prev, mode, paired, range_bounds(ranges, work), tol, fstate, istate, counts,
                     keep_into if fused else _NOWHERE[x.dtype])
        return fstate, istate, counts, fused
    if paired and work_dtype(prev_kind) != work:
        work = np.dtype(np.float64)  # both sides in float64, as the C++ compared them
    bounds = range_bounds(ranges, work)
    x_chunks = work_chunks(flat, kind, chunk, work_dtype(kind))
    p_chunks = work_chunks(prev_flat, prev_kind, chunk, work_dtype(prev_kind)) if paired else None
    for c in x_chunks:
        c = np.asarray(c, work)
        p = np.asarray(next(p_chunks), work) if p_chunks is not None else c[:0]
        k.accumulate(c, int_view(c), p, mode, paired, bounds, tol, fstate, istate, counts, _NOWHERE[work])
    return fstate, istate, counts, False


def _as_work(flat: np.ndarray, kind: str, work: np.dtype) -> np.ndarray:
    """A flat array of any kind converted exactly to the work dtype (bfloat16 arrives as raw words)."""
    if kind == "bf16":
        flat = bfloat16_to_float32(flat)
    return np.asarray(flat, work)
