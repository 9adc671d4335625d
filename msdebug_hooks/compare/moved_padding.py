"""Padding moved out of a window layer: a port that pads in a layer of its own (``nn.Pad``, ``ops.pad``) and then
slides an unpadded window computes what its padded reference layer computes, though the two layers' ``padding``
settings differ. The settings check compares the padding that takes effect, not the literal argument.

The rule, by shapes and values of the checked step (convolutions, max and average pooling):

* **moved**: the port layer's recorded input is larger than its reference layer's, on every spatial axis, by
  exactly the padding the reference layer adds and the port layer does not (``(before + after)`` of the reference
  minus the port's). Then a layer before it added that padding, and the padding setting alone is no finding.
* **its value**: read at the border of the port layer's recorded input, the rows and columns the reference pads
  (its split into before and after; a port that splits otherwise has real values there, so the border is not one
  constant and it stays a finding). Equal to the reference's padding:

  - a convolution (``padding_mode='zeros'``): when the border is zeros;
  - an average pooling: when the border is zeros and the reference counts its padding in the average
    (``count_include_pad=True``); with ``count_include_pad=False`` the port averages padding in where the
    reference does not, a finding;
  - a max pooling: the reference pads with -inf (a pad never wins); a constant border ``c`` never wins either
    while every value the layer pools is ``>= c`` (zeros after a ReLU). Judged on the reference layer's own input
    in the step, as the replay judges a layer (the port's layer on the reference's inputs): smallest ``>= c``,
    equal, said with that bound in a note (and, where the port's own input goes below ``c``, that this comes from
    a difference upstream); below ``c``, the border windows differ: a finding.

Without the recorded inputs (the settings read from two models alone, :func:`.port_conventions.check_pair`) nothing
is read as moved. A moved padding found equal is a note (:attr:`LayerInputs.notes`), never silence.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Optional

import numpy as np

from msdebug_hooks.compare.setting_rules import Reading


@dataclass
class LayerInputs:
    """What the checked step gave each layer: ``port_input(cell)``, ``reference_input(module)`` -> the layer's first
    recorded input (None when not recorded)."""

    port_input: Callable[[Any], Optional[np.ndarray]]
    reference_input: Callable[[Any], Optional[np.ndarray]]
    notes: list = field(default_factory=list)


_INPUTS: ContextVar[Optional[LayerInputs]] = ContextVar("layer_inputs", default=None)


@contextmanager
def layer_inputs(inputs: LayerInputs) -> Iterator[LayerInputs]:
    """Within the block, the settings check reads padding moved before a layer from ``inputs``."""
    token = _INPUTS.set(inputs)
    try:
        yield inputs
    finally:
        _INPUTS.reset(token)


@dataclass(frozen=True)
class Moved:
    """A padding a layer before the port layer adds: ``equal`` to the reference layer's or not, and why."""

    equal: bool
    text: str


def _moved_split(ours: Any, theirs: Any, port_shape: tuple, reference_shape: tuple) -> Optional[tuple]:
    """Per axis ``(before, after)`` the reference pads and the port layer does not, when the port's input is larger
    by exactly that on every spatial axis (and by something on one); None otherwise."""
    if not (isinstance(ours, tuple) and isinstance(theirs, tuple) and len(ours) == len(theirs)):
        return None
    nd = len(theirs)
    if len(port_shape) < nd or len(reference_shape) < nd or port_shape[:-nd] != reference_shape[:-nd]:
        return None
    split = tuple((tb - ob, ta - oa) for (ob, oa), (tb, ta) in zip(ours, theirs))
    grown = tuple(p - r for p, r in zip(port_shape[-nd:], reference_shape[-nd:]))
    if any(b < 0 or a < 0 for b, a in split) or grown != tuple(b + a for b, a in split) or not any(grown):
        return None
    return split


