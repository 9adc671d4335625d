"""Settings of the layers that slide a window: convolutions, max and average pooling, adaptive pooling.

Padding is compared as the zeros each side adds before and after every spatial axis. MindSpore spells it as
``pad_mode`` (``'valid'``: none; ``'same'``: TensorFlow's rule, by the input size; ``'pad'``: the ``padding``
argument, per side), PyTorch as ``padding`` (per axis, both sides; or ``'same'`` / ``'valid'``). ``'same'`` has a
fixed meaning only where it does not depend on the input size: with stride 1 everywhere it adds ``(k - 1) * d`` per
axis, half before (rounded down) and the rest after, which is PyTorch's ``padding='same'``; with a one-element
window it adds nothing. Otherwise it depends on the input size: where the port check knows the size the layer was
given in the step (its recorded input), ``'same'`` is read as the zeros TensorFlow's rule adds at that size (``out =
ceil(in / s)``, ``(out - 1) * s + (k - 1) * d + 1 - in`` in all, half before rounded down) and the message says it
holds at that size; without it, it reads as ``'same' (by the input size)``, which no fixed PyTorch padding equals.
MindSpore 2.10's pooling cells keep ``ceil_mode``, the padding and ``count_include_pad`` on their primitive
(``cell.max_pool``, ``cell.avg_pool``), read from there; its average pooling with ``'same'`` leaves the padding out
of the count (PyTorch's ``count_include_pad=False``).
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator, Mapping, Optional

from msdebug_hooks.compare.setting_rules import Family, Reading, as_tuple, fmt, primitive_attrs, spatial_dims

#: the padding meaning of MindSpore's ``pad_mode='same'`` where it depends on the input size
BY_INPUT = "'same' (by the input size)"

#: id(cell) -> the spatial size of the input that cell was given in the checked step (see :func:`input_sizes`)
_INPUT_SIZES: ContextVar[Optional[Mapping[int, tuple]]] = ContextVar("input_sizes", default=None)


@contextmanager
def input_sizes(sizes: Mapping[int, tuple]) -> Iterator[None]:
    """Within the block, read a stride-2 ``'same'`` of a cell at the input size it was given (``id(cell)`` ->
    spatial size)."""
    token = _INPUT_SIZES.set(sizes)
    try:
        yield
    finally:
        _INPUT_SIZES.reset(token)


def _same_at(size: tuple, kernel: tuple, stride: tuple, dilation: tuple) -> tuple:
    """TensorFlow's ``'same'`` at input size ``size``: per axis ``(before, after)``."""
    pads = []
    for n, k, s, d in zip(size, kernel, stride, dilation):
        total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
        pads.append((total // 2, total - total // 2))
    return tuple(pads)


def _zeros(nd: int) -> tuple:
    return ((0, 0),) * nd


def same_pads(kernel: tuple, dilation: tuple) -> tuple:
    """Per axis ``(before, after)`` of a stride-1 ``'same'`` padding: ``(k - 1) * d`` in all, the extra one after."""
    totals = [(k - 1) * d for k, d in zip(kernel, dilation)]
    return tuple((t // 2, t - t // 2) for t in totals)


def bias_ms(cell: Any) -> Reading:
    """Whether a MindSpore layer adds a bias (``has_bias``; a layer without the flag: a ``bias`` it holds)."""
    has = getattr(cell, "has_bias", None)
    has = bool(has) if isinstance(has, bool) else getattr(cell, "bias", None) is not None
    return Reading(has, f"has_bias={has}")


def bias_pt(module: Any) -> Reading:
    """Whether a PyTorch layer adds a bias (``bias=None`` when built with ``bias=False``)."""
    has = getattr(module, "bias", None) is not None
    return Reading(has, f"bias={has}", f"has_bias={has}")


def _pairs(flat: Any, nd: int) -> Optional[tuple]:
    """MindSpore's per-side padding (an int, or ``(before, after)`` flattened over the axes, outermost first) as
    ``nd`` pairs, the last ``nd`` axes (Conv1d keeps ``(0, 0, p, p)``)."""
    if isinstance(flat, int):
        return ((flat, flat),) * nd
    if isinstance(flat, (tuple, list)) and len(flat) >= 2 * nd and len(flat) % 2 == 0:
        values = [int(v) for v in flat[len(flat) - 2 * nd:]]
        return tuple((values[2 * i], values[2 * i + 1]) for i in range(nd))
    return None


def _mindspore_pads(mode: str, explicit: Optional[tuple], kernel: tuple, stride: tuple, dilation: tuple,
                    nd: int, size: Optional[tuple] = None) -> Any:
    mode = mode.lower()
    if mode == "valid":
        return _zeros(nd)
    if mode == "same":
        if all(s == 1 for s in stride):
            return same_pads(kernel, dilation)
        if all((k - 1) * d == 0 for k, d in zip(kernel, dilation)):
            return _zeros(nd)
        if size is not None and len(size) == nd:
            return _same_at(size, kernel, stride, dilation)
        return BY_INPUT
    return explicit


def _at(mode: str, pads: Any, size: Optional[tuple]) -> str:
    """Where a ``'same'`` was read at the step's input size, say so (another size may pad otherwise)."""
    if mode.lower() != "same" or size is None or not isinstance(pads, tuple):
        return ""
    return f" (adds {_pad_text(pads)} at input size {fmt(tuple(size))}; other sizes may pad otherwise)"


def _torch_pads(padding: Any, kernel: tuple, dilation: tuple, nd: int) -> Optional[tuple]:
    if padding == "same":
        return same_pads(kernel, dilation)
    if padding == "valid":
        return _zeros(nd)
    per_axis = as_tuple(padding, nd)
    return None if per_axis is None else tuple((p, p) for p in per_axis)


def _pad_text(pads: Any) -> str:
    if not isinstance(pads, tuple):
        return str(pads)
    if all(a == b for a, b in pads):
        return f"padding={fmt(tuple(a for a, _ in pads))}"
    return f"padding (before, after) per axis {list(pads)}"


def _pad_port(pads: Any, per_side: bool) -> str:
    """The MindSpore arguments for PyTorch's padding: ``pad_mode='valid'`` for none, else ``'pad'`` and the
    numbers (a convolution takes them per side, a pooling cell per axis)."""
    if not isinstance(pads, tuple):
        return "pad_mode='valid'"
    if all(a == 0 and b == 0 for a, b in pads):
        return "pad_mode='valid'"
    if all(a == b for a, b in pads) and len({a for a, _ in pads}) == 1:
        return f"pad_mode='pad', padding={pads[0][0]}"
    if per_side:
        return f"pad_mode='pad', padding={tuple(v for pair in pads for v in pair)}"
    return f"pad_mode='pad', padding={tuple(a for a, _ in pads)}"


def _pad_reading(pads: Any, shown: str, per_side: bool = True) -> Optional[Reading]:
    if pads is None:
        return None
    return Reading(pads, shown, _pad_port(pads, per_side))


# --- convolutions ---------------------------------------------------------------------------------------------
def _conv_mindspore(cell: Any, kind: str) -> dict:
    nd = spatial_dims(kind)
    kernel, stride = as_tuple(cell.kernel_size, nd), as_tuple(cell.stride, nd)
    dilation = as_tuple(getattr(cell, "dilation", 1), nd)
    found = {"kernel_size": Reading(kernel, f"kernel_size={fmt(kernel)}"),
             "stride": Reading(stride, f"stride={fmt(stride)}"),
             "dilation": Reading(dilation, f"dilation={fmt(dilation)}"),
             "groups": Reading(cell.group, f"group={cell.group}")}
    if isinstance(getattr(cell, "has_bias", None), bool):
        found["bias"] = bias_ms(cell)
    mode = str(cell.pad_mode)
    transposed = "Transpose" in kind
    if not (transposed and mode.lower() == "same"):  # a transposed 'same' sizes its output: not compared
        size = (_INPUT_SIZES.get() or {}).get(id(cell))
        pads = _mindspore_pads(mode, _pairs(cell.padding, nd), kernel, stride, dilation, nd, size)
        shown = f"pad_mode={mode!r}" + (f", {_pad_text(pads)}" if mode.lower() == "pad" else "") + _at(mode, pads, size)
        if pads is not None:
            found["padding"] = Reading(pads, shown)
        if pads != _zeros(nd):  # padding is added: MindSpore's nn convolutions add zeros only
            found["padding_mode"] = Reading("zeros", f"{shown} (zeros: MindSpore's nn convolutions pad with zeros "
                                                     f"only)")
    if transposed and getattr(cell, "output_padding", None) is not None:
        extra = as_tuple(cell.output_padding, nd)
        found["output_padding"] = Reading(extra, f"output_padding={fmt(extra)}")
    return found


def _conv_pytorch(module: Any, kind: str) -> dict:
    nd = spatial_dims(kind)
    kernel, stride = tuple(module.kernel_size), tuple(module.stride)
    dilation = tuple(module.dilation)
    found = {"kernel_size": Reading(kernel, f"kernel_size={fmt(kernel)}", f"kernel_size={fmt(kernel)}"),
             "stride": Reading(stride, f"stride={fmt(stride)}", f"stride={fmt(stride)}"),
             "dilation": Reading(dilation, f"dilation={fmt(dilation)}", f"dilation={fmt(dilation)}"),
             "groups": Reading(module.groups, f"groups={module.groups}", f"group={module.groups}"),
             "bias": bias_pt(module)}
    mode = module.padding_mode
    layer = {"reflect": "ReflectionPad", "replicate": "ReplicationPad"}.get(mode)
    how = "pad with " + (f"nn.{layer}{nd}d" if layer else "ops.pad(x, ..., mode='circular')") + \
        " before it and pass pad_mode='valid'"
    found["padding_mode"] = Reading(mode, f"padding_mode={mode!r}", how)
    pads = _torch_pads(module.padding, kernel, dilation, nd)
    shown = f"padding={module.padding!r}" if isinstance(module.padding, str) else _pad_text(pads)
    reading = _pad_reading(pads, shown)
    if reading is not None and mode == "zeros":  # other modes: the port pads in a layer of its own
        found["padding"] = reading
    if getattr(module, "transposed", False):
        extra = tuple(module.output_padding)
        found["output_padding"] = Reading(extra, f"output_padding={fmt(extra)}", f"output_padding={fmt(extra)}")
    return found


# --- pooling -----------------------------------------------------------------------------------------------------
def _pool_attrs(cell: Any) -> dict:
    return primitive_attrs(cell, "max_pool") or primitive_attrs(cell, "avg_pool")


def _pool_mindspore(cell: Any, kind: str) -> dict:
    nd = spatial_dims(kind)
    attrs = _pool_attrs(cell)
    kernel, stride = as_tuple(cell.kernel_size, nd), as_tuple(cell.stride, nd)
    if "pads" in attrs:                     # MaxPool3DWithArgmax: one number per axis, both sides
        explicit = tuple((p, p) for p in as_tuple(attrs["pads"], nd))
    else:
        explicit = _pairs(attrs.get("pad", attrs.get("pad_list")), nd)
    dilation = as_tuple(attrs.get("dilation", 1), nd)
    mode = str(cell.pad_mode)
    found = {"kernel_size": Reading(kernel, f"kernel_size={fmt(kernel)}"),
             "stride": Reading(stride, f"stride={fmt(stride)}"),
             "ceil_mode": Reading(bool(attrs.get("ceil_mode", False)), f"ceil_mode={bool(attrs.get('ceil_mode'))}")}
    size = (_INPUT_SIZES.get() or {}).get(id(cell))
    pads = _mindspore_pads(mode, explicit, kernel, stride, dilation, nd, size)
    if pads is not None:
        found["padding"] = Reading(pads, f"pad_mode={mode.lower()!r}" + (
            f", padding {_pad_text(pads)}" if mode.lower() == "pad" else "") + _at(mode, pads, size))
    if kind.startswith("Max"):
        found["dilation"] = Reading(dilation, f"dilation={fmt(dilation)}")
    else:
        include = mode.lower() != "same" and bool(attrs.get("count_include_pad", True))
        found["count_include_pad"] = Reading(include, f"count_include_pad={include}" + (
            "" if mode.lower() != "same" else " (pad_mode='same' averages over the window's real elements)"))
        divisor = attrs.get("divisor_override") or None
        found["divisor_override"] = Reading(divisor, f"divisor_override={divisor}")
    return found


def _pool_pytorch(module: Any, kind: str) -> dict:
    nd = spatial_dims(kind)
    kernel = as_tuple(module.kernel_size, nd)
    stride = as_tuple(module.stride if module.stride is not None else module.kernel_size, nd)
    found = {"kernel_size": Reading(kernel, f"kernel_size={fmt(kernel)}", f"kernel_size={fmt(kernel)}"),
             "stride": Reading(stride, f"stride={fmt(stride)}", f"stride={fmt(stride)}"),
             "ceil_mode": Reading(bool(module.ceil_mode), f"ceil_mode={bool(module.ceil_mode)}",
                                  f"pad_mode='pad', ceil_mode={bool(module.ceil_mode)}")}
    pads = _torch_pads(module.padding, kernel, (1,) * nd, nd)
    reading = _pad_reading(pads, _pad_text(pads), per_side=False)
    if reading is not None:
        found["padding"] = reading
    if kind.startswith("Max"):
        dilation = as_tuple(module.dilation, nd)
        found["dilation"] = Reading(dilation, f"dilation={fmt(dilation)}", f"pad_mode='pad', dilation={fmt(dilation)}")
    else:
        include = bool(module.count_include_pad)
        found["count_include_pad"] = Reading(include, f"count_include_pad={include}",
                                             f"pad_mode='pad', count_include_pad={include}")
        divisor = getattr(module, "divisor_override", None)
        found["divisor_override"] = Reading(divisor, f"divisor_override={divisor}",
                                            f"pad_mode='pad', divisor_override={divisor}")
    return found


def unpadded_settings(found: dict) -> dict:
    """``count_include_pad`` means something only where padding is added: dropped where there is none."""
    pads = found.get("padding")
    if pads is None or not isinstance(pads.meaning, tuple) or all(a == b == 0 for a, b in pads.meaning):
        found.pop("count_include_pad", None)
    return found


def _adaptive_mindspore(cell: Any, kind: str) -> dict:
    nd = spatial_dims(kind)
    size = getattr(cell, "output_size", None)
    if size is None:
        for attribute in ("adaptive_avgpool2d", "adaptive_avg_pool3d", "adaptive_max_pool3d"):
            size = primitive_attrs(cell, attribute).get("output_size", size)
    size = _output_size(size, nd)
    return {} if size is None else {"output_size": Reading(size, f"output_size={fmt(size)}")}


def _adaptive_pytorch(module: Any, kind: str) -> dict:
    size = _output_size(module.output_size, spatial_dims(kind))
    return {} if size is None else {"output_size": Reading(size, f"output_size={fmt(size)}",
                                                           f"output_size={fmt(size)}")}


def _output_size(size: Any, nd: int) -> Optional[tuple]:
    if isinstance(size, int):
        return (size,) * nd
    if isinstance(size, (tuple, list)) and len(size) == nd:
        return tuple(size)
    return None


def _dims(prefix: str, dims: tuple = (1, 2, 3)) -> tuple:
    return tuple(f"{prefix}{d}d" for d in dims)


_STRIDE_NOTE = ("stride", "MindSpore's pooling stride defaults to 1, PyTorch's to the kernel size")
_PAD_NOTE = ("padding", "MindSpore's convolutions default to pad_mode='same', PyTorch's to padding=0")
_BIAS_NOTE = ("bias", "MindSpore's convolutions default to has_bias=False, PyTorch's to bias=True")

SPATIAL_FAMILIES: tuple = (
    Family("convolution", _dims("Conv") + ("Conv1dTranspose", "Conv2dTranspose", "Conv3dTranspose"),
           _dims("Conv") + _dims("ConvTranspose"), _conv_mindspore, _conv_pytorch, (_PAD_NOTE, _BIAS_NOTE)),
    Family("max pooling", _dims("MaxPool"), _dims("MaxPool"), _pool_mindspore, _pool_pytorch, (_STRIDE_NOTE,)),
    Family("average pooling", _dims("AvgPool"), _dims("AvgPool"),
           lambda cell, kind: unpadded_settings(_pool_mindspore(cell, kind)),
           lambda module, kind: unpadded_settings(_pool_pytorch(module, kind)), (_STRIDE_NOTE,)),
    Family("adaptive average pooling", _dims("AdaptiveAvgPool"), _dims("AdaptiveAvgPool"), _adaptive_mindspore,
           _adaptive_pytorch),
    Family("adaptive max pooling", _dims("AdaptiveMaxPool"), _dims("AdaptiveMaxPool"), _adaptive_mindspore,
           _adaptive_pytorch),
)
