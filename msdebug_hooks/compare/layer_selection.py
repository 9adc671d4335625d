"""Which cells (MindSpore) or modules (PyTorch) the layer recorders record: the layers the user sees.

Both recorders record every leaf, plus the containers the user names. A built-in layer built from private inner
cells is one layer, as the user wrote it: MindSpore 2.10's ``nn.LSTM`` holds an inner cell ``rnn`` that computes the
time-major sequence (the batch-first transposes happen in ``LSTM`` itself) and a ``Dropout``; its ``BatchNorm3d``
holds a ``BatchNorm2d``; ``nn.MultiheadAttention`` (in both frameworks) holds an ``out_proj`` that is never called.
Recording the inner cell would give a tensor PyTorch's module never shows; so the layer is recorded with its
public output and its insides are not, unless asked (``inner_cells=True``, or the inner cell's name in
``containers``). Which layers are built so comes from the layout table
(:func:`msdebug_hooks.compare.layouts.is_atomic`).
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from msdebug_hooks.compare.layouts import is_atomic


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
    """A built-in layer recorded as one, its children not (``is_atomic``); never a built-in container."""
    return not is_builtin_container(cell) and is_atomic(framework, cell)


def _has_children(cell: Any) -> bool:
    if hasattr(cell, "name_cells"):  # MindSpore
        return bool(cell.name_cells())
    return any(True for _ in cell.children())  # PyTorch


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