def _border(array: np.ndarray, split: tuple) -> tuple:
    """``(border values, inner values)`` of ``array`` for a padding ``split`` of its last ``len(split)`` axes."""
    nd = len(split)
    spatial = array.shape[-nd:]
    mask = np.zeros(spatial, dtype=bool)
    for axis, ((before, after), size) in enumerate(zip(split, spatial)):
        index = [slice(None)] * nd
        index[axis] = slice(0, before)
        mask[tuple(index)] = True
        index[axis] = slice(size - after, size)
        mask[tuple(index)] = True
    values = np.asarray(array, dtype=np.float64)
    return values[..., mask], values[..., ~mask]


def _judge(family: str, value: float, inner: np.ndarray, given: np.ndarray, theirs: Mapping[str, Reading],
           port: str) -> Moved:
    """Whether a constant ``value`` padded before the port layer equals the reference layer's own padding
    (``inner``: the port's own input inside the border; ``given``: what the reference layer was given)."""
    drop = f"drop that padding and pass {port}"
    if family == "max pooling":
        smallest = float(np.min(given)) if given.size else value
        if smallest < value:
            return Moved(False, f"PyTorch's max pooling pads with -inf and PyTorch's input to this layer has values "
                                f"below {value:g} (smallest {smallest:g}): the border windows differ: {drop}")
        own = float(np.min(inner)) if inner.size else value
        upstream = (f"; the port's own input to it goes below {value:g} (smallest {own:g}), PyTorch's does not: "
                    f"that comes from a difference upstream") if own < value else ""
        return Moved(True, f"equal to PyTorch's -inf padding while every value it pools is >= {value:g} (PyTorch's "
                           f"input to it in the step: smallest {smallest:g}); an input below {value:g} would make the "
                           f"border windows differ" + upstream)
    if value != 0.0:
        return Moved(False, f"PyTorch's {family} pads with zeros: {drop}")
    counted = theirs.get("count_include_pad")
    if family == "average pooling" and counted is not None and counted.meaning is False:
        return Moved(False, "PyTorch leaves its padding out of the average (count_include_pad=False), the port "
                            f"averages these zeros in: {drop}")
    how = "counted in the average as PyTorch's count_include_pad=True counts its own" if family == "average pooling" \
        else "as PyTorch's padding_mode='zeros'"
    return Moved(True, f"zeros, {how}")


def moved_padding(cell: Any, module: Any, family: str, ours: Reading, theirs: Mapping[str, Reading]) -> Optional[Moved]:
    """The padding a layer before ``cell`` adds in place of ``module``'s own, judged against it (see the module's
    rule); None when the step's inputs do not show one (or were not recorded): the padding then compares as set."""
    inputs = _INPUTS.get()
    reference = theirs.get("padding")
    if inputs is None or reference is None or family not in ("convolution", "max pooling", "average pooling"):
        return None
    array, given = inputs.port_input(cell), inputs.reference_input(module)
    if array is None or given is None:
        return None
    split = _moved_split(ours.meaning, reference.meaning, tuple(array.shape), tuple(given.shape))
    if split is None:
        return None
    grown = ", ".join(str(b + a) for b, a in split)
    where = (f"its input in the step is larger than PyTorch's by ({grown}) per spatial axis: a layer before it pads "
             f"{list(split)} (before, after) per axis")
    border, inner = _border(array, split)
    if border.size == 0 or not np.all(border == border.flat[0]):
        low, high = (float(np.min(border)), float(np.max(border))) if border.size else (0.0, 0.0)
        return Moved(False, f"{where}, but those border values are not one constant (from {low:g} to {high:g}): "
                            f"the port pads otherwise than PyTorch's {family}: pad {list(split)} with PyTorch's "
                            f"value, or pass {reference.port}")
    value = float(border.flat[0])
    verdict = _judge(family, value, inner, np.asarray(given, dtype=np.float64), theirs, reference.port)
    return Moved(verdict.equal, f"{where}, with {value:g}: {verdict.text}")


def add_note(text: str) -> None:
    """Keep ``text`` among the notes of the check in progress (none outside :func:`layer_inputs`)."""
    inputs = _INPUTS.get()
    if inputs is not None:
        inputs.notes.append(text)
