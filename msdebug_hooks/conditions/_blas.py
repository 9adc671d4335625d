"""Keep numpy's BLAS single-threaded while statistics run.

Why: the statistics call ``np.dot`` on 256 KB chunks. OpenBLAS splits a dot of more than 10 000 elements across
threads, and on a busy machine (a training job next door, a shared CI runner) waiting for the second thread costs
far more than the dot itself: checking a small network's step was several times slower with it. OpenBLAS >= 0.3.27
has ``openblas_set_num_threads_local``, which changes the count for the calling thread only, so we set it to 1
around our own work and restore it. If numpy's BLAS is not OpenBLAS or the symbol is missing, nothing is changed.
"""
from __future__ import annotations

import ctypes
import glob
import os
from contextlib import contextmanager
from typing import Any, Iterator

_setter: Any = None
_searched = False


def _find_setter() -> Any:
    global _setter, _searched
    if _searched:
        return _setter
    _searched = True
    try:
        import numpy as np
        libs_dir = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
        for path in sorted(glob.glob(os.path.join(libs_dir, "*openblas*"))):
            lib = ctypes.CDLL(path)  # already loaded by numpy: this returns the same library
            fn = getattr(lib, "openblas_set_num_threads_local", None)
            if fn is not None:
                fn.restype = ctypes.c_int
                fn.argtypes = [ctypes.c_int]
                _setter = fn
                break
    except (OSError, AttributeError, ImportError):
        _setter = None
    return _setter


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Run the body with numpy's OpenBLAS limited to the calling thread (no-op when not available)."""
    setter = _find_setter()
    if setter is None:
        yield
        return
    previous = setter(1)
    try:
        yield
    finally:
        setter(previous if previous > 0 else 0)
