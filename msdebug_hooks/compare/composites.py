"""Composite layers: a layer that applies parameter-free child layers inside its own forward, compared as one layer.

Which cells are composites is decided when recording, by structure and ``isinstance``, never by a class or module
name (:func:`msdebug_hooks.compare.layer_selection.composite_kind`); both are recorded as one layer, by output:

* a **parameter-free composite**: children only of parameter-free roles, no parameter or buffer below, one input
  (mindcv's ``Swish`` computes ``x * sigmoid(x)`` with a ``Sigmoid`` child; a ``DropPath`` holds a ``Dropout``;
  timm's ``SelectAdaptivePool2d`` a pool and a flatten). It plays its children's role
  (:func:`msdebug_hooks.compare.role_names.layer_role`), so it pairs by role with the other side's ``SiLU``;
* a **layer composite**: an instance of a layer of the layout table holding its own parameters, whose forward
  applies parameter-free children after its own computation (timm's ``BatchNormAct2d``: normalize, then its
  ``drop`` and ``act``). Its output is the activation's. Here (:func:`pair_runs`) the other side's **run** of layers
  it covers -- the layer paired with it (whose parameters are the composite's), then the layers after it whose roles
  are the composite's children's, in order (a value-keeping child, an ``Identity``, may be absent there) -- is
  compared with it as one: the run's last output against the composite's, under the run's first layer's name (or,
  where a later layer of the run is another layer of the table than the child it stands for, a ``LeakyReLU`` for
  a ``ReLU``, under that one's), and replayed as the run. The outputs inside the run have no partner by
  construction: a note, never a difference.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from msdebug_hooks.compare.layer_capture import FORWARD_OUTPUT
from msdebug_hooks.compare.layouts import layout_of
from msdebug_hooks.compare.replay import layer_candidates
from msdebug_hooks.compare.role_names import VALUE_PRESERVING, child_names, layer_role


# --- comparing: runs -------------------------------------------------------------------------------------------
def composite_roles(layer: str, types: Mapping[str, str], holders: set) -> Optional[list]:
    """``[(child, role), ...]`` of a layer composite's children, in order; None when ``layer`` is not one (it holds
    no parameter record, or a child has no parameter-free role)."""
    if layer not in holders:
        return None
    roles = [(child, layer_role(child, types)) for child in child_names(layer, types)]
    return roles if roles and all(role is not None for _, role in roles) else None


def _layer_of(record: Any, types: Mapping[str, str]) -> Optional[str]:
    return next((name for name in layer_candidates(record.name) if name in types), None)


def _run(head: Any, roles: list, forward: list, free: set, types: Mapping[str, str], holders: set) -> list:
    """``[(record, child), ...]``: the records after ``head`` (in ``forward``, its side's outputs in order) that the
    composite's children cover: each unpaired, parameter-free, of the child's role; a value-keeping child may be
    missing."""
    run = []
    position = next(i for i, record in enumerate(forward) if record is head) + 1
    for child, role in roles:
        record = forward[position] if position < len(forward) else None
        layer = None if record is None else _layer_of(record, types)
        if record is not None and id(record) in free and layer is not None and layer not in holders \
                and layer_role(layer, types) == role:
            run.append((record, child))
            position += 1
        elif role not in VALUE_PRESERVING:
            break
    return run


def _named(head: Any, run: list, plain: int, types: tuple, frameworks: tuple) -> Any:
    """The record a run is named by: its first layer (the one holding the composite's parameters), unless a later
    one is a layer of the layout table other than the composite's child it stands for (a ``LeakyReLU`` where the
    composite applies a ``ReLU``): then that one, where the two differ."""
    for record, child in run:
        mine = layout_of(frameworks[plain], types[plain].get(_layer_of(record, types[plain]) or "", ""))
        theirs = layout_of(frameworks[1 - plain], types[1 - plain].get(child, ""))
        if mine is not None and theirs is not None and mine is not theirs:
            return record
    return head


def pair_runs(pairs: list, records: tuple, unmatched: tuple, types: tuple, holders: tuple,
              frameworks: tuple = ("mindspore", "pytorch")) -> tuple:
    """``(pairs, unmatched_a, unmatched_b, runs, covered)``: each forward pair of a layer composite on one side and a
    plain layer on the other re-paired with the run of layers the composite covers (see the module doc).

    ``pairs``: ``RecordPair``-like ``(a, b, how)`` tuples; ``records``/``unmatched``/``types``/``holders``/
    ``frameworks``: A's and B's. ``runs``: ``id(new pair)`` -> ``(run of A's layer names, run of B's)`` (empty: the
    record's own layer); ``covered``: ``(side, record, composite)`` for the outputs inside a run, compared through
    the run's last one."""
    forward = [[r for r in side if r.kind == FORWARD_OUTPUT] for side in records]
    free = [{id(r) for r in side} for side in unmatched]
    out, runs, covered = [], {}, []
    for pair in pairs:
        a, b = pair[0], pair[1]
        if a.kind != FORWARD_OUTPUT:
            out.append(pair)
            continue
        layers = (_layer_of(a, types[0]), _layer_of(b, types[1]))
        roles = [None if layers[s] is None else composite_roles(layers[s], types[s], holders[s]) for s in (0, 1)]
        side = 1 if roles[1] is not None and roles[0] is None else 0 if roles[0] is not None and roles[1] is None \
            else None
        if side is None:
            out.append(pair)
            continue
        plain = 1 - side
        head = (a, b)[plain]
        run = _run(head, roles[side], forward[plain], free[plain], types[plain], holders[plain])
        if not run:
            out.append(pair)
            continue
        last = dataclasses.replace(run[-1][0], name=_named(head, run, plain, types, frameworks).name)
        new = type(pair)(*((last, b) if plain == 0 else (a, last)), *pair[2:])
        names = tuple(_layer_of(r, types[plain]) or r.name for r in [head, *(record for record, _ in run)])
        runs[id(new)] = (names, ()) if plain == 0 else ((), names)
        for record in [head, *(record for record, _ in run[:-1])]:
            covered.append(("AB"[plain], record, layers[side]))
        for record, _ in run:
            free[plain].discard(id(record))
        out.append(new)
    rest = tuple([r for r in side if id(r) in free[s]] for s, side in enumerate(unmatched))
    return out, rest[0], rest[1], runs, covered


def covered_note(covered: list) -> str:
    """The note listing the outputs inside runs that composites cover (``pair_runs``' ``covered``)."""
    shown = ", ".join(f"{side}'s {record.name} (in {'B' if side == 'A' else 'A'}'s {composite})"
                      for side, record, composite in covered[:6])
    more = f" and {len(covered) - 6} more" if len(covered) > 6 else ""
    return (f"{len(covered)} output(s) lie inside a composite layer of the other side (a layer that applies its "
            f"parameter-free children, such as an activation, in its own forward): each run of layers is compared "
            f"with the composite as one, by its last output, under its first layer's name: {shown}{more}")
