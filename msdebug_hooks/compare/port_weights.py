"""The port check's first act: PyTorch's weights copied into the MindSpore cell, with no converter written by hand.

Each MindSpore parameter finds its PyTorch tensor the way :func:`~msdebug_hooks.compare.naming.convert_torch_state`
does (the user's mapping, then the layout table's names, layer by layer). What that leaves over on both sides (a
renamed container, shifted indices, another attribute name) is paired **by module structure**
(:mod:`.module_pairing`): tensors grouped by the module that holds them, the two module trees aligned in creation
order by the shapes they hold (names only break ties), then each tensor by its role inside its module (BatchNorm's
four tensors whatever order they were created in) and its shape. Shapes that differ only by size-1 axes (a layer
scale ``[C]`` against ``[C, 1, 1]``, a Dense against a 1x1 convolution) are no layout of the table: they pair by
shape algebra, the summary names them, and the copy reshapes them. A parameter nothing pairs is a one-line
``ConfigError`` naming what is left on each side, never a guess.

The pairs give the **module map** too (MindSpore cell -> PyTorch module, containers included: ``layers.0.self_attn``
-> ``blocks.0.attn``), which the layer comparison uses as its mapping, and the rules a mapping file would need (said
in the report). BatchNorm running statistics are parameters in MindSpore (``moving_mean``/``moving_variance``) and
buffers in PyTorch: they are copied like the weights; PyTorch's ``num_batches_tracked`` has no MindSpore peer.

**Constants** the model builds itself are no weights: a non-trainable MindSpore parameter that no layer of the
layout table owns (BatchNorm's running statistics are weights) and that holds integers or booleans (an index), or
that no left-over PyTorch tensor fits once everything else paired (a Swin attention mask that PyTorch computes into
an unsaved buffer), is not copied but kept and listed in the summary. The
structure pairing runs again without them, since a constant held in a module changes that module's signature. A
left-over tensor holding the tensors of several left-over sibling layers of the other side, concatenated along one
axis (one fused ``qkv`` against ``q``, ``k``, ``v``, or the reverse), is split or concatenated by
:mod:`.fused_pairing` and said in the summary, naming both sides and the axis.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np

from msdebug_hooks.compare.fused_pairing import fused_for
from msdebug_hooks.compare.layouts import pytorch_style_name, transform_between
from msdebug_hooks.compare.module_pairing import (mindspore_holders, module_map, pair_by_structure, shape_fit,
                                                  torch_holders)
from msdebug_hooks.compare.name_rules import NameMapping, suggest_rules
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
    unit_axes: list = field(default_factory=list)      # ms names paired through size-1 axes (shape algebra)
    unpaired_torch: list = field(default_factory=list)  # PyTorch tensors no MindSpore parameter took
    constants: list = field(default_factory=list)       # non-trainable ms parameters the model builds itself
    fused: list = field(default_factory=list)           # FusedPair: tensors split from / concatenated into one
    rules: list = field(default_factory=list)          # suggested mapping rules (for the structure pairs)
    copied: bool = True                                # False: the cell kept its own weights (checked, not copied)
    paths: dict = field(default_factory=dict)          # ms name -> its cell path, where the two differ (CellList)

    @property
    def by_structure(self) -> list:
        return [name for name, how in self.how.items() if how == BY_STRUCTURE]

    def layer_mapping(self, parts: Optional[Mapping[str, str]] = None) -> Optional[NameMapping]:
        """MindSpore record name -> PyTorch record name where the two differ (None when every name agrees): exact
        pairs for the layers and parameters. No rule maps what lies below a renamed container by name: containers
        that nest their layers differently would pair unlike layers, so parameter-free layers there pair by order
        and role in the comparison. A parameter is keyed by its cell path, the name ``LayerRecorder`` records it
        under. ``parts``: record-name pairs of split fused layers (:mod:`.fused_records`)."""
        named = {self.paths.get(ms, ms): torch for ms, torch in self.pairs.items()}
        pairs = {ms: torch for ms, torch in {**self.modules, **named}.items()
                 if pytorch_style_name(ms) != torch}
        pairs.update(parts or {})
        if not pairs:
            return None
        return NameMapping(pairs, [])

    def parameter_name(self, path: str) -> str:
        """The ``Parameter.name`` of the parameter at cell path ``path`` (a record's name)."""
        return next((name for name, at in self.paths.items() if at == path), path)

    def reference_state(self, state: Mapping[str, np.ndarray]) -> tuple:
        """``(state, partners)``: ``state`` with the parts of fused pairs added under their report names
        (``attn.qkv.weight[0:96]``), and MindSpore name -> the PyTorch name its values come from, parts included."""
        state, partners = dict(state), dict(self.pairs)
        for pair in self.fused:
            values = pair.mindspore_values({name: as_array(state[name]) for name in pair.torch})
            for ms_name, label in zip(pair.mindspore, pair.reference_names()):
                state[label], partners[ms_name] = values[ms_name], label
        return state, partners

    def torch_name(self, ms_layer: str) -> Optional[str]:
        """The PyTorch module name of MindSpore layer ``ms_layer``: its own entry of the module map, else its
        nearest mapped container's with the rest of the name kept (a parameter-free ``softmax`` under a renamed
        ``self_attn``), else the same name. None where that guess lands on a module the map gives to another
        MindSpore layer: the two containers nest their layers differently (a flat ``layers.2`` against
        ``conv.0.2``), and the parameter-free layer is paired by its role in the comparison instead."""
        parts = ms_layer.split(".")
        for cut in range(len(parts), 0, -1):
            head = ".".join(parts[:cut])
            if head in self.modules:
                guess = ".".join([self.modules[head]] + parts[cut:])
                if cut < len(parts) and guess in self.modules.values():
                    return None
                return guess
        return ms_layer if ms_layer not in self.modules.values() else None

    def summary(self) -> str:
        counts = {how: sum(1 for h in self.how.values() if h == how) for how in (BY_MAPPING, BY_NAME, BY_STRUCTURE)}
        verb = "copied" if self.copied else "paired (the cell's own values kept)"
        text = (f"{len(self.pairs)} parameters {verb} from PyTorch: {counts[BY_NAME]} by name"
                + (f", {counts[BY_MAPPING]} by the mapping" if counts[BY_MAPPING] else "")
                + (f", {counts[BY_STRUCTURE]} by structure (modules aligned in creation order by their tensors' "
                   f"shapes, then roles and shapes inside each)" if counts[BY_STRUCTURE] else ""))
        if self.reshaped:
            text += f"; {len(self.reshaped)} laid out by the layout table ({_listed(self.reshaped)})"
        if self.unit_axes:
            shown = ", ".join(f"{name} from {self.pairs[name]}" for name in self.unit_axes[:3])
            text += (f"; {len(self.unit_axes)} paired by shape algebra, equal once size-1 axes are dropped (no "
                     f"layout of the table; reshaped): {shown}{', ...' if len(self.unit_axes) > 3 else ''}")
        if self.constants:
            text += (f"; {len(self.constants)} non-trainable MindSpore parameters are constants the model builds "
                     f"itself (integer, or with no PyTorch tensor left for them), not copied "
                     f"({_listed(self.constants)})")
        if self.fused:
            shown = "; ".join(pair.describe() for pair in self.fused[:2])
            text += (f"; {len(self.fused)} split or concatenated (one tensor holds the tensors of sibling layers "
                     f"of the other model, by shapes): {shown}{'; ...' if len(self.fused) > 2 else ''}")
        if self.unpaired_torch:
            text += (f"; {len(self.unpaired_torch)} PyTorch tensors have no MindSpore peer "
                     f"({_listed(self.unpaired_torch)})")
        return text


def _listed(names: list, shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (", ..." if len(names) > shown else "")


def torch_state(module: Any) -> dict:
    """``{name: numpy array}`` of a module's ``state_dict`` (parameters and buffers; bfloat16 as float32)."""
    return {name: as_array(value) for name, value in module.state_dict().items()
            if name.rpartition(".")[2] not in PYTORCH_ONLY_SUFFIXES}


def pair_parameters(state: Mapping[str, np.ndarray], cell: Any, mapping: Optional[Mapping[str, str]] = None,
                    torch_module: Any = None) -> WeightCopy:
    """Pair every MindSpore parameter of ``cell`` with a PyTorch tensor of ``state`` (``mapping``: PyTorch name ->
    MindSpore name, overriding the rest): the mapping, the names of the layout table, then the module structure
    (:mod:`.module_pairing`; ``torch_module``, when given, tells which PyTorch tensors one table layer owns).
    ``ConfigError``, one line naming what is left unpaired on each side, when a parameter finds no partner."""
    params = list(cell.parameters_and_names())
    paths = {param.name: path for path, param in params}
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
    fixed = {param.name for _, param in params if not param.requires_grad and param.name not in by_rule}
    copy.constants = [name for name in left if name in fixed and _integer(cell, name)]
    left = [name for name in left if name not in copy.constants]
    free = [name for name in state if name not in taken]
    found = _by_structure(cell, left, state, free, torch_module)
    unfit = [name for name in left if name not in found and name in fixed]
    if unfit:  # paired again without them: a constant held in a module changes that module's signature
        again = _by_structure(cell, [name for name in left if name not in unfit], state, free, torch_module)
        found = again if len(again) >= len(found) else found
        rest = [state[name].shape for name in free if name not in found.values()]
        copy.constants += [name for name in left if name in fixed and name not in found
                           and not any(_fits(shapes[name], shape) for shape in rest)]
    for ms_name, torch_name in found.items():
        copy.pairs[ms_name], copy.how[ms_name] = torch_name, BY_STRUCTURE
    missing = [name for name in left if name not in copy.pairs and name not in copy.constants]
    paired = set(copy.pairs.values())
    if missing:
        copy.fused = fused_for(cell, missing, state, [name for name in state if name not in paired], torch_module,
                               copy.pairs)
        in_fused = {name for pair in copy.fused for name in pair.mindspore}
        missing = [name for name in missing if name not in in_fused]
        paired |= {name for pair in copy.fused for name in pair.torch}
    copy.unpaired_torch = [name for name in state if name not in paired]
    if missing:
        raise ConfigError("torch_module", f"a state dict of {len(state)} tensors", "a PyTorch model holding a "
                          "partner for every MindSpore parameter (by name, the layout table or the module structure)",
                          detail=f"left unpaired: MindSpore {_few(missing, shapes)}; PyTorch "
                                 f"{_few(copy.unpaired_torch, {n: tuple(state[n].shape) for n in state})}; "
                                 f"pass a mapping (PyTorch name -> MindSpore name, rules such as 'blocks.* -> "
                                 f"layers.*') where the models really are the same")
    for ms_name, torch_name in copy.pairs.items():
        if shapes[ms_name] != tuple(state[torch_name].shape):
            target = copy.reshaped if transform_between(shapes[ms_name], state[torch_name].shape) else copy.unit_axes
            target.append(ms_name)
    split = {ms: pair.torch[0] for pair in copy.fused if pair.split_reference for ms in pair.mindspore}
    copy.modules = module_map({**copy.pairs, **split}, paths, state)
    copy.modules.update({layer: pair.torch_layers[0] for pair in copy.fused if pair.split_reference
                         for layer in pair.ms_layers})
    copy.paths = {name: path for name, path in paths.items() if name != path}
    structural = [(ms, torch) for ms, torch in copy.pairs.items() if copy.how[ms] == BY_STRUCTURE]
    copy.rules = [str(rule) for rule in suggest_rules((torch, pytorch_style_name(ms)) for ms, torch in structural)]
    return copy


def _by_structure(cell: Any, left: list, state: Mapping[str, np.ndarray], free: list, torch_module: Any) -> dict:
    """MindSpore name -> PyTorch name for ``left`` among the PyTorch tensors ``free``, by module structure."""
    if not left:
        return {}
    found = pair_by_structure(mindspore_holders(cell, left), torch_holders(state, free, torch_module))
    return {ms_name: torch_name for ms_name, torch_name, _ in found}


def _integer(cell: Any, name: str) -> bool:
    """Whether parameter ``name`` of ``cell`` holds integers or booleans (an index or a mask, never a weight)."""
    param = next(param for param in cell.get_parameters() if param.name == name)
    return param.asnumpy().dtype.kind in "iub"


def _few(names: list, shapes: Mapping[str, tuple], shown: int = 4) -> str:
    """``3 (a [8, 3], b [8], c [8])``: a count and the first names with their shapes, so that a width that differs
    between the two models (mindcv's RegNet rounds a stage to 384 channels where torchvision's has 400) shows in
    the line itself."""
    if not names:
        return "0"
    listed = ", ".join(f"{name} [{', '.join(str(d) for d in shapes[name])}]" for name in names[:shown])
    return f"{len(names)} ({listed}{', ...' if len(names) > shown else ''})"


def copy_into(cell: Any, state: Mapping[str, np.ndarray], copy: WeightCopy) -> None:
    """Load the paired PyTorch values into ``cell`` in MindSpore's layouts and dtypes (``load_param_into_net``)."""
    import mindspore as ms

    from msdebug_hooks.compare.naming import convert_torch_state

    mapping = {torch: ms_name for ms_name, torch in copy.pairs.items()}
    state = dict(state)
    own = {param.name: param for param in cell.get_parameters() if param.name in copy.constants}
    for name, param in own.items():  # a constant keeps the value the cell built
        state[f"<constant {name}>"], mapping[f"<constant {name}>"] = param.asnumpy(), name
    for pair in copy.fused:          # split from (or concatenated into) one tensor
        for name, value in pair.mindspore_values({n: as_array(state[n]) for n in pair.torch}).items():
            state[f"<part {name}>"], mapping[f"<part {name}>"] = value, name
    converted = convert_torch_state(state, cell, mapping, unit_axes=bool(copy.unit_axes))
    not_loaded = ms.load_param_into_net(cell, converted, strict_load=True)
    not_loaded = not_loaded[0] if isinstance(not_loaded, tuple) else not_loaded
    if not_loaded:
        raise ConfigError("mindspore_cell", type(cell).__name__, "a cell that takes every converted parameter",
                          detail=f"not loaded: {', '.join(not_loaded[:8])}")


def _fits(shape_ms: tuple, shape_torch: tuple) -> bool:
    return shape_fit(shape_ms, shape_torch) is not None
