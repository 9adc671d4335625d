"""Where a MindSpore weight that differs from its PyTorch partner came from: the converter's mistake, named.

With ``copy_weights=False`` (``--keep-weights``) the port check checks weights your own converter loaded; when one
differs, its value is looked for among PyTorch's tensors, by value, in three forms a conversion produces by mistake:

* **transposed**: the partner with its two axes swapped (a 2-D weight), or a kernel with its first two (output and
  input channel) axes swapped;
* **flipped**: the partner reversed along one or more of its spatial (kernel) axes, axis 2 onwards of a
  convolution's ``[out, in, k...]`` (a correlation kernel turned into a convolution kernel, or the reverse);
* **swapped**: another PyTorch tensor of the same size (two weights exchanged), as it is or transposed.

Values are compared after the layout table's reshape (:func:`.layouts.one_layout`: Conv1d's unit axis) to 1e-6
relative. A constant (a fresh bias) proves nothing and is never traced.
"""
from __future__ import annotations

from itertools import combinations
from typing import Mapping, Optional

import numpy as np

from msdebug_hooks.compare.layouts import one_layout


def _same(value: np.ndarray, candidate: np.ndarray) -> bool:
    a, b, _ = one_layout(np.asarray(value), candidate)
    return a.shape == b.shape and np.allclose(a, b, rtol=1e-6, atol=1e-8)


def _spatial_flips(tensor: np.ndarray) -> list:
    """``(axes, flipped tensor)`` for every non-empty set of spatial axes (2 onwards, longer than 1)."""
    axes = [axis for axis in range(2, tensor.ndim) if tensor.shape[axis] > 1]
    return [(chosen, np.flip(tensor, axis=chosen)) for count in range(1, len(axes) + 1)
            for chosen in combinations(axes, count)]


def _transposed(tensor: np.ndarray) -> Optional[np.ndarray]:
    if tensor.ndim == 2:
        return tensor.T
    if tensor.ndim > 2 and tensor.shape[0] == tensor.shape[1]:
        return np.swapaxes(tensor, 0, 1)
    return None


def _axes_text(axes: tuple) -> str:
    listed = ", ".join(str(axis) for axis in axes)
    return f"axis {listed} (the kernel axis)" if len(axes) == 1 else f"axes {listed} (the kernel axes)"


def weight_origin(value: np.ndarray, state: Mapping[str, np.ndarray], torch_name: str) -> Optional[str]:
    """Where a MindSpore weight that differs from PyTorch's ``torch_name`` came from: that tensor transposed or
    flipped along kernel axes, or another PyTorch tensor (two weights swapped by a converter). None when its value
    is found nowhere."""
    own = np.asarray(state[torch_name])
    value = np.asarray(value)
    if np.ptp(value) == 0:
        return None  # a constant (a fresh bias) proves nothing
    swapped = _transposed(own)
    if swapped is not None and _same(value, swapped):
        what = "transposed" if own.ndim == 2 else "transposed (output and input channel axes swapped)"
        return f"its value is PyTorch's {torch_name} {what}: the conversion transposed it"
    for axes, flipped in _spatial_flips(own):
        if _same(value, flipped):
            return (f"its value is PyTorch's {torch_name} flipped along {_axes_text(axes)}: the conversion "
                    f"reversed it")
    for name, candidate in state.items():
        if name != torch_name and np.size(candidate) == own.size:
            candidate = np.asarray(candidate)
            if _same(value, candidate):
                return f"its value is PyTorch's {name}: the conversion put that tensor under {torch_name}'s name"
            if candidate.ndim == 2 and _same(value, candidate.T):
                return f"its value is PyTorch's {name} transposed"
    return None


__all__ = ["weight_origin"]
