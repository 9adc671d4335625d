"""Layer layouts between MindSpore 2.10 and PyTorch: one table, used by every comparison tool.

For each layer people port, :data:`LAYOUTS` holds what differs between ``mindspore.nn`` and ``torch.nn``: the
parameter names, the shape transform between their layouts, the conventions a port must translate (BatchNorm's
momentum, defaults that differ) and what the layer returns. The facts come from MindSpore 2.10's own sources
(``mindspore/nn/layer/*.py``: the ``Parameter`` each cell creates, its shape, its ``construct``) and from PyTorch's
``state_dict`` of the same layer. Everything else derives from it: the name map of
:mod:`msdebug_hooks.compare.naming` (``convert_torch_state``, ``canonical_name``), the layout transform
compare-weights applies before comparing values, the layers the recorders treat as one layer, and the naming table
of ``docs/compare-pytorch.md`` (written by :mod:`msdebug_hooks.compare.layout_docs`).

numpy only: importing this module imports neither MindSpore nor PyTorch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

#: the values are stored the same way in both frameworks
SAME = "same"
#: MindSpore stores a unit axis at position 2 that PyTorch has not: ``[a, b, 1, k]`` <-> ``[a, b, k]``
#: (MindSpore 2.10's Conv1d and Conv1dTranspose are Conv2D on ``[N, C, 1, L]`` with a ``(1, k)`` kernel)
UNIT_AXIS_2 = "unit axis 2"


@dataclass(frozen=True)
class ParamRule:
    """One parameter of a layer: its name in each framework (relative to the layer; ``{k}`` stands for the layer
    index and direction suffix of recurrent layers, ``0``, ``1_reverse``, ...), its shape, the transform between
    the two layouts and, for a MindSpore parameter PyTorch may not have, the value it starts from."""

    mindspore: str
    pytorch: str
    shape: str
    transform: str = SAME
    default: Optional[str] = None  # "ones" / "zeros": the MindSpore value when the PyTorch layer has no such one

    def matches(self, relative_name: str) -> Optional[str]:
        """The PyTorch name of MindSpore's ``relative_name`` when this rule covers it, else None."""
        if "{k}" not in self.mindspore:
            return self.pytorch if relative_name == self.mindspore else None
        pattern = re.escape(self.mindspore).replace(r"\{k\}", r"(\d+(?:_reverse)?)")
        found = re.fullmatch(pattern, relative_name)
        return self.pytorch.replace("{k}", found.group(1)) if found else None

    def covers(self, framework: str, relative_name: str) -> bool:
        """Whether this rule names ``relative_name`` in ``framework`` (``"mindspore"`` or ``"pytorch"``)."""
        own = self.mindspore if framework == "mindspore" else self.pytorch
        return re.fullmatch(re.escape(own).replace(r"\{k\}", r"\d+(?:_reverse)?"), relative_name) is not None


@dataclass(frozen=True)
class LayerLayout:
    """One layer type. ``atomic``: MindSpore builds it from private inner cells (LSTM's ``rnn``), which the layer
    recorders do not record: the layer itself is recorded, as PyTorch's module is."""

    layer: str
    mindspore: tuple
    pytorch: tuple
    params: tuple
    returns: str
    conventions: tuple = ()
    atomic: bool = False


_W, _B = "weight", "bias"
_CONV_PAD = ("MindSpore pads with `pad_mode='same'` by default and PyTorch with `padding=0`: port "
             "`padding=p` as `pad_mode='pad', padding=p`")
_CONV_BIAS = "`has_bias` defaults to False in MindSpore, `bias` to True in PyTorch; `group` is PyTorch's `groups`"
_BN = (ParamRule("gamma", _W, "[C]"), ParamRule("beta", _B, "[C]"),
       ParamRule("moving_mean", "running_mean", "[C]"), ParamRule("moving_variance", "running_var", "[C]"))
_BN_CONVENTIONS = ("`momentum` is 1 - PyTorch's: MindSpore's weighs the running value, PyTorch's the new batch "
                   "(PyTorch 0.1 is MindSpore 0.9, the default)",
                   "PyTorch's `num_batches_tracked` has no MindSpore peer; both keep the unbiased batch variance",
                   "`use_batch_statistics` (None: batch statistics in training) is `track_running_stats`'s role")
