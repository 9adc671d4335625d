"""Parameter-free layers: the role each plays, and how the two sides' are paired and judged.

A port and its reference rarely have the same parameter-free layers: PyTorch calls ``torch.relu`` where the port
has an ``nn.ReLU`` cell, timm's ViT holds ``nn.Identity`` norms, MindSpore models keep ``Dropout`` cells PyTorch's
lack, an ``AdaptiveAvgPool2d`` + ``Flatten`` stands for a ``mean``. Their names shift too. So, between two paired
layers, the parameter-free layers left over on both sides are paired **by order and role**, whatever their types:

* the role of a layer comes from its class (:func:`role_of`; a layer built of parameter-free children, such as a
  ``Swish`` holding a ``Sigmoid``, plays theirs: :func:`msdebug_hooks.compare.role_names.layer_role`):
  ``activation`` (an activation of the layout table,
  either framework's name, case aside), ``pooling`` (a class name holding ``Pool``), ``dropout`` (``Drop``:
  ``Dropout``, ``DropPath``), ``identity`` (``Identity``), ``reshape`` (``Flatten``, ``Unflatten``, ``Reshape``);
* a layer is parameter-free when no parameter or gradient record of the capture lies under its name (a ``PReLU``
  holds one and is not); a class of no role above (a ``Pad`` cell) is parameter-free only where the capture records
  parameters or gradients at all, and then plays :data:`OTHER`, which pairs with nothing by role;
* two records pair when they have the same role, lie between the same two paired neighbours on their sides, come
  in the same order, and their shapes agree directly or after dropping unit axes (``[N, C, 1, 1]`` of a pool against
  ``[N, C]`` of a mean: :func:`squeezable`, the values then compared squeezed).

Such a pair is compared like any other; two activations of different types that differ are the finding at that
layer ("A computes ReLU where B computes GELU"). A parameter-free record still without a partner is a note, not a
difference: its values reach the next paired layer, whose comparison judges them. It is named as the cause only
where that next layer differs because its input differs, the record comes after the last leftover whose output
still holds the values the other side feeds that layer, and it changes values (:func:`find_suspects`).
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional, Sequence

import numpy as np

from msdebug_hooks.compare import attribution
from msdebug_hooks.compare.layer_capture import (FORWARD_OUTPUT, PARAMETER, PARAMETER_GRADIENT, Capture, CaptureError,
                                                 LayerRecord)
from msdebug_hooks.compare.layouts import pairable_by_shape
from msdebug_hooks.compare.role_names import (ACTIVATION, DROPOUT, IDENTITY, OTHER, POOLING, RESHAPE,  # noqa: F401
                                              VALUE_PRESERVING, layer_role, role_of)
from msdebug_hooks.compare.replay import layer_candidates
from msdebug_hooks.errors import ConfigError

class FreeRecord(NamedTuple):
    """A parameter-free layer's output record without a partner: which side, the record, its role and class."""

    side: str            # "A" or "B"
    record: LayerRecord
    role: str
    layer_type: str

    def describe(self) -> str:
        return f"{self.side}'s {self.record.name} ({self.layer_type}, {self.role})"


def layer_type(record: LayerRecord, types: Mapping[str, str]) -> Optional[str]:
    """The class of the layer whose output ``record`` is, when the capture names it."""
    return next((types[name] for name in layer_candidates(record.name) if name in types), None)


def parameter_layers(records: Sequence[LayerRecord]) -> set:
    """The layer names under which a parameter or gradient record lies (``fc.weight`` -> ``fc``, and above)."""
    found = set()
    for record in records:
        if record.kind in (PARAMETER, PARAMETER_GRADIENT):
            parts = record.name.split(".")[:-1]
            found.update(".".join(parts[:cut]) for cut in range(1, len(parts) + 1))
    return found


