"""Settings a port must translate, read from both models before anything runs, compared by what each layer is.

For each pair of layers (a MindSpore cell and the PyTorch module the weight copy's module map pairs it with), both
are resolved to the built-in layer they are, through their classes' method resolution order (``isinstance``: timm's
``LayerNorm``, a subclass of ``torch.nn.LayerNorm``, is a LayerNorm; mindcv's ``Dropout`` a ``mindspore.nn.Dropout``).
Then:

* the **layer type**: both are layers of the layout table (:mod:`.layouts`) or of the setting families
  (:mod:`.layer_settings`) but different ones (a ReLU ported as a GELU, a max pooling as an average pooling);
* every **setting** both sides' readers return (:mod:`.layer_settings`, :mod:`.spatial_settings`): epsilon,
  momentum (MindSpore's weighs the running value), padding (``pad_mode`` against ``padding``, by the zeros added;
  where the step's inputs show the port's padding added by a layer before it, by its effect: :mod:`.moved_padding`),
  ``padding_mode``, a bias (``has_bias`` against ``bias``), the pooling stride (MindSpore's defaults to 1,
  PyTorch's to the kernel size), ``ceil_mode``, ``count_include_pad``, GELU's form, dropout's ``p``
  (``keep_prob``), LeakyReLU's slope, ``align_corners``, the softmax axis, ... compared by meaning, never by
  spelling.

A finding names the MindSpore layer, the value on each side as that framework spells it and the MindSpore argument
that gives PyTorch's meaning. Nothing here runs a model.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

from msdebug_hooks.compare.layer_settings import dropout_p, family_of, pytorch_style_family
from msdebug_hooks.compare.layouts import LAYOUTS, LayerLayout, layout_of
from msdebug_hooks.compare.moved_padding import add_note, moved_padding
from msdebug_hooks.compare.setting_rules import builtin_class, same_value

_LAYOUT_NAMES = {"mindspore": frozenset(n for layout in LAYOUTS for n in layout.mindspore),
                 "pytorch": frozenset(n for layout in LAYOUTS for n in layout.pytorch)}


@dataclass(frozen=True)
class ConventionFinding:
    """One setting that differs between a MindSpore layer and its PyTorch module."""

    layer: str          # MindSpore layer name
    torch_layer: str    # PyTorch module name
    setting: str        # "momentum", "eps", "padding", "stride", "approximate", "p", ..., or "type"
    value_mindspore: Any
    value_pytorch: Any
    message: str

    def as_dict(self) -> dict:
        return {"layer": self.layer, "torch_layer": self.torch_layer, "setting": self.setting,
                "mindspore": _plain(self.value_mindspore), "pytorch": _plain(self.value_pytorch),
                "message": self.message}


def _plain(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, bool, type(None))) else str(value)


def _layout(layer: Any, framework: str) -> tuple:
    cls = builtin_class(layer, framework, _LAYOUT_NAMES[framework])
    return (None, None) if cls is None else (layout_of(framework, cls.__name__), cls.__name__)


def _what(layer: Any, kind: str, package: str) -> str:
    """The class name, and the built-in it extends when it is a subclass (``MyLN (a torch.nn.LayerNorm)``; ``with
    its own forward`` when the subclass computes in its own way, which may use a setting differently)."""
    cls = type(layer)
    if cls.__name__ == kind and cls.__module__.startswith(package):
        return kind
    index = next((i for i, c in enumerate(cls.__mro__) if c.__name__ == kind and c.__module__.startswith(package)),
                 None)
    if index is None:  # a PyTorch-style MindSpore layer (mint.nn): its own name says what it is
        return cls.__name__
    below = cls.__mro__[:index]
    own = any("forward" in vars(c) or "construct" in vars(c) for c in below)
    return f"{cls.__name__} (a {package}{kind}" + (", with its own forward)" if own else ")")


def _fix(port: str) -> str:
    return f"pass {port}" if re.match(r"[A-Za-z_]\w*=", port) else port


def _type_finding(name: str, tname: str, cell: Any, module: Any, kinds: tuple) -> ConventionFinding:
    what_ms, what_pt = _what(cell, kinds[0], "mindspore.nn."), _what(module, kinds[1], "torch.nn.")
    return ConventionFinding(name, tname, "type", kinds[0], kinds[1],
                             f"{name}: the layer differs: MindSpore has {what_ms}, PyTorch {what_pt} ({tname})")


def _differing(name: str, tname: str, cell: Any, module: Any, pytorch_style: bool) -> list:
    """The setting findings of one pair of layers of the same family (``pytorch_style``: the cell keeps PyTorch's
    arguments, a ``mint.nn`` layer, and is read as PyTorch's)."""
    family, kind_ms = pytorch_style_family(cell) if pytorch_style else family_of(cell, "mindspore")
    _, kind_pt = family_of(module, "pytorch")
    read_ms = family.read_pytorch if pytorch_style else family.read_mindspore
    try:
        ours, theirs = read_ms(cell, kind_ms), family.read_pytorch(module, kind_pt)
    except AttributeError:  # a subclass that removed an attribute its built-in keeps: nothing to read
        return []
    subclass = [text for text in ("" if pytorch_style else _what(cell, kind_ms, "mindspore.nn."),
                                  _what(module, kind_pt, "torch.nn.")) if "(a " in text]
    found = []
    for setting, mine in ours.items():
        other = theirs.get(setting)
        if other is None or same_value(mine.meaning, other.meaning):
            continue
        head = f"{name}: {family.name} {setting}: {mine.shown} in MindSpore, {other.shown} in PyTorch"
        moved = moved_padding(cell, module, family.name, mine, theirs) if setting == "padding" else None
        if moved is not None and moved.equal:   # the padding a layer before it adds: the same effect
            add_note(f"{head}, but {moved.text}")
            continue
        note = "" if pytorch_style else family.note(setting)
        fix = f"pass {other.shown}" if pytorch_style else _fix(other.port)
        message = (f"{head}: " + (moved.text if moved is not None else fix + (f" ({note})" if note else ""))
                   + (f" [{'; '.join(subclass)}]" if subclass else ""))
        found.append(ConventionFinding(name, tname, setting, mine.meaning, other.meaning, message))
    return found


def check_pair(name: str, tname: str, cell: Any, module: Any) -> list:
    """The findings of one MindSpore layer and its PyTorch module: a type finding, or the settings that differ."""
    layout_ms, kind_ms = _layout(cell, "mindspore")
    layout_pt, kind_pt = _layout(module, "pytorch")
    if isinstance(layout_ms, LayerLayout) and isinstance(layout_pt, LayerLayout) and layout_ms is not layout_pt:
        return [_type_finding(name, tname, cell, module, (kind_ms, kind_pt))]
    family_ms, kind_ms = family_of(cell, "mindspore")
    pytorch_style = family_ms is None
    if pytorch_style:
        family_ms, kind_ms = pytorch_style_family(cell)
    family_pt, kind_pt = family_of(module, "pytorch")
    if family_ms is None or family_pt is None:
        return []
    if family_ms is not family_pt:
        return [_type_finding(name, tname, cell, module, (kind_ms, kind_pt))]
    return _differing(name, tname, cell, module, pytorch_style)


def check_conventions(cell: Any, torch_module: Any, torch_name: Callable[[str], str]) -> list:
    """Every convention finding between ``cell``'s layers and ``torch_module``'s (``torch_name``: MindSpore layer
    name -> PyTorch module name, e.g. ``WeightCopy.torch_name``), in MindSpore's layer order."""
    modules = dict(torch_module.named_modules())
    findings: list = []
    for name, cell_layer in cell.cells_and_names():
        if not name:
            continue
        tname = torch_name(name)
        module: Optional[Any] = modules.get(tname)
        if module is not None:
            findings += check_pair(name, tname, cell_layer, module)
    return findings


__all__ = ["ConventionFinding", "check_conventions", "check_pair", "dropout_p"]
