"""Which record of capture A goes with which of capture B.

Strongest first: the user's mapping (exact pairs, then prefix rules: ``NameMapping.lookup``); the same name, for
parameters and gradients tried as written and then through the MindSpore <-> PyTorch naming map
(:func:`msdebug_hooks.compare.naming.name_candidates`); then, for what is left, execution order and shape -- the
next unmatched record of B between the B positions of A's nearest matched neighbours, of the same kind, whose shape
agrees directly or through a layout of the table (a Conv1d weight's gradient ``[o, i, 1, k]`` with ``[o, i, k]``),
and, where the captures name the layers' classes, of the same layer type and parameter-free role: a shape
coincidence never pairs unlike layers (a time-major ``[T, B, H]`` inner LSTM cell with a batch-major ``[B, T, H]``
output when T equals B);
last, the parameter-free layers still left over on both sides (with those that keep their input's values: dropout,
identity, reshape, which order+shape leaves to this step), by order and role whatever their types (an
``nn.ReLU`` with a ``GELU`` whose names shifted, a pool ``[N, C, 1, 1]`` with a ``[N, C]`` one:
:mod:`msdebug_hooks.compare.layer_roles`).
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, NamedTuple, Optional

from msdebug_hooks.compare.layer_capture import FORWARD_OUTPUT, LayerRecord
from msdebug_hooks.compare.composites import pair_runs
from msdebug_hooks.compare.layer_roles import VALUE_PRESERVING, free_role, pair_by_role, parameter_layers
from msdebug_hooks.compare.layouts import pairable_by_shape
from msdebug_hooks.compare.naming import name_candidates
from msdebug_hooks.compare.role_names import layer_role
from msdebug_hooks.compare.replay import layer_candidates

MATCHED_BY_MAPPING = "mapping"
MATCHED_BY_NAME = "name"
MATCHED_BY_ORDER = "order+shape"
MATCHED_BY_ROLE = "order+role"


class RecordPair(NamedTuple):
    """A record of capture A, the one of capture B it is compared with, and how they were paired (``MATCHED_BY_*``)."""

    a: LayerRecord
    b: LayerRecord
    matched_by: str


class RecordMatching(NamedTuple):
    """``match_records``' answer: the pairs (forward outputs first, each kind in A's order) and what is left over."""

    pairs: list[RecordPair]
    unmatched_a: list[LayerRecord]
    unmatched_b: list[LayerRecord]
    #: ``id(pair)`` -> (A's layer names, B's) a pair stands for, where a composite layer covers a run of layers
    runs: dict = {}
    #: ``(side, record, composite)``: outputs inside a run a composite covers (:mod:`.composites`)
    covered: list = []


class FoldedRecords(NamedTuple):
    """Both sides' records with the sequential containers resolved, and the notes that say what was set aside."""

    records_a: list[LayerRecord]
    records_b: list[LayerRecord]
    notes: list[str]


def match_records(records_a: list, records_b: list, framework_a: str, framework_b: str,
                  mapping: Optional[Mapping[str, str]] = None, *,
                  layer_types: tuple[Mapping[str, str], Mapping[str, str]] = ({}, {})) -> RecordMatching:
    """The records paired by mapping, then name, then order and shape, then (parameter-free layers) order and role,
    and those left over.

    ``layer_types``: each capture's layer name -> class name (``Capture.layer_types``), for the order+shape and the
    order+role steps (without them the role step pairs nothing)."""
    mapping = mapping if mapping is not None else {}
    free_b = {id(b): b for b in records_b}
    pairs: list[RecordPair] = []
    by_name_b = {(b.kind, b.name): b for b in records_b}
    by_key_b: dict = {}
    for b in records_b:
        for key in _keys(b, framework_b):
            by_key_b.setdefault((b.kind, key), b)
    rest_a = []
    for a in records_a:
        mapped = _mapped(mapping, a.name)
        b, how = (by_name_b.get((a.kind, mapped)) if mapped is not None else None), MATCHED_BY_MAPPING
        if b is None and mapped is None:
            b = next((found for key in _keys(a, framework_a)
                      if (found := by_key_b.get((a.kind, key))) is not None and id(found) in free_b), None)
            how = MATCHED_BY_NAME
        if b is not None and id(b) in free_b:
            del free_b[id(b)]
            pairs.append(RecordPair(a, b, how))
        else:
            rest_a.append(a)
    order_b = [b for b in records_b if id(b) in free_b]
    unmatched_a = []
    for a in rest_a:  # between the B positions of A's nearest matched neighbours
        same_kind = [(pa.order, b.order) for pa, b, _ in pairs if pa.kind == a.kind]
        after = max((ob for oa, ob in same_kind if oa < a.order), default=-1)
        before = min((ob for oa, ob in same_kind if oa > a.order), default=float("inf"))
        layer_a = _layer(a, framework_a, layer_types[0])
        if layer_a is not None and layer_role(layer_a[2], layer_types[0]) in VALUE_PRESERVING:
            unmatched_a.append(a)   # paired by role below, after the layers that change values
            continue
        candidate = next((b for b in order_b if id(b) in free_b and b.kind == a.kind and after < b.order < before
                          and _same_role(layer_a, layer_b := _layer(b, framework_b, layer_types[1]), layer_types)
                          and pairable_by_shape(a.shape, b.shape, layer_a and layer_a[:2], layer_b and layer_b[:2])),
                         None)
        if candidate is None:
            unmatched_a.append(a)
        else:
            del free_b[id(candidate)]
            pairs.append(RecordPair(a, candidate, MATCHED_BY_ORDER))
    unmatched_b = [b for b in records_b if id(b) in free_b]
    holders_a, holders_b = parameter_layers(records_a), parameter_layers(records_b)
    pairs, unmatched_a, unmatched_b, runs, covered = pair_runs(pairs, (records_a, records_b),
                                                               (unmatched_a, unmatched_b), layer_types,
                                                               (holders_a, holders_b), (framework_a, framework_b))
    roles_a = {id(a): role for a in unmatched_a if (role := free_role(a, layer_types[0], holders_a)) is not None}
    roles_b = {id(b): role for b in unmatched_b if (role := free_role(b, layer_types[1], holders_b)) is not None}
    by_role, unmatched_a, unmatched_b = pair_by_role(pairs, unmatched_a, unmatched_b, roles_a, roles_b)
    pairs += [RecordPair(a, b, MATCHED_BY_ROLE) for a, b in by_role]
    pairs.sort(key=lambda pair: (pair.a.kind != FORWARD_OUTPUT, pair.a.order))
    return RecordMatching(pairs, unmatched_a, unmatched_b, runs, covered)


