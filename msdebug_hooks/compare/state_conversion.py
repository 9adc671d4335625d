"""PyTorch weights under MindSpore's names and in MindSpore's layouts, ready for ``mindspore.load_param_into_net``.

The implementation behind :func:`msdebug_hooks.compare.naming.convert_torch_state`. Every fact comes from the layout
table (:mod:`msdebug_hooks.compare.layouts`): which PyTorch name a MindSpore parameter has, how its values are laid
out, and which MindSpore parameters start from a default when the PyTorch layer has none (InstanceNorm without
``affine``). What it can use depends on what it is given about the MindSpore side:

* names only: names are translated, values returned as given (the original API);
* ``{name: shape}`` or parameters (``net.get_parameters()``): values become numpy arrays in MindSpore's shapes
  (a Conv1d weight ``[o, i, k]`` becomes ``[o, i, 1, k]``); a shape no layout of the table explains is an error;
* the network itself: the layer each parameter belongs to is known too, so its rule is used exactly (a custom
  parameter named ``w`` stays ``w``; PReLU's ``w`` is ``weight``), defaults are filled, and values come back as
  ``mindspore.Parameter`` of the network's dtypes: ``load_param_into_net(net, convert_torch_state(state, net))``.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from msdebug_hooks.compare.layouts import layout_for, pytorch_style_name, rule_for, to_mindspore_layout
from msdebug_hooks.errors import ConfigError


def as_array(value: Any) -> np.ndarray:
    """A PyTorch tensor (bfloat16 as float32), numpy array or anything numpy reads, as a numpy array."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        return value.numpy()
    return np.asarray(value)


def _is_network(target: Any) -> bool:
    return hasattr(target, "parameters_and_names") and hasattr(target, "cells_and_names")


def _targets(mindspore_names: Any) -> tuple:
    """``(names, shapes or None, network or None)`` from whatever describes the MindSpore side."""
    if _is_network(mindspore_names):
        params = [param for _, param in mindspore_names.parameters_and_names()]
        return [p.name for p in params], {p.name: tuple(p.shape) for p in params}, mindspore_names
    if isinstance(mindspore_names, Mapping):
        return list(mindspore_names), {n: tuple(int(d) for d in s) for n, s in mindspore_names.items()}, None
    items = list(mindspore_names)
    if items and all(hasattr(item, "name") and hasattr(item, "shape") for item in items):
        return [p.name for p in items], {p.name: tuple(p.shape) for p in items}, None
    return [str(item) for item in items], None, None


def table_rules(framework: str, layers: Mapping[str, Any], paths: Any) -> dict:
    """Tensor path -> ``(layer path, rule)`` for the tensors a layer of the table owns: the outermost layer (its
    class or a subclass, see :func:`~msdebug_hooks.compare.layouts.layout_for`) whose rules cover the tensor's name
    below it. ``layers``: path -> layer object (``cells_and_names`` / ``named_modules``)."""
    found = {}
    for path in paths:
        parts = path.split(".")
        for cut in range(len(parts)):
            prefix = ".".join(parts[:cut])
            layer = layers.get(prefix)
            layout = layout_for(framework, layer) if layer is not None else None
            rule = rule_for(layout, ".".join(parts[cut:]), framework) if layout is not None else None
            if rule is not None:
                found[path] = (prefix, rule)
                break
    return found


def _rule_names(network: Any) -> dict:
    """MindSpore parameter name -> (PyTorch name, default) from the layer each parameter belongs to (see
    :func:`table_rules`)."""
    params = {path: param.name for path, param in network.parameters_and_names()}
    found = {}
    for path, (prefix, rule) in table_rules("mindspore", dict(network.cells_and_names()), params).items():
        torch_relative = rule.matches(path[len(prefix) + 1:] if prefix else path)
        found[params[path]] = (f"{prefix}.{torch_relative}" if prefix else torch_relative, rule.default)
    return found


def _overrides(torch_state: Mapping[str, Any], mapping: Optional[Mapping[str, str]]) -> dict:
    """MindSpore name -> PyTorch name from the user's mapping (PyTorch name -> MindSpore name, rules included; a
    mapping of rules only has no pairs, so it is not skipped as empty)."""
    if mapping is None:
        return {}
    overrides = {ms_name: torch_name for torch_name, ms_name in mapping.items()}
    lookup = getattr(mapping, "lookup", None)
    if lookup is not None and getattr(mapping, "rules", None):
        for torch_name in torch_state:
            ms_name = lookup(torch_name)
            if ms_name is not None:
                overrides.setdefault(ms_name, torch_name)
    return overrides


def convert_torch_state(torch_state: Mapping[str, Any], mindspore_names: Any,
                        mapping: Optional[Mapping[str, str]] = None, *, unit_axes: bool = False) -> dict:
    """``{mindspore_name: value}`` for every MindSpore parameter, from a PyTorch state dict (see the module
    docstring for what ``mindspore_names`` may be). ``ConfigError`` names every parameter without a PyTorch value
    and every value whose shape no layout of the table turns into the MindSpore one. ``unit_axes``: a value whose
    shape differs only by size-1 axes is reshaped too (for a caller that found and reported such pairs, as the
    port check does; off by default because the table has no such layout)."""
    names, shapes, network = _targets(mindspore_names)
    overrides = _overrides(torch_state, mapping)
    by_rule = _rule_names(network) if network is not None else {}
    converted, missing, misshapen = {}, [], []
    for ms_name in names:
        torch_name, default = by_rule.get(ms_name, (None, None))
        torch_name = overrides.get(ms_name) or (torch_name if torch_name in torch_state else None)
        if torch_name is None:
            torch_name = next((name for name in (ms_name, pytorch_style_name(ms_name)) if name in torch_state), None)
        if torch_name is None and default is not None and shapes is not None:
            converted[ms_name] = getattr(np, default)(shapes[ms_name], dtype=np.float32)
            continue
        if torch_name is None:
            missing.append(ms_name)
            continue
        value = torch_state[torch_name]
        if shapes is not None:
            value = as_array(value)
            laid_out = to_mindspore_layout(value, shapes[ms_name], unit_axes)
            if laid_out is None:
                misshapen.append(f"{ms_name} {list(shapes[ms_name])} from {torch_name} {list(value.shape)}")
                continue
            value = laid_out
        converted[ms_name] = value
    problems = ([f"no PyTorch value for {', '.join(missing)}"] if missing else []) + (
        [f"shapes no layout explains: {'; '.join(misshapen)}"] if misshapen else [])
    if problems:
        raise ConfigError("torch_state", sorted(torch_state)[:8], "a state dict holding every MindSpore parameter, "
                          "in a layout of the layout table", detail="; ".join(problems))
    return _as_parameters(network, converted) if network is not None else converted


def _as_parameters(network: Any, arrays: dict) -> dict:
    """``{name: mindspore.Parameter}`` of the network's dtypes (what ``load_param_into_net`` accepts)."""
    import mindspore as ms

    params = {param.name: param for param in network.get_parameters()}
    return {name: ms.Parameter(ms.Tensor(np.ascontiguousarray(value), dtype=params[name].dtype), name=name,
                               requires_grad=params[name].requires_grad)
            for name, value in arrays.items()}