def free_role(record: LayerRecord, types: Mapping[str, str], holders: set) -> Optional[str]:
    """The role of a forward output of a parameter-free layer, None for any other record.

    ``holders``: the layers with parameters (:func:`parameter_layers`). Where the capture records parameters or
    gradients at all, a layer with none under it and no role of its own (a ``Pad`` cell) plays :data:`OTHER`; where
    it records none, only the roles' classes are known to be parameter-free."""
    if record.kind != FORWARD_OUTPUT:
        return None
    layer = next((name for name in layer_candidates(record.name) if name in types), None)
    if layer is None or layer in holders:
        return None
    role = layer_role(layer, types)
    return OTHER if role is None and holders else role


#: the role given to a layer with parameters whose output has no partner while all its parameters do
PAIRED_PARAMETERS = "parameters paired"


def unpaired_free(side: str, only: Sequence[LayerRecord], records: Sequence[LayerRecord], types: Mapping[str, str],
                  paired: set) -> list:
    """The :class:`FreeRecord` s among ``only`` (one side's records without a partner; ``records`` all of that
    side's, ``paired`` the ids of its paired records): outputs of parameter-free layers (:func:`free_role`), and
    outputs of layers holding parameters whose parameter and gradient records are all paired and compared (a
    layer computing what the other model computes inline, such as a relative position bias the other's attention
    adds in its own forward) and followed by a paired output. Neither is a difference by itself: the parameters are
    judged by their own records, and the output's values reach the next paired layer, which is compared."""
    under: dict = {}    # layer -> the parameter and gradient records under it (its keys: parameter_layers)
    for record in records:
        if record.kind in (PARAMETER, PARAMETER_GRADIENT):
            parts = record.name.split(".")[:-1]
            for cut in range(1, len(parts) + 1):
                under.setdefault(".".join(parts[:cut]), []).append(record)
    holders = set(under)
    last_paired = max((r.order for r in records if r.kind == FORWARD_OUTPUT and id(r) in paired), default=-1)
    found = []
    for record in only:
        role = free_role(record, types, holders)
        if role is None and record.kind == FORWARD_OUTPUT and record.order < last_paired:
            layer = next((name for name in layer_candidates(record.name) if name in types), None)
            if layer in under and all(id(r) in paired for r in under[layer]):
                role = PAIRED_PARAMETERS
        if role is not None:
            found.append(FreeRecord(side, record, role, layer_type(record, types) or ""))
    return found


def squeezable(shape_a: Sequence[int], shape_b: Sequence[int]) -> bool:
    """Whether two shapes differ only by unit axes (``[2, 8, 1, 1]`` and ``[2, 8]``)."""
    return tuple(shape_a) != tuple(shape_b) and [d for d in shape_a if d != 1] == [d for d in shape_b if d != 1]


def pair_by_role(pairs: list, rest_a: list, rest_b: list, roles_a: Mapping[int, str],
                 roles_b: Mapping[int, str]) -> tuple[list, list, list]:
    """``(new pairs, still unmatched A, still unmatched B)``: A's parameter-free forward records left over paired
    with B's, by order and role, between the B positions of A's nearest paired neighbours (see the module doc).

    Layers that change values (activations, pools) are paired first, then those that keep them (dropout, identity,
    reshape) between the pairs made so: a dropout placed before an activation on one side and after it on the other
    is then left unpaired, instead of pairing the two dropouts across the activation and comparing values taken on
    either side of it. ``pairs``: the ``(a, b, how)`` pairs so far; ``roles_a``/``roles_b``: ``id(record)`` -> role
    of the parameter-free records."""
    anchors = [(a.order, b.order) for a, b, _ in pairs if a.kind == FORWARD_OUTPUT]
    free_b = {id(b): b for b in rest_b}
    found: list = []
    for wanted in ((ACTIVATION, POOLING), VALUE_PRESERVING):
        last_b = -1
        for a in rest_a:
            role = roles_a.get(id(a))
            if role not in wanted or any(a is done for done, _ in found):
                continue
            after = max((ob for oa, ob in anchors if oa < a.order), default=-1)
            before = min((ob for oa, ob in anchors if oa > a.order), default=float("inf"))
            start = max(after, last_b)
            candidate = next((b for b in rest_b if id(b) in free_b and roles_b.get(id(b)) == role
                              and start < b.order < before and _shapes_pair(a.shape, b.shape)), None)
            if candidate is not None:
                del free_b[id(candidate)]
                last_b = candidate.order
                found.append((a, candidate))
                anchors.append((a.order, candidate.order))
    paired = {id(a) for a, _ in found}
    return found, [a for a in rest_a if id(a) not in paired], [b for b in rest_b if id(b) in free_b]