_RNN_PARAMS = (ParamRule("weight_ih_l{k}", "weight_ih_l{k}", "[G*H, input] (layer 0), [G*H, D*H] (deeper)"),
               ParamRule("weight_hh_l{k}", "weight_hh_l{k}", "[G*H, H]"),
               ParamRule("bias_ih_l{k}", "bias_ih_l{k}", "[G*H]"), ParamRule("bias_hh_l{k}", "bias_hh_l{k}", "[G*H]"))
_RNN_RETURNS = ("`(output, h_n)`: output `[B, T, D*H]` with `batch_first=True`, else `[T, B, D*H]`; h_n "
                "`[layers*D, B, H]` in both cases")
_RNN_COMMON = ("names `weight_ih_l{k}`, ... with `_reverse` for the second direction, as in PyTorch; "
               "`has_bias` is PyTorch's `bias`",
               "MindSpore's third input `seq_length` plays PyTorch's packed sequences' role")


def _conv(layer: str, ms_name: str, torch_name: str, dims: str, transposed: bool = False,
          unit_axis: bool = False) -> LayerLayout:
    channels = "[in, out/groups" if transposed else "[out, in/groups"
    shape = f"{channels}, 1, k] vs {channels}, k]" if unit_axis else f"{channels}, {dims}]"
    conventions = (_CONV_PAD, _CONV_BIAS)
    if unit_axis:
        conventions += (f"MindSpore 2.10's {ms_name} runs the 2-D kernel over `[N, C, 1, L]` with a `(1, k)` "
                        f"kernel: its weight has the unit axis 2 PyTorch's lacks (a value-preserving reshape)",)
    return LayerLayout(layer, (ms_name,), (torch_name,),
                       (ParamRule(_W, _W, shape, UNIT_AXIS_2 if unit_axis else SAME), ParamRule(_B, _B, "[out]")),
                       "one tensor, `[N, C_out, ...]` in both", conventions)


_ACTIVATIONS = (
    ("ReLU", "ReLU", ""), ("ReLU6", "ReLU6", ""), ("Sigmoid", "Sigmoid", ""), ("Tanh", "Tanh", ""),
    ("SiLU", "SiLU", ""), ("Mish", "Mish", ""), ("Softsign", "Softsign", ""), ("LogSigmoid", "LogSigmoid", ""),
    ("Tanhshrink", "Tanhshrink", ""), ("ELU", "ELU", "`alpha` as in PyTorch (1.0)"),
    ("CELU", "CELU", "`alpha` as in PyTorch (1.0)"), ("SeLU", "SELU", ""),
    ("HSwish", "Hardswish", ""), ("HSigmoid", "Hardsigmoid", ""),
    ("HShrink", "Hardshrink", "`lambd` as in PyTorch"), ("SoftShrink", "Softshrink", "`lambd` as in PyTorch"),
    ("Hardtanh", "Hardtanh", "`min_val`, `max_val` as in PyTorch"),
    ("LeakyReLU", "LeakyReLU", "`alpha` defaults to 0.2, PyTorch's `negative_slope` to 0.01: pass it"),
    ("GELU", "GELU", "`approximate=True` (tanh) is MindSpore's default, `approximate='none'` PyTorch's: port "
                     "PyTorch's default as `approximate=False`"),
    ("Softmax", "Softmax", "`axis` (default -1) is PyTorch's `dim`"),
    ("LogSoftmax", "LogSoftmax", "`axis` (default -1) is PyTorch's `dim`"),
    ("Softmin", "Softmin", "`axis` (default -1) is PyTorch's `dim`"),
    ("GLU", "GLU", "`axis` (default -1) is PyTorch's `dim`"),
)