def _mapped(mapping: Mapping[str, str], name: str) -> Optional[str]:
    """B's name for A's ``name`` by the user's mapping: exact pairs, then its prefix rules (``NameMapping.lookup``)."""
    lookup = getattr(mapping, "lookup", None)
    return lookup(name) if lookup is not None else mapping.get(name)


def _keys(record: LayerRecord, framework: str) -> tuple:
    """The names a record is matched under: a layer's name as recorded; a parameter's as written, then canonical."""
    return (record.name,) if record.kind == FORWARD_OUTPUT else name_candidates(record.name, framework)


def _same_role(layer_a: Optional[tuple], layer_b: Optional[tuple], types: tuple) -> bool:
    """Whether two layers play the same parameter-free role (or none): an order+shape coincidence never pairs a
    ``Dropout`` with an ``Identity``, whose classes the layout table knows neither of."""
    if layer_a is None or layer_b is None:
        return True
    return layer_role(layer_a[2], types[0]) == layer_role(layer_b[2], types[1])


def _layer(record: LayerRecord, framework: str, types: Mapping[str, str]) -> Optional[tuple]:
    """``(framework, class name, layer name)`` of the layer that produced ``record``, when its capture says."""
    if not types:
        return None
    names = layer_candidates(record.name) if record.kind == FORWARD_OUTPUT else [record.name.rpartition(".")[0]]
    found = next((name for name in names if name in types), None)
    return None if found is None else (framework, types[found], found)


def fold_containers(records_a: list, records_b: list, containers_a: Mapping[str, list],
                    containers_b: Mapping[str, list]) -> FoldedRecords:
    """Both sides' records with each side's sequential-container records resolved: dropped where the
    layers inside were recorded (they say more), or standing for the last of them where they were not (GRAPH_MODE
    runs no hook inside a ``SequentialCell``; its output is its last layer's). The other side's records of the
    layers that could not be seen are set aside, said in a note, so they are not reported as missing."""
    notes: list = []
    records_a, hidden_b = _fold_side(records_a, containers_a, "A", notes)
    records_b, hidden_a = _fold_side(records_b, containers_b, "B", notes)
    return FoldedRecords([r for r in records_a if _base(r) not in hidden_a],
                         [r for r in records_b if _base(r) not in hidden_b], notes)


def _base(record: LayerRecord) -> str:
    return record.name.split("#", 1)[0]


def _fold_side(records: list, containers: Mapping[str, list], side: str, notes: list) -> tuple[list, set]:
    recorded = {_base(r) for r in records if r.kind == FORWARD_OUTPUT}
    renamed: dict = {}
    dropped: set = set()
    hidden: set = set()
    for container, inside in containers.items():
        if container not in recorded:
            continue
        if any(layer in recorded for layer in inside):
            dropped.add(container)
            continue
        renamed[container] = inside[-1]
        hidden.update(inside[:-1])
        notes.append(f"{side} recorded no layer inside {container} (in GRAPH_MODE MindSpore runs no hook of a cell "
                     f"inside a SequentialCell): its output is compared as {inside[-1]}'s"
                     + (f"; {', '.join(inside[:-1])} not compared" if inside[:-1] else ""))
    out = []
    for record in records:
        base, _, call = record.name.partition("#")
        if record.kind != FORWARD_OUTPUT or base not in renamed and base not in dropped:
            out.append(record)
        elif base in renamed:
            out.append(dataclasses.replace(record, name=renamed[base] + (f"#{call}" if call else "")))
    return out, hidden
