"""Keep buffers: the arrays a check copies each tensor into for the next step (``keep_previous`` / ``keep_into``).

Why a module of its own: ``compute_statistics``, the batch and the prepared layouts all accept keep buffers, and
all must refuse the same ones, before anything is computed or copied, with the same words.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def kept_view(value: Any, previous: Any, field_name: str = "previous") -> np.ndarray:
    """``previous`` as a flat view to copy ``value`` into (``keep_previous=True``): it must be a writable,
    C-contiguous numpy array of value's dtype and element count; anything else is a ``ConfigError`` saying so."""
    arr = np.asarray(value)
    fits = (isinstance(previous, np.ndarray) and previous.flags.writeable and previous.flags.c_contiguous
            and previous.dtype == arr.dtype and previous.size == arr.size)
    if not fits:
        from msdebug_hooks.errors import ConfigError
        got = (f"{'read-only ' if not previous.flags.writeable else ''}{previous.dtype} array of {previous.size}"
               if isinstance(previous, np.ndarray) else type(previous).__name__)
        raise ConfigError(field_name, got, f"with keep_previous=True, a writable C-contiguous {arr.dtype} array of "
                                           f"{arr.size} elements to copy the value into")
    return previous.reshape(-1)


def kept_views(values: Sequence[Any], targets: Sequence[Any] | None, field_name: str) -> list[np.ndarray | None]:
    """``kept_view`` of each value into its target, named ``field_name[i]`` (None where the target is None, or
    everywhere without targets): every buffer is checked before any is filled."""
    if targets is None:
        return [None] * len(values)
    return [None if t is None else kept_view(v, t, f"{field_name}[{i}]")
            for i, (v, t) in enumerate(zip(values, targets))]
