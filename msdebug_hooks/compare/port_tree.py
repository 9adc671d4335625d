"""The port check's picture: the model's layer tree with each layer's error and the first divergence marked, and
the source lines behind the marked layer in both frameworks.

Each node of the tree (MindSpore's layer names, the run under test) carries the largest ``|a-b|/|b|`` of its own
records (outputs, and the gradients of its parameters); a container shows the largest of everything below it.
Source lines come from ``inspect``: the user's line that calls the layer (``self.norm1(x)`` in the parent's
``construct`` / ``forward``, then in the parent's other methods, such as a ``forward_features`` helper; searched for
``self.<attribute>(``; the parent's ``def`` line when the call is not written so) and where the layer's own
``construct`` / ``forward`` is defined.
"""
from __future__ import annotations

import inspect
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

_MAX_FULL_TREE = 80   # nodes; a larger tree shows the path to the finding, its siblings and the top level


@dataclass(frozen=True)
class SourceLine:
    """Where a layer is called and defined, in one framework."""

    framework: str
    layer: str
    call: Optional[str]        # "file:line  code" of the call in the parent, or None
    definition: Optional[str]  # "Class.construct at file:line"

    def lines(self) -> list:
        found = [f"{self.framework}: {self.layer}"]
        if self.call:
            found.append(f"    called at {self.call}")
        if self.definition:
            found.append(f"    defined in {self.definition}")
        return found

    def as_dict(self) -> dict:
        return {"framework": self.framework, "layer": self.layer, "call": self.call, "definition": self.definition}


def _short(path: str) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return path
    return relative if not relative.startswith("..") else path


def _method(obj: Any) -> Optional[Any]:
    for name in ("construct", "forward"):
        method = getattr(type(obj), name, None)
        if method is not None:
            return method
    return None


def _definition(obj: Any) -> Optional[str]:
    method = _method(obj)
    if method is None:
        return None
    try:
        _, line = inspect.getsourcelines(method)
        path = inspect.getsourcefile(method) or "?"
    except (OSError, TypeError):
        return None
    return f"{type(obj).__name__}.{method.__name__} at {_short(path)}:{line}"


def _methods(parent: Any) -> list:
    """The parent class's own methods to search for a call, ``construct`` / ``forward`` first, then the others in
    the order the class body defines them (a helper such as ``forward_features``), base classes after the class."""
    first = [m for m in (getattr(type(parent), name, None) for name in ("construct", "forward")) if m is not None]
    rest = []
    for cls in type(parent).__mro__:
        if cls.__module__.startswith(("mindspore.", "torch.", "builtins")):
            continue
        for value in vars(cls).values():
            if inspect.isfunction(value) and value not in first and value not in rest:
                rest.append(value)
    return first[:1] + rest


def _call_site(parent: Any, attribute: str) -> Optional[str]:
    """The line of the parent's code that calls ``self.<attribute>(``: searched in ``construct`` / ``forward``, then
    in every other method of the parent's class (layers called from a helper such as ``forward_features``); a line
    that only names ``self.<attribute>`` counts when no method calls it. Without either, the parent's ``def`` line."""
    methods = _methods(parent)
    if not methods:
        return None
    called = re.compile(rf"\bself\.{re.escape(attribute)}\s*\(")
    named = re.compile(rf"\bself\.{re.escape(attribute)}\b")
    sources = []
    for method in methods:
        try:
            lines, start = inspect.getsourcelines(method)
            path = inspect.getsourcefile(method) or "?"
        except (OSError, TypeError):
            continue
        sources.append((lines, start, path))
    for pattern in (called, named):
        for lines, start, path in sources:
            for offset, text in enumerate(lines):
                if pattern.search(text) and not text.lstrip().startswith("#"):
                    return f"{_short(path)}:{start + offset}  {text.strip()}"
    if not sources:
        return None
    lines, start, path = sources[0]
    return f"{_short(path)}:{start}  {lines[0].strip()} (the call is not written as self.{attribute})"


