"""The records of a fused layer split into the parts the other model computes separately, so that the layer
comparison pairs them one to one (:mod:`.fused_pairing` found the weights: timm's ``qkv`` Linear against a port's
``q``, ``k``, ``v`` Dense layers).

For each fused pair the fused side's records are split:

* the fused tensor's **parameter and gradient** records along the pair's axis (``attn.qkv.weight`` ->
  ``attn.qkv.weight[0:96]``, ``[96:192]``, ...), each compared with the part's own record;
* the fused layer's **forward outputs** along the one axis on which the parts' outputs concatenate into it (found
  from the shapes: every other axis equal, the sizes adding up; a layer whose outputs do not concatenate so is not
  split), ``attn.qkv`` -> ``attn.qkv[0:96]``, ...; each call (``#1``) alike;
* its recorded **inputs** are shared by every part (``attn.qkv[0:96].in0`` reads ``attn.qkv.in0``'s file), so the
  replay runs the part's layer on the other side's inputs.

The part records take the fused record's place in the order. The split values are written beside the capture's
files (``<file>.part<k>.npy``); the capture's manifest is left as it was.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

import numpy as np

from msdebug_hooks._files import atomic_path
from msdebug_hooks.compare.fused_pairing import FusedPair, concat_axis
from msdebug_hooks.compare.layer_capture import (FORWARD_INPUT, FORWARD_OUTPUT, PARAMETER, PARAMETER_GRADIENT,
                                                 Capture, LayerRecord)
from msdebug_hooks.compare.replay import split_call


def part_name(name: str, start: int, stop: int) -> str:
    """``attn.qkv#1`` -> ``attn.qkv[0:96]#1``: a part of a fused record, the call suffix kept last."""
    base, call = split_call(name)
    return f"{base}[{start}:{stop}]" + (f"#{call}" if call else "")


def split_fused(capture_a: Capture, capture_b: Capture, fused: list, paths: Mapping[str, str] = {}) -> tuple:
    """``(capture_a, capture_b, mapping)``: the captures with the fused side's records split into parts, and the
    record-name pairs (A name -> B name) that pair each part with its partner. Captures are returned as new
    objects; ``fused`` empty returns them unchanged. ``paths``: MindSpore parameter name -> the cell path its records
    carry, where the two differ (``WeightCopy.paths``: a CellList leaves its own name out of its parameters')."""
    mapping: dict = {}
    splits: dict = {"A": {}, "B": {}}   # side -> fused record name -> [(part name, start, stop, axis, partner)]
    for pair in fused:
        whole_side, whole_capture, parts_capture = (("B", capture_b, capture_a) if pair.split_reference
                                                    else ("A", capture_a, capture_b))
        names = _tensor_names(pair, paths)
        for record in whole_capture.records:
            if record.kind in (PARAMETER, PARAMETER_GRADIENT) and record.name == names[0]:
                splits[whole_side][(record.kind, record.name)] = [
                    (part_name(record.name, start, stop), start, stop, pair.axis, part)
                    for (start, stop), part in zip(pair.bounds(), names[1])]
            elif record.kind == FORWARD_OUTPUT and split_call(record.name)[0] == _layers(pair)[0]:
                parts = _output_parts(record, pair, parts_capture)
                if parts is not None:
                    splits[whole_side][(record.kind, record.name)] = parts
    for side, found in splits.items():
        for parts in found.values():
            mapping.update((part, partner) if side == "A" else (partner, part) for part, *_, partner in parts)
    return _with_parts(capture_a, splits["A"]), _with_parts(capture_b, splits["B"]), mapping


def _tensor_names(pair: FusedPair, paths: Mapping[str, str]) -> tuple:
    """(the fused tensor's record name, the parts' record names)."""
    mindspore = tuple(paths.get(name, name) for name in pair.mindspore)
    return (pair.torch[0], mindspore) if pair.split_reference else (mindspore[0], pair.torch)


def _layers(pair: FusedPair) -> tuple:
    """(the fused layer, the parts' layers)."""
    return (pair.torch_layers[0], pair.ms_layers) if pair.split_reference else (pair.ms_layers[0], pair.torch_layers)


def _output_parts(record: LayerRecord, pair: FusedPair, parts_capture: Capture) -> Optional[list]:
    """The parts of a fused layer's forward output: the parts' outputs of the same step and call, and the axis
    they concatenate on; None when a part did not run or the shapes do not concatenate."""
    _, call = split_call(record.name)
    partners = []
    for layer in _layers(pair)[1]:
        name = layer + (f"#{call}" if call else "")
        found = next((r for r in parts_capture.records if r.step == record.step and r.kind == FORWARD_OUTPUT
                      and r.name == name), None)
        if found is None:
            return None
        partners.append(found)
    axis = concat_axis([tuple(r.shape) for r in partners], tuple(record.shape))
    if axis is None:
        return None
    stops = np.cumsum([r.shape[axis] for r in partners]).tolist()
    return [(part_name(record.name, stop - r.shape[axis], stop), stop - r.shape[axis], stop, axis, r.name)
            for r, stop in zip(partners, stops)]


def _with_parts(capture: Capture, splits: dict) -> Capture:
    """``capture`` with each split record replaced by its parts (written beside it), inputs shared."""
    if not splits:
        return capture
    widest = 1 + max(len(parts) for parts in splits.values())
    records = []
    for record in capture.records:
        order = record.order * widest
        parts = splits.get((record.kind, record.name))
        if parts is None and record.kind == FORWARD_INPUT:
            base, _, tail = record.name.rpartition(".in")
            shared = dict.fromkeys(part_name(base, start, stop) + f".in{tail}"
                                   for (kind, name), found in splits.items()
                                   if kind == FORWARD_OUTPUT and split_call(name)[0] == base
                                   for _, start, stop, _, _ in found)
            records.append(dataclasses.replace(record, order=order))
            records += [dataclasses.replace(record, name=name, order=order + k + 1) for k, name in enumerate(shared)]
            continue
        if parts is None:
            records.append(dataclasses.replace(record, order=order))
            continue
        values = np.asarray(capture.load(record))
        for k, (name, start, stop, axis, _) in enumerate(parts):
            index = tuple(slice(start, stop) if d == axis else slice(None) for d in range(values.ndim))
            part = np.ascontiguousarray(values[index])
            file = f"{record.file}.part{k}.npy"
            with atomic_path(capture.directory / file) as tmp:
                with open(tmp, "wb") as stream:
                    np.save(stream, part, allow_pickle=False)
            records.append(dataclasses.replace(record, name=name, file=file, shape=tuple(part.shape), order=order + k))
    types = dict(capture.layer_types)
    for (kind, name), parts in splits.items():
        if kind == FORWARD_OUTPUT and split_call(name)[0] in types:
            types.update({split_call(part)[0]: types[split_call(name)[0]] for part, *_ in parts})
    return dataclasses.replace(capture, records=records, layer_types=types)
