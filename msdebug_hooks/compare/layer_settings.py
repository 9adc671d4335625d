"""The settings the port check reads from each kind of layer, by family (normalization, activations, dropout,
resampling, ...; the sliding-window layers are in :mod:`.spatial_settings`), and :func:`family_of`.

Each reader returns the settings it can read, in PyTorch's meaning; the port check compares those both sides have.
The MindSpore 2.10 facts behind the conversions (``mindspore/nn/layer/*.py``): BatchNorm keeps ``1 - momentum`` as
``cell.momentum``; ``affine`` is whether ``gamma`` is trained; ``use_batch_statistics=None`` is PyTorch's
``track_running_stats=True`` and ``True`` its ``False``; LayerNorm's ``epsilon`` defaults to 1e-7 and it normalizes
from ``begin_norm_axis`` (-1: the last axis only); GELU's ``approximate`` is kept as ``'tanh'``/``'none'``;
``Dropout`` keeps ``p`` (``Dropout2d``/``3d`` ``keep_prob``, ``Dropout1d`` ``prob``); Softmax's and LogSoftmax's axis
and ELU's, CELU's, HShrink's and SoftShrink's numbers sit on the cell's primitive.
"""
from __future__ import annotations

from typing import Any, Optional

from msdebug_hooks.compare.setting_rules import Family, Reading, builtin_class, fmt, number, primitive_attrs
from msdebug_hooks.compare.spatial_settings import SPATIAL_FAMILIES, bias_ms, bias_pt


def _ms(value: Any, argument: str) -> Optional[Reading]:
    return None if value is None else Reading(value, f"{argument}={fmt(value)}")


def _pt(value: Any, argument: str, ms_argument: str) -> Optional[Reading]:
    if value is None:
        return None
    return Reading(value, f"{argument}={fmt(value)}", f"{ms_argument}={fmt(value)}")


def _kept(found: dict) -> dict:
    return {key: reading for key, reading in found.items() if isinstance(reading, Reading)}


def _trained(parameter: Any) -> Optional[bool]:
    return None if parameter is None else bool(getattr(parameter, "requires_grad", True))


def _affine_ms(cell: Any) -> Reading:
    trained = bool(_trained(getattr(cell, "gamma", None)))
    return Reading(trained, f"affine={trained} (gamma {'trained' if trained else 'frozen'})")


def _affine_pt(module: Any, argument: str = "affine", port: str = "affine={}") -> Reading:
    weight = getattr(module, "weight", None)
    trained = bool(_trained(weight))
    shown = f"{argument}=False" if weight is None else f"{argument}=True" + ("" if trained else " (weight frozen)")
    return Reading(trained, shown, port.format(trained))


# --- normalization -----------------------------------------------------------------------------------------------
def _bn_ms(cell: Any, kind: str) -> dict:
    inner = getattr(cell, "bn2d", cell)  # MindSpore 2.10's BatchNorm3d holds a BatchNorm2d named bn2d
    found = {"eps": _ms(number(inner.eps), "eps"), "affine": _affine_ms(inner)}
    new_weight = number(getattr(inner, "momentum", None))
    if new_weight is not None:
        found["momentum"] = Reading(new_weight, f"momentum={1 - new_weight:.6g} (the running value's weight)")
    stats = getattr(inner, "use_batch_statistics", None)
    found["track_running_stats"] = Reading(stats is not True if stats is not False else "never batch",
                                           f"use_batch_statistics={stats}")
    return _kept(found)


def _bn_pt(module: Any, kind: str) -> dict:
    momentum = module.momentum
    found = {"eps": _pt(number(module.eps), "eps", "eps"), "affine": _affine_pt(module)}
    if momentum is None:
        found["momentum"] = Reading("cumulative", "momentum=None (a cumulative average of every batch)",
                                    "no argument matches: MindSpore has no cumulative average, so running "
                                    "statistics will differ")
    else:
        found["momentum"] = Reading(float(momentum), f"momentum={momentum:g} (the new batch's weight)",
                                    f"momentum={round(1 - momentum, 10):g} (1 - PyTorch's)")
    track = bool(module.track_running_stats)
    found["track_running_stats"] = Reading(track, f"track_running_stats={track}",
                                           f"use_batch_statistics={None if track else True}")
    return _kept(found)