def source_line(root: Any, layer: str, framework: str) -> Optional[SourceLine]:
    """The source lines of ``layer`` (a dotted name in ``root``) in ``framework`` (``"MindSpore"``/``"PyTorch"``);
    None when the model has no such layer. A child of a sequential container is called by its container: the line
    that calls the container is given then."""
    named = dict(root.cells_and_names()) if hasattr(root, "cells_and_names") else dict(root.named_modules())
    if layer not in named:
        return None
    parts = layer.split(".")
    call = None
    for cut in range(len(parts) - 1, -1, -1):  # the nearest ancestor whose code names the child as an attribute
        attribute = parts[cut]
        if attribute.isdigit():
            continue
        parent = named.get(".".join(parts[:cut]))
        if parent is not None:
            call = _call_site(parent, attribute)
            break
    return SourceLine(framework, layer, call, _definition(named[layer]))


def record_layer(name: str, layers: Mapping[str, Any]) -> Optional[str]:
    """The layer a record belongs to: ``relu#1`` -> ``relu``, ``lstm.0`` -> ``lstm``, ``fc.weight`` -> ``fc``, a part
    of a split fused layer ``qkv[0:96]`` -> ``qkv``."""
    from msdebug_hooks.compare.replay import layer_candidates

    name = re.sub(r"\[\d+:\d+\]", "", name)

    for candidate in layer_candidates(name) + [name.rpartition(".")[0]]:
        if candidate in layers:
            return candidate
    head = name
    while "." in head:
        head = head.rpartition(".")[0]
        if head in layers:
            return head
    return None


def layer_errors(comparison: Any, layers: Mapping[str, Any]) -> dict:
    """Layer name -> ``{"out": ..., "param": ...}``: the largest ``|a-b|/|b|`` of its forward outputs, and of its
    parameters' gradients and start values, in a ``LayerComparison`` (inf: not comparable)."""
    from msdebug_hooks.compare import attribution

    errors: dict = {}
    for pair in comparison.pairs:
        layer = record_layer(pair.record_a.name, layers)
        if layer is None:
            continue
        column = "out" if pair.record_a.kind == "forward-output" else "param"
        slot = errors.setdefault(layer, {})
        slot[column] = max(slot.get(column, 0.0), attribution.error_of(pair.entry()))
    return errors


def _size(error: Optional[float]) -> str:
    if error is None:
        return "-"
    if math.isinf(error):
        return "n/c"
    return "0" if error == 0 else f"{error:.1e}"


def tree_lines(cell: Any, errors: Mapping[str, Mapping[str, float]], marked: Optional[str],
               torch_name: Any = None) -> list:
    """The layer tree of ``cell`` as text lines: name, class, the error of its outputs and of its parameters
    (gradients, start values); a container shows the largest below it. ``marked`` gets ``<<< first divergence``;
    ``torch_name(ms_layer)`` adds PyTorch's name where it differs."""
    from msdebug_hooks.compare.layer_selection import is_one_layer

    cells, inside = [], []
    for name, layer in cell.cells_and_names():  # a built-in layer's private inner cells are its own business
        if name and not any(name.startswith(prefix + ".") for prefix in inside):
            cells.append((name, layer))
            if is_one_layer("mindspore", layer):
                inside.append(name)
    totals: dict = {}
    for name, own in errors.items():  # a container shows the largest error below it
        parts = name.split(".")
        for cut in range(1, len(parts) + 1):
            slot = totals.setdefault(".".join(parts[:cut]), {})
            for column, value in own.items():
                slot[column] = max(slot.get(column, 0.0), value)
    path = set()
    if marked:
        parts = marked.split(".")
        path = {".".join(parts[:cut]) for cut in range(1, len(parts) + 1)}
    full = len(cells) <= _MAX_FULL_TREE
    lines = [f"{type(cell).__name__}  (|a-b|/|b|: out = the layer's outputs, param = its parameters' gradients "
             f"and start values; a container: the largest below it)"]
    for name, layer in cells:
        parent = name.rpartition(".")[0]
        if not (full or name.count(".") == 0 or parent in path or name in path):
            continue
        other = torch_name(name) if torch_name is not None else name
        label = name.rpartition(".")[2] + (f" (PyTorch {other})" if other is not None and other != name else "")
        slot = totals.get(name, {})
        sizes = "  ".join(f"{column} {_size(slot[column])}" for column in ("out", "param") if column in slot)
        mark = "  <<< first divergence" if name == marked else ""
        lines.append(f"{'  ' * (name.count('.') + 1)}{label} [{type(layer).__name__}]  {sizes}{mark}".rstrip())
    if not full:
        lines.append(f"  ({len(cells)} layers: the path to the marked layer and the top level are shown)")
    return lines