LAYOUTS: tuple = (
    LayerLayout("Dense / Linear", ("Dense",), ("Linear",),
                (ParamRule(_W, _W, "[out, in]"), ParamRule(_B, _B, "[out]")), "one tensor `[..., out]`",
                ("`activation=` fuses an activation PyTorch's Linear has not: it runs as the child cell "
                 "`<name>.activation` and the layer's output is after it",)),
    _conv("Conv1d", "Conv1d", "Conv1d", "k", unit_axis=True),
    _conv("Conv2d", "Conv2d", "Conv2d", "kh, kw"),
    _conv("Conv3d", "Conv3d", "Conv3d", "kd, kh, kw"),
    _conv("ConvTranspose1d", "Conv1dTranspose", "ConvTranspose1d", "k", transposed=True, unit_axis=True),
    _conv("ConvTranspose2d", "Conv2dTranspose", "ConvTranspose2d", "kh, kw", transposed=True),
    _conv("ConvTranspose3d", "Conv3dTranspose", "ConvTranspose3d", "kd, kh, kw", transposed=True),
    LayerLayout("Embedding", ("Embedding",), ("Embedding",), (ParamRule("embedding_table", _W, "[num, dim]"),),
                "one tensor `[..., dim]`",
                ("`vocab_size`, `embedding_size` are `num_embeddings`, `embedding_dim`",
                 "MindSpore's `padding_idx` only zeroes that row at creation; it still gets gradients "
                 "(PyTorch's gets none)")),
    LayerLayout("BatchNorm1d/2d", ("BatchNorm1d", "BatchNorm2d"), ("BatchNorm1d", "BatchNorm2d"), _BN,
                "one tensor, the input's shape", _BN_CONVENTIONS),
    LayerLayout("BatchNorm3d", ("BatchNorm3d",), ("BatchNorm3d",),
                tuple(ParamRule(f"bn2d.{rule.mindspore}", rule.pytorch, rule.shape) for rule in _BN),
                "one tensor, the input's shape",
                ("MindSpore 2.10's BatchNorm3d holds a BatchNorm2d named `bn2d`: its parameters are "
                 "`<name>.bn2d.gamma`, ...",) + _BN_CONVENTIONS, atomic=True),
    LayerLayout("LayerNorm", ("LayerNorm",), ("LayerNorm",),
                (ParamRule("gamma", _W, "normalized_shape"), ParamRule("beta", _B, "normalized_shape")),
                "one tensor, the input's shape",
                ("`epsilon` defaults to 1e-7, PyTorch's `eps` to 1e-5: pass it",
                 "normalizing over the last n > 1 axes of a rank-r input needs `begin_norm_axis=r-n, "
                 "begin_params_axis=r-n` (the default -1 is the last axis; MindSpore 2.10 refuses other negative "
                 "values)")),
    LayerLayout("GroupNorm", ("GroupNorm",), ("GroupNorm",),
                (ParamRule("gamma", _W, "[C]"), ParamRule("beta", _B, "[C]")), "one tensor, the input's shape"),
    LayerLayout("InstanceNorm1d/2d/3d", ("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"),
                ("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"),
                tuple(ParamRule(rule.mindspore, rule.pytorch, rule.shape, default=default)
                      for rule, default in zip(_BN, ("ones", "zeros", "zeros", "ones"))),
                "one tensor, the input's shape",
                ("MindSpore always has `gamma`, `beta` and the running statistics; PyTorch has `weight`, `bias` "
                 "only with `affine=True` and the statistics only with `track_running_stats=True` (both default "
                 "False): without them the MindSpore parameters keep ones / zeros",
                 "`momentum` weighs the running value (MindSpore's docstring), 1 - PyTorch's",
                 "MindSpore 2.10 has no CPU kernel for InstanceNorm (GPU and Ascend only)")),
    LayerLayout("LSTM", ("LSTM",), ("LSTM",), _RNN_PARAMS,
                "`(output, (h_n, c_n))`: output `[B, T, D*H]` with `batch_first=True`, else `[T, B, D*H]`; h_n "
                "and c_n `[layers*D, B, H]` in both cases",
                ("G = 4, gates i, f, g, o as stored in both; CPU and GPU kernels take them so, Ascend's "
                 "DynamicRNN is fed i, g, f, o by the cell (checkpoints are the same)",
                 "CPU kernels receive `bias_ih + bias_hh` summed (GPU both, Ascend summed per gate): only the sum "
                 "acts",) + _RNN_COMMON, atomic=True),
    LayerLayout("GRU", ("GRU",), ("GRU",), _RNN_PARAMS, _RNN_RETURNS,
                ("G = 3, gates r, z, n on every backend (Ascend's DynamicGRUV2 with `gate_order='rzh'`); "
                 "`bias_hh`'s n part stays inside the reset gate, so the biases do not sum",) + _RNN_COMMON,
                atomic=True),
    LayerLayout("RNN", ("RNN",), ("RNN",), _RNN_PARAMS, _RNN_RETURNS,
                ("G = 1; `nonlinearity` 'tanh' or 'relu' as in PyTorch",) + _RNN_COMMON, atomic=True),
    LayerLayout("MultiheadAttention", ("MultiheadAttention",), ("MultiheadAttention",),
                (ParamRule("in_proj_weight", "in_proj_weight", "[3E, E] (q, k, v stacked; kdim = vdim = E)"),
                 ParamRule("q_proj_weight", "q_proj_weight", "[E, E] (separate projections, kdim or vdim != E)"),
                 ParamRule("k_proj_weight", "k_proj_weight", "[E, kdim]"),
                 ParamRule("v_proj_weight", "v_proj_weight", "[E, vdim]"),
                 ParamRule("in_proj_bias", "in_proj_bias", "[3E]"),
                 ParamRule("out_proj.weight", "out_proj.weight", "[E, E]"),
                 ParamRule("out_proj.bias", "out_proj.bias", "[E]"),
                 ParamRule("bias_k", "bias_k", "[1, 1, E] (add_bias_kv)"),
                 ParamRule("bias_v", "bias_v", "[1, 1, E] (add_bias_kv)")),
                "`(attn_output, attn_weights)`; with `need_weights=False` MindSpore returns `(attn_output,)`, "
                "PyTorch `(attn_output, None)`; `[T, B, E]`, or `[B, T, E]` with `batch_first=True`",
                ("`has_bias` is PyTorch's `bias`; the weights are averaged over heads unless "
                 "`average_attn_weights=False`, in both",
                 "`out_proj` is a child cell that is never called: the layer is recorded as a whole"),
                atomic=True),
    LayerLayout("PReLU", ("PReLU",), ("PReLU",), (ParamRule("w", _W, "[channel]"),), "one tensor, the input's shape",
                ("`channel` (default 1) is `num_parameters`, `w` (0.25) is `init`",)),
) + tuple(LayerLayout(ms_name if ms_name == torch_name else f"{ms_name} / {torch_name}", (ms_name,), (torch_name,),
                      (), "one tensor, the input's shape", (note,) if note else ())
          for ms_name, torch_name, note in _ACTIVATIONS)


