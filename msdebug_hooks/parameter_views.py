"""The parameters' values as numpy arrays every step, without paying ``asnumpy`` for each of them every step.

``Parameter.asnumpy()`` builds a new array object each time in MindSpore 2.10, a per-parameter cost that shows in a
small network's short step. On the CPU the array it returns is a view of the parameter's own storage, which the
optimizer updates in place, so the view stays right as long as the parameter keeps that storage.
``Tensor.data_ptr()`` (cheap; ``_data_ptr()`` before it was public) says where the storage is now: while it equals
the view's address the view is reused; when it moved (``set_data``, a reloaded checkpoint) or is elsewhere altogether
(GPU/Ascend memory: there ``asnumpy`` copies to the host) the value is read again with ``asnumpy``.

A view needs no synchronisation: when a CPU training step's end hooks run, MindSpore has finished the step's kernels
(checked on LeNet and the 25 M-parameter transformer: copies of the views taken first at every step end equal what
``asnumpy`` returns right after).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from msdebug_hooks.conditions._engine import array_address


class ParameterViews:
    """Current values of MindSpore parameters as numpy arrays (read-only use): a fixed list (``arrays``) or any
    parameter asked for by object (``value``), each view reused while its parameter keeps its storage."""

    def __init__(self, params: Sequence[Any] = (), *,
                 read: Callable[[Any], np.ndarray] = lambda param: param.asnumpy()) -> None:
        self._params = list(params)
        self._read = read
        self._cached: dict[int, tuple[Any, np.ndarray, int]] = {}   # id(param) -> (param, view, view address)
        # per list of parameters (by their ids; ``_cached`` holds them): (their views' addresses, the views)
        self._lists: dict[tuple[int, ...], tuple[list[int], list[np.ndarray]]] = {}
        self.values(self._params)

    def value(self, param: Any) -> np.ndarray:
        """The parameter's value now: the cached view if its storage did not move, else a fresh read (``read``:
        ``asnumpy``, or the caller's, e.g. one that converts bfloat16)."""
        cached = self._cached.get(id(param))
        if cached is not None and cached[0] is param and _storage_address(param) == cached[2]:
            return cached[1]
        view = self._read(param)
        self._cached[id(param)] = (param, view, array_address(view))
        return view

    def arrays(self) -> list[np.ndarray]:
        """The values of the list given at construction, in its order."""
        return self.values(self._params)

    def values(self, params: Sequence[Any]) -> list[np.ndarray]:
        """The values of ``params`` in order: the same list object while none of their storages moved, so one
        address per parameter is all a step costs. Do not change the list."""
        key = tuple(map(id, params))
        known = self._lists.get(key)
        if known is None or [_storage_address(param) for param in params] != known[0]:
            views = [self.value(param) for param in params]
            known = self._lists[key] = ([array_address(view) for view in views], views)
        return known[1]


def _storage_address(param: Any) -> int:
    """Where the parameter's data lives now; -1 when MindSpore does not say (then every read is fresh)."""
    try:
        return param.data_ptr()
    except (AttributeError, RuntimeError, TypeError, ValueError):
        try:
            return int(param._data_ptr())
        except (AttributeError, RuntimeError, TypeError, ValueError):
            return -1
