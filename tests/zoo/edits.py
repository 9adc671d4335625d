"""Edits to built models, by layer type, after construction: how the zoo aligns a published port with its reference
and how it plants a bug, without touching either zoo's files.

MindSpore cells build their primitives (``ops.BatchNorm``, ``ops.LayerNorm``, ``ops.Conv2D``, ``ops.Dropout``) in
``__init__`` from their arguments, so changing an argument after construction means rebuilding those primitives: a
template cell of the same base type is built with the new arguments, and the cell adopts the template's primitives
and the changed attributes, keeping its own parameters (and so their names and values). Parameter-free cells
(activations, pooling) are replaced in their parent. Every edit names its layer by the MindSpore / PyTorch module
path, and an edit whose layer is missing or of another type raises, so a typo cannot turn a case into a no-op.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np


def cells(net: Any) -> dict:
    """Every sub-cell of a MindSpore network by its path (``cells_and_names``)."""
    return dict(net.cells_and_names())


def cell(net: Any, name: str, kind: Any = None) -> Any:
    found = cells(net).get(name)
    if found is None:
        raise KeyError(f"no layer {name!r} in {type(net).__name__}")
    if kind is not None and not isinstance(found, kind):
        raise TypeError(f"layer {name!r} is a {type(found).__name__}, not a {kind}")
    return found


def of_type(net: Any, kind: Any, where: Callable[[Any], bool] = lambda _: True) -> list:
    """The names of the sub-cells of ``net`` that are ``kind`` and satisfy ``where``, in creation order."""
    return [name for name, found in net.cells_and_names() if name and isinstance(found, kind) and where(found)]


def _adopt(target: Any, template: Any, names: Iterable[str]) -> None:
    """``target`` takes ``template``'s primitives and the attributes ``names`` (its parameters stay)."""
    from mindspore.ops import Primitive

    for key, value in vars(template).items():
        if isinstance(value, Primitive) or key in names:
            setattr(target, key, value)


def set_batchnorm(net: Any, name: str, *, eps: float = None, momentum: float = None) -> None:
    """A MindSpore BatchNorm's ``eps`` and/or ``momentum`` (MindSpore's meaning: the running value's weight)."""
    from mindspore import nn

    target = cell(net, name, nn.BatchNorm2d)
    eps = target.eps if eps is None else eps
    momentum = 1.0 - target.momentum if momentum is None else momentum
    _adopt(target, nn.BatchNorm2d(target.num_features, eps=eps, momentum=momentum), ("eps", "momentum"))


def set_layernorm(net: Any, name: str, epsilon: float) -> None:
    """A MindSpore LayerNorm's ``epsilon`` (subclasses that call ``self.layer_norm`` included)."""
    from mindspore import nn

    target = cell(net, name, nn.LayerNorm)
    template = nn.LayerNorm(tuple(target.normalized_shape), target.begin_norm_axis, target.begin_params_axis,
                            epsilon=epsilon)
    _adopt(target, template, ("epsilon",))


def set_gelu(net: Any, name: str, approximate: bool) -> None:
    """A MindSpore GELU's form: ``approximate=True`` is the tanh form, ``False`` the exact erf form."""
    from mindspore import nn

    _adopt(cell(net, name, nn.GELU), nn.GELU(approximate=approximate), ("approximate",))


def set_conv_padding(net: Any, name: str, pad_mode: str, padding: int = 0) -> None:
    """A MindSpore Conv2d's ``pad_mode`` / ``padding`` (its weight and bias stay)."""
    from mindspore import nn

    target = cell(net, name, nn.Conv2d)
    template = nn.Conv2d(target.in_channels, target.out_channels, target.kernel_size, target.stride,
                         pad_mode=pad_mode, padding=padding, dilation=target.dilation, group=target.group,
                         has_bias=target.has_bias)
    _adopt(target, template, ("pad_mode", "padding"))


def set_dropout(net: Any, name: str, p: float) -> None:
    """A MindSpore Dropout's ``p`` (0 switches it off)."""
    from mindspore import nn

    target = cell(net, name, nn.Dropout)
    template = nn.Dropout(p=p if p > 0 else 0.5)
    _adopt(target, template, ())
    target.p, target.keep_prob = p, 1.0 - p


def replace(net: Any, name: str, new: Any) -> None:
    """Put cell ``new`` in place of the parameter-free layer ``name`` (an activation, a pooling)."""
    from mindspore import nn

    old = cell(net, name)
    if old.trainable_params() or old.untrainable_params():
        raise ValueError(f"{name!r} holds parameters: edit it, do not replace it")
    parent_name, _, child = name.rpartition(".")
    parent = cell(net, parent_name) if parent_name else net
    if isinstance(parent, nn.SequentialCell):   # its construct runs cell_list, which __setitem__ keeps in step
        parent[list(parent.name_cells()).index(child)] = new
    else:
        setattr(parent, child, new)


def mindspore_params(net: Any) -> dict:
    """``{parameter name (as cells_and_names spells its cell): Parameter}``; mindcv networks built from CellLists
    can name a parameter differently from its cell's path, so edits address parameters through their cells."""
    found = {}
    for path, owner in net.cells_and_names():
        for key, param in owner.parameters_and_names(expand=False):
            found[f"{path}.{key}" if path else key] = param
    return found


def edit_weight(net: Any, name: str, how: Callable[[np.ndarray], np.ndarray]) -> None:
    """Replace MindSpore weight ``name`` (a cell path plus the parameter's attribute) by ``how(value)``."""
    import mindspore as ms

    params = mindspore_params(net)
    if name not in params:
        raise KeyError(f"no parameter {name!r}")
    value = params[name].asnumpy()
    new = np.ascontiguousarray(how(value)).astype(value.dtype)
    if new.shape != value.shape:
        raise ValueError(f"{name}: the edit changes its shape {value.shape} -> {new.shape}")
    params[name].set_data(ms.Tensor(new))


def swap_weights(net: Any, first: str, second: str) -> None:
    """Exchange two MindSpore weights of one shape (a converter that put each under the other's name)."""
    import mindspore as ms

    params = mindspore_params(net)
    a, b = params[first].asnumpy(), params[second].asnumpy()
    if a.shape != b.shape:
        raise ValueError(f"swap: {first} {a.shape} and {second} {b.shape} differ in shape")
    params[first].set_data(ms.Tensor(b.copy()))
    params[second].set_data(ms.Tensor(a.copy()))


def torch_module(model: Any, name: str, kind: Any = None) -> Any:
    found = dict(model.named_modules()).get(name)
    if found is None:
        raise KeyError(f"no module {name!r} in {type(model).__name__}")
    if kind is not None and not isinstance(found, kind):
        raise TypeError(f"module {name!r} is a {type(found).__name__}, not a {kind}")
    return found