def layout_of(framework: str, class_name: str) -> Optional[LayerLayout]:
    """The table's entry for a class of ``mindspore.nn`` (``framework="mindspore"``) or ``torch.nn``."""
    for layout in LAYOUTS:
        if class_name in (layout.mindspore if framework == "mindspore" else layout.pytorch):
            return layout
    return None


def layout_for(framework: str, layer: Any) -> Optional[LayerLayout]:
    """The table's entry for a layer object, subclasses included: the first class of its MRO that belongs to the
    framework's ``nn`` package and is in the table (timm's ``BatchNormAct2d`` is a ``torch.nn.BatchNorm2d``)."""
    package = "mindspore.nn." if framework == "mindspore" else "torch.nn."
    for klass in type(layer).__mro__:
        if klass.__module__.startswith(package):
            layout = layout_of(framework, klass.__name__)
            if layout is not None:
                return layout
    return None


def is_atomic(framework: str, cell: Any) -> bool:
    """True for a built-in layer whose children are its own business: recorded as one layer, children not.

    A class of the table marked ``atomic`` (MindSpore's LSTM/GRU/RNN, BatchNorm3d, MultiheadAttention; PyTorch's
    MultiheadAttention), or any built-in cell of the framework's ``nn`` package holding a private child class
    (a name starting with ``_``, like MindSpore's ``_DynamicLSTMCPUGPU``)."""
    cls = type(cell)
    package = "mindspore.nn." if framework == "mindspore" else "torch.nn."
    if not cls.__module__.startswith(package):
        return False
    layout = layout_of(framework, cls.__name__)
    if layout is not None and layout.atomic:
        return True
    children = cell.cells() if hasattr(cell, "cells") else cell.children() if hasattr(cell, "children") else ()
    return any(type(child).__name__.startswith("_") for child in children)


