"""The pieces every setting rule of the port check is built from: what a layer is, and one setting read from it.

A layer is what its class *is*, not what it is called: :func:`builtin_class` walks the class's method resolution
order to the first class of the framework's ``nn`` package that a rule knows, so timm's ``LayerNorm`` (a subclass
of ``torch.nn.LayerNorm``) and mindcv's ``Dropout`` (a subclass of ``mindspore.nn.Dropout``) are compared as the
layers they extend. A :class:`Reading` is one setting as a framework stores it (``shown``) and what it means
(``meaning``, in PyTorch's terms, so that the two sides compare by meaning, not by spelling: MindSpore's BatchNorm
``momentum=0.9`` means PyTorch's ``0.1``). The PyTorch reading also says what to pass to MindSpore to get its
meaning (``port``). Plain Python: importing this module imports neither MindSpore nor PyTorch.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

#: the packages a layer's class must come from to count as a built-in layer
PACKAGES = {"mindspore": ("mindspore.nn.",), "pytorch": ("torch.nn.",)}


@dataclass(frozen=True)
class Reading:
    """One setting of one layer: what it means (PyTorch's sense), how the framework spells it, and (PyTorch's side)
    the MindSpore argument that gives the same meaning."""

    meaning: Any
    shown: str
    port: str = ""


@dataclass(frozen=True)
class Family:
    """A kind of layer the port check reads settings from: its classes in each framework and one reader per
    framework, ``read(layer, kind) -> {setting: Reading}`` (``kind``: the built-in class the layer is).
    ``notes``: why a setting tends to differ (a default that differs), added to its finding."""

    name: str
    mindspore: tuple
    pytorch: tuple
    read_mindspore: Callable[[Any, int], dict]
    read_pytorch: Callable[[Any, int], dict]
    notes: tuple = ()   # (setting, note) pairs

    def note(self, setting: str) -> str:
        return next((text for key, text in self.notes if key == setting), "")


def builtin_class(layer: Any, framework: str, names: frozenset) -> Optional[type]:
    """The first class in ``type(layer)``'s method resolution order that belongs to the framework's ``nn`` package
    and is named in ``names``: what the layer is (``isinstance``), subclasses included. None for anything else."""
    prefixes = PACKAGES[framework]
    for cls in type(layer).__mro__:
        if cls.__name__ in names and cls.__module__.startswith(prefixes):
            return cls
    return None


def spatial_dims(class_name: str) -> int:
    """1, 2 or 3 from a class name ending in ``1d``/``2d``/``3d`` (or MindSpore's ``Conv2dTranspose``); else 0."""
    found = re.search(r"([123])d(?:$|Transpose)", class_name)
    return int(found.group(1)) if found else 0


def same_value(a: Any, b: Any) -> bool:
    """Equal meanings: numbers to a relative 1e-6 (float32 storage of a float64 argument), sequences item by item."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-12)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return a == b


def as_tuple(value: Any, nd: int) -> Optional[tuple]:
    """An int or a sequence as an ``nd``-tuple of ints: an int repeated; a longer sequence's last ``nd`` items
    (MindSpore's 1-D layers keep a leading unit axis: Conv1d's kernel ``(1, k)``); None when not readable."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (int(value),) * nd
    if isinstance(value, (tuple, list)) and len(value) >= nd and all(isinstance(v, (int, float)) for v in value):
        return tuple(int(v) for v in value[len(value) - nd:])
    return None


def number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def fmt(value: Any) -> str:
    """A value as a Python argument would be written: ``1e-05``, ``(2, 2)``, ``'tanh'``."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple) and len(set(value)) == 1 and value and not isinstance(value[0], tuple):
        return fmt(value[0])
    return repr(value)


def primitive_attrs(cell: Any, attribute: str) -> dict:
    """The attributes of a MindSpore cell's primitive (``cell.max_pool.attrs``): where MindSpore 2.10's pooling
    cells keep ``ceil_mode``, the padding and ``count_include_pad`` instead of on the cell."""
    primitive = getattr(cell, attribute, None)
    attrs = getattr(primitive, "attrs", None)
    return dict(attrs) if isinstance(attrs, dict) else {}