def _ln_ms(cell: Any, kind: str) -> dict:
    shape = tuple(cell.normalized_shape)
    axis = cell.begin_norm_axis
    found = {"eps": _ms(number(cell.epsilon), "epsilon"), "normalized_shape": _ms(shape, "normalized_shape"),
             "elementwise_affine": _affine_ms(cell)}
    if isinstance(axis, int) and axis < 0:
        found["normalized_axes"] = Reading(-axis, f"begin_norm_axis={axis} (the last {-axis} axes)" if axis < -1
                                             else f"begin_norm_axis={axis} (the last axis)")
    return _kept(found)


def _ln_pt(module: Any, kind: str) -> dict:
    shape = tuple(module.normalized_shape)
    axes = len(shape)
    return _kept({"eps": _pt(number(module.eps), "eps", "epsilon"),
                  "normalized_shape": _pt(shape, "normalized_shape", "normalized_shape"),
                  "normalized_axes": Reading(axes, f"normalized_shape of {axes} axes",
                                             f"begin_norm_axis=begin_params_axis=<input rank - {axes}>"),
                  "elementwise_affine": _affine_pt(module, "elementwise_affine",
                                                   "set gamma.requires_grad = beta.requires_grad = {}")})


def _gn_ms(cell: Any, kind: str) -> dict:
    return _kept({"eps": _ms(number(cell.eps), "eps"), "num_groups": _ms(cell.num_groups, "num_groups"),
                  "affine": _affine_ms(cell)})


def _gn_pt(module: Any, kind: str) -> dict:
    return _kept({"eps": _pt(number(module.eps), "eps", "eps"),
                  "num_groups": _pt(module.num_groups, "num_groups", "num_groups"), "affine": _affine_pt(module)})


def _in_ms(cell: Any, kind: str) -> dict:
    return _kept({"eps": _ms(number(getattr(cell, "eps", None)), "eps")})


def _in_pt(module: Any, kind: str) -> dict:
    return _kept({"eps": _pt(number(module.eps), "eps", "eps")})


# --- activations -------------------------------------------------------------------------------------------------
def _gelu_ms(cell: Any, kind: str) -> dict:
    form = getattr(cell, "approximate", None)
    return {} if form is None else {"approximate": Reading(str(form), f"approximate={form!r}")}


def _gelu_pt(module: Any, kind: str) -> dict:
    form = module.approximate
    return {"approximate": Reading(form, f"approximate={form!r}",
                                   "approximate=False" if form == "none" else "approximate=True")}


def _number_reader(names: tuple, primitive: str = "") -> Any:
    """A reader of numbers the cell (or its ``primitive``) keeps under ``names``: ``((setting, ms name), ...)``."""
    def read(cell: Any, kind: str) -> dict:
        attrs = primitive_attrs(cell, primitive) if primitive else {}
        found = {}
        for setting, name in names:
            value = attrs.get(name, getattr(cell, name, None))
            if isinstance(value, (tuple, list)) and len(value) == 1:
                value = value[0]
            if value is None and (name in attrs or hasattr(cell, name)):  # kept as None: "none" is the setting
                found[setting] = Reading(None, f"{name}=None")
            elif not isinstance(value, bool) and isinstance(value, (int, float)):
                found[setting] = Reading(value, f"{name}={fmt(value)}")
        return found
    return read


def _torch_numbers(names: tuple) -> Any:
    """A reader of PyTorch numbers: ``((setting, torch name, MindSpore argument), ...)``."""
    def read(module: Any, kind: str) -> dict:
        found = {}
        for setting, name, ms_argument in names:
            value = getattr(module, name, None)
            if value is None and setting == "dim":
                found[setting] = Reading(None, f"{name}=None (implicit)", f"{ms_argument}=<the axis PyTorch infers>")
            elif value is None:
                found[setting] = Reading(None, f"{name}=None", f"{ms_argument}=None")
            elif not isinstance(value, bool) and isinstance(value, (int, float)):
                found[setting] = Reading(value, f"{name}={fmt(value)}", f"{ms_argument}={fmt(value)}")
        return found
    return read


def dropout_p(layer: Any) -> Optional[float]:
    """A dropout layer's drop probability: ``p`` (both frameworks), MindSpore's ``prob`` (Dropout1d) or
    ``1 - keep_prob`` (Dropout2d/3d; MindSpore's Dropout keeps a stale ``keep_prob`` beside ``p``, so ``p``
    wins)."""
    for name in ("p", "prob"):
        if number(getattr(layer, name, None)) is not None:
            return float(getattr(layer, name))
    keep = number(getattr(layer, "keep_prob", None))
    return None if keep is None else 1.0 - keep