# --- names ------------------------------------------------------------------------------------------------------
def mindspore_to_pytorch_suffix() -> dict:
    """Last name part in MindSpore -> in PyTorch, wherever the table's names differ (``gamma`` -> ``weight``)."""
    suffixes: dict = {}
    for layout in LAYOUTS:
        for rule in layout.params:
            last_ms, last_torch = rule.mindspore.rpartition(".")[2], rule.pytorch.rpartition(".")[2]
            if last_ms != last_torch:
                suffixes.setdefault(last_ms, last_torch)
    return suffixes


def inner_path_segments() -> dict:
    """Path parts MindSpore puts between a layer and its parameters where PyTorch puts none (``bn2d`` of
    BatchNorm3d) -> the MindSpore last parts that follow them."""
    inner: dict = {}
    for layout in LAYOUTS:
        for rule in layout.params:
            head, _, last = rule.mindspore.rpartition(".")
            if head and not rule.pytorch.startswith(head + "."):
                inner.setdefault(head, set()).add(last)
    return {head: frozenset(lasts) for head, lasts in inner.items()}


_SUFFIX = mindspore_to_pytorch_suffix()
_INNER = inner_path_segments()


def pytorch_style_name(name: str) -> str:
    """A MindSpore parameter name spelled as PyTorch spells it, by the table: MindSpore's last parts renamed
    (``bn1.gamma`` -> ``bn1.weight``, PReLU's ``p.w`` -> ``p.weight``) and MindSpore's inner path parts dropped
    (BatchNorm3d's ``bn3.bn2d.gamma`` -> ``bn3.weight``). From the name alone: a custom parameter that happens to be
    called ``w`` or ``gamma`` is renamed too, so a matcher should try the name as written first."""
    parts = name.split(".")
    if len(parts) >= 2 and parts[-1] in _INNER.get(parts[-2], ()):
        del parts[-2]
    parts[-1] = _SUFFIX.get(parts[-1], parts[-1])
    return ".".join(parts)


def pytorch_name_for(layout: LayerLayout, relative_name: str) -> Optional[str]:
    """PyTorch's name (relative to the layer) of MindSpore's parameter ``relative_name`` of a ``layout`` layer."""
    for rule in layout.params:
        found = rule.matches(relative_name)
        if found is not None:
            return found
    return None


def rule_for(layout: LayerLayout, relative_name: str, framework: str = "mindspore") -> Optional[ParamRule]:
    """The rule of ``layout`` that names ``relative_name`` in ``framework``, or None."""
    return next((rule for rule in layout.params if rule.covers(framework, relative_name)), None)


# --- values -----------------------------------------------------------------------------------------------------
def _unit_axis_2(shape_ms: Sequence[int], shape_torch: Sequence[int]) -> bool:
    return (len(shape_ms) == 4 and len(shape_torch) == 3 and shape_ms[2] == 1
            and tuple(shape_ms[:2]) + tuple(shape_ms[3:]) == tuple(shape_torch))


#: transform -> (does a MindSpore shape and a PyTorch shape fit it)
_TRANSFORMS = {UNIT_AXIS_2: _unit_axis_2}
_LAYERS_OF = {transform: sorted({name for layout in LAYOUTS for rule in layout.params if rule.transform == transform
                                 for name in layout.mindspore}) for transform in _TRANSFORMS}


def transform_between(shape_mindspore: Sequence[int], shape_pytorch: Sequence[int]) -> Optional[str]:
    """The table's transform that turns a PyTorch tensor of ``shape_pytorch`` into MindSpore's ``shape_mindspore``
    (``SAME`` when the shapes are equal), or None when no layer of the table stores them so."""
    if tuple(shape_mindspore) == tuple(shape_pytorch):
        return SAME
    return next((name for name, fits in _TRANSFORMS.items() if fits(shape_mindspore, shape_pytorch)), None)


def unit_axes_between(shape_a: Sequence[int], shape_b: Sequence[int]) -> bool:
    """True when two different shapes hold the same values in the same order once their size-1 axes are dropped
    (a layer scale ``[C]`` and ``[C, 1, 1]``, a 1x1 convolution ``[o, i, 1, 1]`` and a linear ``[o, i]``): shape
    algebra, not a layout of the table, so whoever pairs by it must say so."""
    squeeze = [tuple(d for d in shape if d != 1) for shape in (shape_a, shape_b)]
    return tuple(shape_a) != tuple(shape_b) and squeeze[0] == squeeze[1]


