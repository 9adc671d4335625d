"""Which cells (MindSpore) or modules (PyTorch) the layer recorders record: the layers the user sees.

Both recorders record every leaf, plus the containers the user names. A built-in layer built from private inner
cells is one layer, as the user wrote it: MindSpore 2.10's ``nn.LSTM`` holds an inner cell ``rnn`` that computes the
time-major sequence (the batch-first transposes happen in ``LSTM`` itself) and a ``Dropout``; its ``BatchNorm3d``
holds a ``BatchNorm2d``; ``nn.MultiheadAttention`` (in both frameworks) holds an ``out_proj`` that is never called.
Recording the inner cell would give a tensor PyTorch's module never shows; so the layer is recorded with its
public output and its insides are not, unless asked (``inner_cells=True``, or the inner cell's name in
``containers``). Which layers are built so comes from the layout table
(:func:`msdebug_hooks.compare.layouts.is_atomic`). A composite layer -- a parameter-free cell built of
parameter-free layers (mindcv's ``Swish`` holding a ``Sigmoid``), or a layer of the table that applies
parameter-free children after its own computation (timm's ``BatchNormAct2d``) -- is one layer too
(:func:`composite_kind`, :mod:`msdebug_hooks.compare.composites`).
"""
from __future__ import annotations

import inspect
from typing import Any, Iterable, Optional, Sequence

from msdebug_hooks.compare.layouts import LAYOUTS, is_atomic
from msdebug_hooks.compare.role_names import role_of
from msdebug_hooks.compare.setting_rules import builtin_class

FREE, LAYER = "parameter-free composite", "layer composite"
_TABLE_NAMES = {"mindspore": frozenset(n for layout in LAYOUTS for n in layout.mindspore),
                "pytorch": frozenset(n for layout in LAYOUTS for n in layout.pytorch)}


#: the module each framework defines its container classes in
_CONTAINER_MODULES = ("mindspore.nn.layer.container", "torch.nn.modules.container")


def is_builtin_container(cell: Any) -> bool:
    """Whether ``cell`` is a framework's own container (``SequentialCell``, ``nn.Sequential``, ``ModuleList``, ...):
    its class, or a class above it, is defined in the framework's container module, and the class itself is the
    framework's. A user class built on ``nn.Sequential`` is not (it is a user layer, never one-layer anyway)."""
    cls = type(cell)
    if not cls.__module__.startswith(("mindspore.", "torch.")):
        return False
    return any(base.__module__ in _CONTAINER_MODULES for base in cls.__mro__)


def is_one_layer(framework: str, cell: Any) -> bool:
    """A layer recorded as one, its children not: a built-in layer (``is_atomic``) or a composite
    (:func:`composite_kind`); never a built-in container."""
    if is_builtin_container(cell):
        return False
    return is_atomic(framework, cell) or composite_kind(framework, cell) is not None


def _has_children(cell: Any) -> bool:
    if hasattr(cell, "name_cells"):  # MindSpore
        return bool(cell.name_cells())
    return any(True for _ in cell.children())  # PyTorch


def _below(cell: Any) -> list:
    if hasattr(cell, "cells_and_names"):  # MindSpore
        return [sub for name, sub in cell.cells_and_names() if name]
    return [sub for name, sub in cell.named_modules() if name]


def _holds_tensors(cell: Any, recurse: bool) -> bool:
    if hasattr(cell, "parameters_and_names"):   # MindSpore: its buffers are parameters too
        return any(True for _ in cell.parameters_and_names(expand=recurse))
    return any(True for _ in cell.parameters(recurse=recurse)) or any(True for _ in cell.buffers(recurse=recurse))


def _one_input(cell: Any) -> bool:
    """Whether the cell's ``construct`` (``forward``) takes exactly one required argument and no ``*args``."""
    method = getattr(type(cell), "construct" if hasattr(cell, "name_cells") else "forward", None)
    try:
        params = list(inspect.signature(method).parameters.values())[1:]
    except (TypeError, ValueError):
        return False
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return False
    required = [p for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(required) == 1


def composite_kind(framework: str, cell: Any) -> Optional[str]:
    """:data:`FREE`, :data:`LAYER`, or None when ``cell`` is not a composite layer.

    A composite has children, and below it no parameter, no buffer, no built-in container and no leaf of no
    parameter-free role (:func:`~msdebug_hooks.compare.role_names.role_of`: a ``Pad`` cell is not known to keep
    one function). :data:`FREE`: the cell holds no tensor itself and its forward takes one input (a ``Swish``).
    :data:`LAYER`: it holds tensors itself and is an instance of a layer of the layout table (a ``BatchNorm2d``
    subclass applying an activation child). Built-in containers and built-in atomic layers never are."""
    if is_builtin_container(cell):
        return None
    below = _below(cell)
    if not below or any(_holds_tensors(sub, True) or is_builtin_container(sub) for sub in below):
        return None
    if any(role_of(type(sub).__name__) is None and not _has_children(sub) for sub in below):
        return None
    if _holds_tensors(cell, False):
        return LAYER if builtin_class(cell, framework, _TABLE_NAMES[framework]) is not None else None
    return FREE if _one_input(cell) else None


def select_layers(named: Iterable[tuple], framework: str, containers: Sequence[str] = (),
                  inner_cells: bool = False) -> list:
    """The names to hook, in the order of ``named`` (``cells_and_names()`` / ``named_modules()``).

    A name is recorded when the user named it in ``containers``, or when it is a leaf or a built-in layer the table
    treats as one (:func:`is_one_layer`) and no built-in layer above it is (``inner_cells=True`` records those too)."""
    named = [(name, cell) for name, cell in named]
    atomic = {name for name, cell in named if is_one_layer(framework, cell)}
    wanted = set(containers)
    chosen = []
    for name, cell in named:
        if not name:
            continue
        parts = name.split(".")
        inside = any(".".join(parts[:cut]) in atomic for cut in range(1, len(parts)))
        if name in wanted or ((inner_cells or not inside) and (name in atomic or not _has_children(cell))):
            chosen.append(name)
    return chosen


#: container classes whose output is their last child's output
_SEQUENTIAL = {"mindspore": ("SequentialCell",)}


def sequential_containers(named: Iterable[tuple], framework: str, chosen: Sequence[str]) -> dict:
    """``{container: [its recorded layers, in order]}`` for every MindSpore ``SequentialCell`` that holds recorded
    layers and is not recorded itself.

    Why: in a compiled graph MindSpore 2.10 runs no forward hook of a cell it reaches through a container's list
    (``SequentialCell``, ``CellList``), only of cells reached as attributes. The container itself is reached as an
    attribute, so its output is recorded too; where its children were recorded, the comparison drops it, and where
    they were not (GRAPH_MODE), it stands for its last recorded layer, whose output it is."""
    picked = set(chosen)
    out: dict = {}
    for name, cell in named:
        if not name or name in picked or type(cell).__name__ not in _SEQUENTIAL.get(framework, ()):
            continue
        inside = [layer for layer in chosen if layer.startswith(name + ".")]
        if inside:
            out[name] = inside
    return out