def _shapes_pair(shape_a: Sequence[int], shape_b: Sequence[int]) -> bool:
    return pairable_by_shape(shape_a, shape_b) or squeezable(shape_a, shape_b)


def same_values(a: np.ndarray, b: np.ndarray, floor: float) -> bool:
    """Whether two arrays hold the same values to ``floor`` (relative L2), reshaped when only unit axes differ or
    when a reshape of the same values (flatten) is all that parts them."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        if a.size != b.size:
            return False
        a = a.reshape(b.shape)
    scale = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b)) <= floor * max(scale, 1e-12)


def find_suspects(report: Any, index: int, side_a: tuple, side_b: tuple) -> list:
    """The unpaired parameter-free layers the finding's difference may start at (``FreeRecord``, A's first).

    The finding is ``report.pairs[index]`` of a ``LayerComparison``; ``side_a``/``side_b`` are ``(Capture, step)``.
    None when its replay says ``own`` (the layer itself computes differently). Else, on each side, the unpaired
    parameter-free layers between the paired forward record before the finding and the finding's layer (the gap):

    * the gap's layers up to the last one whose output holds the values the other side feeds the finding's layer
      are explained (the other side computes the same without a layer: ``torch.relu``, a ``mean``);
    * of the layers after it, those that change values are suspects: their output is not their own recorded input
      (an identity, a dropout in eval, a flatten keep it); without recorded inputs, every layer but those roles.
    """
    from msdebug_hooks.compare.layer_replay import OWN

    if report.replay is not None and report.replay.verdict == OWN:
        return []
    pair = report.pairs[index]
    forward = [p for p in report.pairs if p.record_a.kind == FORWARD_OUTPUT]
    floor = attribution.FORWARD_FLOOR[attribution.coarser_dtype(pair.record_a.source_dtype,
                                                                pair.record_b.source_dtype)]
    suspects = []
    for side, (cap, step), (other, other_step), own, fed in (("A", side_a, side_b, "record_a", pair.record_b),
                                                               ("B", side_b, side_a, "record_b", pair.record_a)):
        after = max((getattr(p, own).order for p in forward if getattr(p, own).order < getattr(pair, own).order),
                    default=-1)
        gap = sorted((f for f in report.unpaired_free if f.side == side
                      and after < f.record.order < getattr(pair, own).order), key=lambda f: f.record.order)
        outputs = {}
        for free in gap:
            try:
                outputs[id(free)] = cap.load(free.record)
            except CaptureError:
                continue
        fed_input = _first_input(other, other_step, fed.name)
        if fed_input is not None:   # the gap's layers up to the last one the other side's input matches are explained
            matched = [i for i, free in enumerate(gap)
                       if id(free) in outputs and same_values(outputs[id(free)], fed_input, floor)]
            gap = gap[matched[-1] + 1:] if matched else gap
        for free in gap:
            own_input = _first_input(cap, step, free.record.name)
            keeps = (free.role in VALUE_PRESERVING if own_input is None or id(free) not in outputs
                     else same_values(outputs[id(free)], own_input, floor))
            if not keeps:
                suspects.append(free)
    return suspects


def _first_input(capture: Capture, step: int, name: str) -> Any:
    """The first recorded input of a layer's call, or None when the capture holds none."""
    from msdebug_hooks.compare.replay import layer_inputs

    try:
        inputs = layer_inputs(capture, step, name)
    except (ConfigError, CaptureError):
        return None
    return inputs[0] if inputs else None