def to_mindspore_layout(value: Any, shape_mindspore: Sequence[int], unit_axes: bool = False) -> Optional[np.ndarray]:
    """A PyTorch-layout array in MindSpore's ``shape_mindspore``, or None when the table knows no such layout
    (``unit_axes``: also a shape that differs only by size-1 axes, see :func:`unit_axes_between`)."""
    array = np.asarray(value)
    transform = transform_between(shape_mindspore, array.shape)
    if transform is None and not (unit_axes and unit_axes_between(shape_mindspore, array.shape)):
        return None
    return array.reshape(tuple(shape_mindspore))


def one_layout(a: np.ndarray, b: np.ndarray) -> tuple:
    """``(a, b, note)`` with ``a`` brought to ``b``'s layout when the two differ only by a layout of the table (one
    is MindSpore's, the other PyTorch's: ``[o, i, 1, k]`` and ``[o, i, k]``); ``note`` says which, empty when
    nothing was done. Shapes equal once size-1 axes are dropped (a layer scale ``[C]`` and ``[C, 1, 1]``, which the
    port check pairs by shape algebra) are brought together too, and the note says it is no layout of the table.
    Reshapes only: the values and their order are untouched, so a real difference stays."""
    if a.shape == b.shape:
        return a, b, ""
    for shape_ms, shape_torch in ((a.shape, b.shape), (b.shape, a.shape)):
        transform = transform_between(shape_ms, shape_torch)
        if transform is not None:
            return a.reshape(b.shape), b, (f"compared as {list(b.shape)} ({'/'.join(_LAYERS_OF[transform])} "
                                           f"layout: {list(shape_ms)} in MindSpore, {list(shape_torch)} in PyTorch)")
    if unit_axes_between(a.shape, b.shape):
        return a.reshape(b.shape), b, (f"compared as {list(b.shape)} ({list(a.shape)} and {list(b.shape)} are equal "
                                       f"once size-1 axes are dropped: shape algebra, no layout of the table)")
    return a, b, ""


def pairable_by_shape(shape_a: Sequence[int], shape_b: Sequence[int], layer_a: Optional[tuple] = None,
                      layer_b: Optional[tuple] = None) -> bool:
    """Whether a matcher that pairs records by order and shape may pair these two.

    Shapes must agree directly or through a layout of the table (a Conv1d weight's gradient ``[o, i, 1, k]`` pairs
    with ``[o, i, k]``). ``layer_a``/``layer_b`` are ``(framework, class name)`` of the layers that produced the
    records, when the capture says: then both must be the same layer of the table (or both unknown to it), and
    neither a private inner cell (a class name starting with ``_``), whose tensors are in a framework-internal
    layout (MindSpore's LSTM core is time-major): equal shapes alone never pair a time-major ``[T, B, H]`` with a
    batch-major ``[B, T, H]`` when T equals B."""
    shape_a, shape_b = tuple(shape_a), tuple(shape_b)
    if transform_between(shape_a, shape_b) is None and transform_between(shape_b, shape_a) is None:
        return False
    if layer_a is None or layer_b is None:
        return True
    if layer_a[1].startswith("_") or layer_b[1].startswith("_"):
        return False
    return layout_of(*layer_a) is layout_of(*layer_b)


def same_row_major(shape_a: Sequence[int], shape_b: Sequence[int]) -> bool:
    """Whether two different shapes hold the same elements in the same row-major order, one merging adjacent axes of
    the other (timm's Swin keeps ``[N, H, W, C]`` between blocks where mindcv keeps ``[N, H*W, C]``): the same size,
    and every axis boundary of one (the running products of its sizes) is one of the other's."""
    def bounds(shape: Sequence[int]) -> set:
        return set(np.cumprod([int(d) for d in shape if d != 1]).tolist())

    if tuple(shape_a) == tuple(shape_b) or int(np.prod(shape_a)) != int(np.prod(shape_b)):
        return False
    fewer, more = sorted((bounds(shape_a), bounds(shape_b)), key=len)
    return fewer <= more
