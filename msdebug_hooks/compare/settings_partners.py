"""Which PyTorch module a MindSpore layer's settings are compared with (the port check's settings step).

The weights' module map pairs layers that hold parameters; parameter-free layers, layers whose parameters sit in a
PyTorch module holding more (a Dense without the Linear's bias), and the cells of a run a PyTorch composite covers
(mindcv's BatchNorm then ReLU against timm's BatchNormAct2d) need the rules below.
"""
from __future__ import annotations

from typing import Any, Optional

from msdebug_hooks.compare.layer_capture import FORWARD_OUTPUT
from msdebug_hooks.compare.layers import LayerComparison
from msdebug_hooks.compare.port_tree import record_layer
from msdebug_hooks.compare.port_weights import WeightCopy
from msdebug_hooks.compare.role_names import role_of


def partner_names(copy: WeightCopy, layers: LayerComparison, cell: Any, torch_module: Any) -> Any:
    """MindSpore layer -> its PyTorch partner for the settings check: the module map of the weights, else the one
    PyTorch module holding the partners of all the layer's parameters (it may hold more: a Linear's bias a Dense
    without one lacks, which the map leaves out as it is not the same set of tensors), else the pair the layer
    comparison made of the layers' outputs where both are of one class name (a parameter-free
    ``max_pool`` paired by order and role with ``maxpool``; a ``Sigmoid`` paired by role with a ``SiLU`` is the
    comparison's to judge by their values), or, for the cells of a run a PyTorch composite covers, the composite's
    child each stands for (:func:`_children_for`), else the module map's guess."""
    cells, modules = dict(cell.cells_and_names()), dict(torch_module.named_modules())
    compared = {}
    for pair in layers.pairs:
        if pair.record_a.kind == FORWARD_OUTPUT and pair.type_a and pair.type_a.lower() == pair.type_b.lower():
            ms_layer, torch_layer = record_layer(pair.record_a.name, cells), record_layer(pair.record_b.name, modules)
            if ms_layer and torch_layer:
                compared.setdefault(ms_layer, torch_layer)
        if pair.run_a:   # a PyTorch composite covering a run of cells: each later cell meets the child it stands for
            compared.update(_children_for(pair.run_a[1:], cells, record_layer(pair.record_b.name, modules), modules))

    owners: dict = {}   # MindSpore layer -> the PyTorch modules holding its parameters' partners
    paths = {param.name: path for path, param in cell.parameters_and_names()}
    for ms_name, torch_name in copy.pairs.items():
        owners.setdefault(paths.get(ms_name, ms_name).rpartition(".")[0], set()).add(torch_name.rpartition(".")[0])
    holders = {layer: next(iter(found)) for layer, found in owners.items() if len(found) == 1}

    def partner(name: str) -> Optional[str]:
        return copy.modules.get(name) or holders.get(name) or compared.get(name) or copy.torch_name(name)
    return partner


def _children_for(run: tuple, cells: dict, composite: Optional[str], modules: dict) -> dict:
    """MindSpore cell -> the child of PyTorch's ``composite`` it stands for: in order, the next child of its role
    (a ``LeakyReLU`` cell meets the ``ReLU`` child, and the settings check names the type)."""
    children = [(f"{composite}.{name}", child) for name, child in modules[composite].named_children()] \
        if composite in modules else []
    found = {}
    for layer in run:
        role = role_of(type(cells[layer]).__name__) if layer in cells else None
        index = next((i for i, (_, child) in enumerate(children) if role_of(type(child).__name__) == role), None)
        if role is not None and index is not None:
            found[layer] = children[index][0]
            children = children[index + 1:]
    return found