def _dropout_ms(cell: Any, kind: str) -> dict:
    p = dropout_p(cell)
    return {} if p is None else {"p": Reading(p, f"p={p:g}")}


def _dropout_pt(module: Any, kind: str) -> dict:
    p = float(module.p)
    return {"p": Reading(p, f"p={p:g}", f"p={p:g}")}


def _upsample_ms(cell: Any, kind: str) -> dict:
    return _resampling(cell, "")


def _upsample_pt(module: Any, kind: str) -> dict:
    return _resampling(module, "port")


def _resampling(layer: Any, side: str) -> dict:
    mode = layer.mode
    corners = bool(layer.align_corners) if mode in ("linear", "bilinear", "bicubic", "trilinear") else None
    scale = layer.scale_factor
    scale = tuple(float(s) for s in scale) if isinstance(scale, (tuple, list)) else number(scale)
    if isinstance(scale, tuple) and len(set(scale)) == 1:
        scale = scale[0]  # one factor for every axis, however it was written
    size = tuple(layer.size) if isinstance(layer.size, (tuple, list)) else layer.size
    found = {"mode": Reading(mode, f"mode={mode!r}", f"mode={mode!r}" if side else ""),
             "scale_factor": Reading(scale, f"scale_factor={scale}", f"scale_factor={scale}" if side else ""),
             "size": Reading(size, f"size={size}", f"size={size}" if side else "")}
    if corners is not None:
        found["align_corners"] = Reading(corners, f"align_corners={layer.align_corners}",
                                         f"align_corners={corners}" if side else "")
    return found


def _recurrent_ms(cell: Any, kind: str) -> dict:
    return _recurrent(cell, "has_bias", "")


def _recurrent_pt(module: Any, kind: str) -> dict:
    return _recurrent(module, "bias", "port")


def _recurrent(layer: Any, bias: str, side: str) -> dict:
    """LSTM/GRU/RNN: the same names in both frameworks but ``has_bias`` for PyTorch's ``bias``."""
    found = {}
    for setting, name in (("batch_first", "batch_first"), ("bidirectional", "bidirectional"),
                          ("num_layers", "num_layers"), ("dropout", "dropout"), ("bias", bias)):
        value = getattr(layer, name, None)
        if isinstance(value, (bool, int, float)):
            argument = "has_bias" if setting == "bias" else name
            found[setting] = Reading(value, f"{name}={fmt(value)}", f"{argument}={fmt(value)}" if side else "")
    return found


def _numbers(setting_names: tuple, primitive: str = "") -> tuple:
    """The two readers of a layer whose settings are plain numbers: ``((setting, ms name, torch name), ...)``."""
    return (_number_reader(tuple((s, m) for s, m, _ in setting_names), primitive),
            _torch_numbers(tuple((s, t, m) for s, m, t in setting_names)))


def _family(name: str, ms: tuple, pt: tuple, settings: tuple, primitive: str = "", notes: tuple = ()) -> Family:
    read_ms, read_pt = _numbers(settings, primitive)
    return Family(name, ms, pt, read_ms, read_pt, notes)


