"""The port check's first act: PyTorch's weights copied into the MindSpore cell, with no converter written by hand.

Each MindSpore parameter finds its PyTorch tensor the way :func:`~msdebug_hooks.compare.naming.convert_torch_state`
does (the user's mapping, then the layout table's names, layer by layer). A port whose attribute names differ
(``layers.0.self_attn.wq`` for ``blocks.0.attn.q_proj``) leaves parameters over on both sides; those are paired by
**structure**: both frameworks list parameters in the order the layers were created, so the left-over parameters
are walked in that order and each takes the next left-over PyTorch tensor of the same parameter name (``weight``,
``bias``, ``running_mean``, after the naming map) whose shape fits through a layout of the table. A pairing that
cannot be completed is a ``ConfigError`` naming what is left, never a guess.

The pairs give the **module map** too (MindSpore layer name -> PyTorch module name, containers included:
``layers.0.self_attn`` -> ``blocks.0.attn``), which the layer comparison uses as its mapping, and the rules a
mapping file would need (said in the report). BatchNorm running statistics are parameters in MindSpore
(``moving_mean``/``moving_variance``) and buffers in PyTorch: they are copied like the weights; PyTorch's
``num_batches_tracked`` has no MindSpore peer.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np

from msdebug_hooks.compare.layouts import pytorch_style_name, transform_between
from msdebug_hooks.compare.name_rules import NameMapping, NameRule, suggest_rules
from msdebug_hooks.compare.naming import PYTORCH_ONLY_SUFFIXES
from msdebug_hooks.compare.state_conversion import _overrides, _rule_names, as_array
from msdebug_hooks.errors import ConfigError

BY_MAPPING, BY_NAME, BY_STRUCTURE = "mapping", "name", "structure"


@dataclass
class WeightCopy:
    """What was copied: MindSpore parameter -> (PyTorch name, how it was paired), and the module map."""

    pairs: dict = field(default_factory=dict)          # ms name -> torch name
    how: dict = field(default_factory=dict)            # ms name -> BY_MAPPING / BY_NAME / BY_STRUCTURE
    modules: dict = field(default_factory=dict)        # ms layer/container name -> torch module name
    reshaped: list = field(default_factory=list)       # ms names whose layout the table transformed
    rules: list = field(default_factory=list)          # suggested mapping rules (for the structure pairs)
    copied: bool = True                                # False: the cell kept its own weights (checked, not copied)

    @property
    def by_structure(self) -> list:
        return [name for name, how in self.how.items() if how == BY_STRUCTURE]

    def layer_mapping(self) -> Optional[NameMapping]:
        """MindSpore record name -> PyTorch record name where the two differ (None when every name agrees): exact
        pairs for the layers and parameters, a rule per renamed container for what lies below it (``relu#1``)."""
        pairs = {ms: torch for ms, torch in {**self.modules, **self.pairs}.items()
                 if pytorch_style_name(ms) != torch}
        if not pairs:
            return None
        rules = [NameRule(f"{ms}.*", f"{torch}.*") for ms, torch in
                 sorted(self.modules.items(), key=lambda item: -item[0].count(".")) if ms != torch and ms]
        return NameMapping(pairs, rules)

    def torch_name(self, ms_layer: str) -> str:
        """The PyTorch module name of MindSpore layer ``ms_layer``: its own entry of the module map, else its
        nearest mapped container's with the rest of the name kept (a parameter-free ``softmax`` under a renamed
        ``self_attn``), else the same name."""
        parts = ms_layer.split(".")
        for cut in range(len(parts), 0, -1):
            head = ".".join(parts[:cut])
            if head in self.modules:
                return ".".join([self.modules[head]] + parts[cut:])
        return ms_layer

    def summary(self) -> str:
        counts = {how: sum(1 for h in self.how.values() if h == how) for how in (BY_MAPPING, BY_NAME, BY_STRUCTURE)}
        verb = "copied" if self.copied else "paired (the cell's own values kept)"
        text = (f"{len(self.pairs)} parameters {verb} from PyTorch: {counts[BY_NAME]} by name"
                + (f", {counts[BY_MAPPING]} by the mapping" if counts[BY_MAPPING] else "")
                + (f", {counts[BY_STRUCTURE]} by structure (creation order, parameter name and shape)"
                   if counts[BY_STRUCTURE] else ""))
        if self.reshaped:
            text += f"; {len(self.reshaped)} laid out by the layout table ({', '.join(self.reshaped[:3])}"
            text += ", ...)" if len(self.reshaped) > 3 else ")"
        return text


def torch_state(module: Any) -> dict:
    """``{name: numpy array}`` of a module's ``state_dict`` (parameters and buffers; bfloat16 as float32)."""
    return {name: as_array(value) for name, value in module.state_dict().items()
            if name.rpartition(".")[2] not in PYTORCH_ONLY_SUFFIXES}


def pair_parameters(state: Mapping[str, np.ndarray], cell: Any,
                    mapping: Optional[Mapping[str, str]] = None) -> WeightCopy:
    """Pair every MindSpore parameter of ``cell`` with a PyTorch tensor of ``state`` (``mapping``: PyTorch name ->
    MindSpore name, overriding the rest). ``ConfigError`` naming what found no partner."""
    params = list(cell.parameters_and_names())
    shapes = {param.name: tuple(param.shape) for _, param in params}
    by_rule = _rule_names(cell)
    overrides = _overrides(state, mapping)
    copy = WeightCopy()
    taken: set = set()
    left: list = []
    for _, param in params:
        name = param.name
        candidates = [(overrides.get(name), BY_MAPPING), (by_rule.get(name, (None,))[0], BY_NAME),
                      (name, BY_NAME), (pytorch_style_name(name), BY_NAME)]
        found = next(((torch, how) for torch, how in candidates
                      if torch in state and torch not in taken and _fits(shapes[name], state[torch].shape)), None)
        if found is None:
            left.append(name)
            continue
        copy.pairs[name], copy.how[name] = found
        taken.add(found[0])
    free = [name for name in state if name not in taken]
    for name in left:  # structure: creation order, the same parameter name, a shape that fits
        leaf = _leaf(by_rule.get(name, (None,))[0] or pytorch_style_name(name))
        index = next((i for i, torch in enumerate(free)
                      if _leaf(torch) == leaf and _fits(shapes[name], state[torch].shape)), None)
        if index is None:
            continue
        copy.pairs[name], copy.how[name] = free[index], BY_STRUCTURE
        del free[:index + 1]  # later parameters pair only with later tensors: the order is the structure
    missing = [name for name in left if name not in copy.pairs]
    if missing:
        raise ConfigError("torch_module", sorted(state)[:6], "a PyTorch model holding a tensor for every MindSpore "
                          "parameter (by name, the layout table, or the same structure)",
                          detail=f"no partner for {', '.join(missing[:8])}"
                          + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
                          + "; pass a mapping (PyTorch name -> MindSpore name, rules such as 'blocks.* -> layers.*')")
    copy.reshaped = [name for name, torch in copy.pairs.items() if shapes[name] != tuple(state[torch].shape)]
    copy.modules = _module_map(copy.pairs)
    structural = [(ms, torch) for ms, torch in copy.pairs.items() if copy.how[ms] == BY_STRUCTURE]
    copy.rules = [str(rule) for rule in suggest_rules((torch, pytorch_style_name(ms)) for ms, torch in structural)]
    return copy


def copy_into(cell: Any, state: Mapping[str, np.ndarray], copy: WeightCopy) -> None:
    """Load the paired PyTorch values into ``cell`` in MindSpore's layouts and dtypes (``load_param_into_net``)."""
    import mindspore as ms

    from msdebug_hooks.compare.naming import convert_torch_state

    mapping = {torch: ms_name for ms_name, torch in copy.pairs.items()}
    converted = convert_torch_state(dict(state), cell, mapping)
    not_loaded = ms.load_param_into_net(cell, converted, strict_load=True)
    not_loaded = not_loaded[0] if isinstance(not_loaded, tuple) else not_loaded
    if not_loaded:
        raise ConfigError("mindspore_cell", type(cell).__name__, "a cell that takes every converted parameter",
                          detail=f"not loaded: {', '.join(not_loaded[:8])}")


def _leaf(name: str) -> str:
    return name.rpartition(".")[2]


def _fits(shape_ms: tuple, shape_torch: tuple) -> bool:
    return transform_between(shape_ms, shape_torch) is not None


def _module_map(pairs: Mapping[str, str]) -> dict:
    """MindSpore module name -> PyTorch module name, from the parameter pairs: strip the parameter's own name
    (and MindSpore's inner parts such as BatchNorm3d's ``bn2d``), then walk both paths up together."""
    modules: dict = {"": ""}
    for ms_name, torch_name in pairs.items():
        ms_parts = pytorch_style_name(ms_name).split(".")[:-1]
        torch_parts = torch_name.split(".")[:-1]
        # the module that holds the parameter, minus MindSpore-only inner parts the naming map dropped
        ms_layer = ms_name.split(".")[:len(ms_parts)]
        while ms_layer and torch_parts:
            modules.setdefault(".".join(ms_layer), ".".join(torch_parts))
            ms_layer, torch_parts = ms_layer[:-1], torch_parts[:-1]
    modules.pop("", None)
    return modules