_AXIS = (("dim", "axis", "dim"),)
FAMILIES: tuple = SPATIAL_FAMILIES + (
    Family("linear", ("Dense", "Linear"), ("Linear",), lambda cell, kind: {"bias": bias_ms(cell)},
           lambda module, kind: {"bias": bias_pt(module)}),
    Family("BatchNorm", ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d"), ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d"),
           _bn_ms, _bn_pt, (("momentum", "MindSpore's momentum weighs the running value, PyTorch's the new batch"),)),
    Family("LayerNorm", ("LayerNorm",), ("LayerNorm",), _ln_ms, _ln_pt,
           (("eps", "MindSpore's epsilon defaults to 1e-7, PyTorch's eps to 1e-5"),)),
    Family("GroupNorm", ("GroupNorm",), ("GroupNorm",), _gn_ms, _gn_pt),
    Family("InstanceNorm", ("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"),
           ("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"), _in_ms, _in_pt),
    Family("GELU", ("GELU",), ("GELU",), _gelu_ms, _gelu_pt,
           (("approximate", "MindSpore's GELU defaults to the tanh form, PyTorch's to the exact erf form"),)),
    _family("LeakyReLU", ("LeakyReLU",), ("LeakyReLU",), (("negative_slope", "alpha", "negative_slope"),),
            notes=(("negative_slope", "MindSpore's alpha defaults to 0.2, PyTorch's negative_slope to 0.01"),)),
    _family("ELU", ("ELU",), ("ELU",), (("alpha", "alpha", "alpha"),), "elu"),
    _family("CELU", ("CELU",), ("CELU",), (("alpha", "alpha", "alpha"),), "celu"),
    _family("Hardtanh", ("Hardtanh",), ("Hardtanh",), (("min_val", "min_val", "min_val"),
                                                       ("max_val", "max_val", "max_val"))),
    _family("Hardshrink", ("HShrink",), ("Hardshrink",), (("lambd", "lambd", "lambd"),), "hshrink"),
    _family("Softshrink", ("SoftShrink",), ("Softshrink",), (("lambd", "lambd", "lambd"),), "softshrink"),
    _family("Threshold", ("Threshold",), ("Threshold",), (("threshold", "threshold", "threshold"),
                                                         ("value", "value", "value"))),
    _family("Softmax", ("Softmax",), ("Softmax",), _AXIS, "softmax"),
    _family("LogSoftmax", ("LogSoftmax",), ("LogSoftmax",), _AXIS, "log_softmax"),
    _family("Softmin", ("Softmin",), ("Softmin",), _AXIS),
    _family("Flatten", ("Flatten",), ("Flatten",), (("start_dim", "start_dim", "start_dim"),
                                                     ("end_dim", "end_dim", "end_dim"))),
    _family("PixelShuffle", ("PixelShuffle",), ("PixelShuffle",), (("upscale_factor",) * 3,)),
    _family("Embedding", ("Embedding",), ("Embedding",), (("padding_idx",) * 3,)),
    Family("Dropout", ("Dropout",), ("Dropout",), _dropout_ms, _dropout_pt),
    Family("Dropout1d", ("Dropout1d",), ("Dropout1d",), _dropout_ms, _dropout_pt),
    Family("Dropout2d", ("Dropout2d",), ("Dropout2d",), _dropout_ms, _dropout_pt),
    Family("Dropout3d", ("Dropout3d",), ("Dropout3d",), _dropout_ms, _dropout_pt),
    Family("Upsample", ("Upsample",), ("Upsample",), _upsample_ms, _upsample_pt),
    Family("recurrent", ("LSTM", "GRU", "RNN"), ("LSTM", "GRU", "RNN"), _recurrent_ms, _recurrent_pt),
)

_NAMES = {"mindspore": frozenset(n for f in FAMILIES for n in f.mindspore),
          "pytorch": frozenset(n for f in FAMILIES for n in f.pytorch)}


def pytorch_style_family(cell: Any) -> tuple:
    """``(family, PyTorch class name)`` of a MindSpore cell that keeps PyTorch's arguments under PyTorch's names,
    read with the PyTorch reader: ``mindspore.mint.nn``'s layers (``mint.nn.Conv2d``: ``padding``,
    ``padding_mode``, ``groups``; ``mint.nn.BatchNorm2d``: PyTorch's momentum) and ``mindspore.nn``'s ``...Ext``
    layers behind them (``LayerNormExt``, ``DropoutExt``, ``MaxPool2dExt``, ``AvgPool2dExt``). ``(None, None)``
    for any other cell."""
    for cls in type(cell).__mro__:
        name, module = cls.__name__, cls.__module__
        if module.startswith("mindspore.mint.nn.") or module == "mindspore.mint.nn":
            kind = name
        elif module.startswith("mindspore.nn.") and name.endswith("Ext"):
            kind = name[:-3]
        else:
            continue
        if kind in _NAMES["pytorch"]:
            return next(f for f in FAMILIES if kind in f.pytorch), kind
    return None, None


def family_of(layer: Any, framework: str) -> tuple:
    """``(family, built-in class name)`` of a layer, subclasses included; ``(None, None)`` for a layer no family
    reads."""
    cls = builtin_class(layer, framework, _NAMES[framework])
    if cls is None:
        return None, None
    names = "mindspore" if framework == "mindspore" else "pytorch"
    return next(f for f in FAMILIES if cls.__name__ in getattr(f, names)), cls.__name__
