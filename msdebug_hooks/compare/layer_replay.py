"""Own error or inherited? The single-step (replay) verdict on the layer compare-layers names.

A layer that differs either computes differently or was fed an input that already differed (through code between
two recorded layers: a scaling, a reshape, a functional op). Replaying one side's layer on the *other* side's
captured inputs takes the input out of the question: the replayed output is compared with the other side's output.

* ``own``: on the same inputs the layer still differs, by about as much: this layer computes differently;
* ``inherited``: on the same inputs the layer agrees to the noise floor: its input already differed, so look at what
  runs between the previous recorded layer and this one;
* without a model, when both captures hold the layer's inputs (``record_inputs=True``), the inputs themselves are
  compared: they agree (``own``) or differ (``inherited``), with the sizes.

Nothing here imports PyTorch or MindSpore; :mod:`msdebug_hooks.compare.replay` does, when a model is replayed.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Optional

from msdebug_hooks.compare import attribution
from msdebug_hooks.compare.layer_capture import Capture, CaptureError
from msdebug_hooks.compare.layouts import same_row_major
from msdebug_hooks.compare.metrics import compare_arrays
from msdebug_hooks.errors import ConfigError

OWN = "own"
INHERITED = "inherited"


@dataclass(frozen=True)
class ReplayVerdict:
    """What replaying (or comparing the inputs of) the named layer says."""

    layer: str
    verdict: str                  # OWN, INHERITED, or "unknown"
    how: str                      # "replayed A's layer on B's inputs", "compared the inputs", ...
    own_error: Optional[float]    # the layer's error on the same inputs (replay), or None
    input_error: Optional[float]  # how far the inputs differ (|a-b|/|b|, the largest), or None
    observed_error: float         # the error compare-layers saw
    floor: float
    note: str = ""

    def describe(self) -> str:
        if self.verdict == "unknown":
            return f"replay of {self.layer}: {self.note}"
        size = _size
        if self.own_error is not None and not math.isfinite(self.own_error):
            reading = (f"own error: on the same inputs its output still does not match (another shape, or NaN/Inf): "
                       f"{self.layer} itself computes differently")
        elif self.own_error is not None:
            reading = ("own error: on the same inputs it still differs by "
                       f"{size(self.own_error)} (observed {size(self.observed_error)}): {self.layer} itself computes "
                       "differently" if self.verdict == OWN else
                       f"inherited: on the same inputs it agrees to {size(self.own_error)} (observed "
                       f"{size(self.observed_error)}): its input already differed; look at what runs between the "
                       f"previous recorded layer and {self.layer}")
        else:
            reading = (f"own error: its inputs agree to {size(self.input_error)} while its output differs by "
                       f"{size(self.observed_error)}" if self.verdict == OWN else
                       f"inherited: its inputs already differ by {size(self.input_error)}; look at what runs "
                       f"between the previous recorded layer and {self.layer}")
        return f"replay ({self.how}): {reading}"

    def as_dict(self) -> dict:
        return {"layer": self.layer, "verdict": self.verdict, "how": self.how,
                "own_error": None if self.own_error is None else _finite(self.own_error),
                "input_error": None if self.input_error is None else _finite(self.input_error),
                "observed_error": _finite(self.observed_error),
                "floor": self.floor, "note": self.note}


def _size(value: Optional[float]) -> str:
    return "?" if value is None else ("0" if value == 0 else f"{value:.1e}")


def _finite(value: float) -> Any:
    return value if math.isfinite(value) else str(value)


def replay_verdict(pair: Any, capture_a: Capture, capture_b: Capture, step_a: int, step_b: int, *,
                   model_a: Any = None, model_b: Any = None) -> ReplayVerdict:
    """Replay the layer of ``pair`` (a ``LayerPair``): A's model on B's inputs (or B's model on A's inputs); without
    a model, compare the recorded inputs of both sides."""
    from msdebug_hooks.compare import replay

    entry = pair.entry()
    observed = attribution.error_of(entry)
    floor = attribution.FORWARD_FLOOR[attribution.coarser_dtype(entry.dtype_a, entry.dtype_b)]
    name_a, name_b = pair.record_a.name, pair.record_b.name
    # a side standing for a run of layers (a composite on the other side covers them) is fed at the run's first
    # layer and replayed as the run, each layer on the previous one's output
    run_a, run_b = getattr(pair, "run_a", ()) or (name_a,), getattr(pair, "run_b", ()) or (name_b,)
    unknown = ReplayVerdict(name_a, "unknown", "", None, None, observed, floor)
    try:
        inputs_a = replay.layer_inputs(capture_a, step_a, run_a[0])
        inputs_b = replay.layer_inputs(capture_b, step_b, run_b[0])
    except (ConfigError, CaptureError) as exc:
        inputs_a = inputs_b = None
        missing = str(exc)
    input_error = _input_error(inputs_a, inputs_b) if inputs_a is not None else None
    for model, inputs, name, reference, how in (
            (model_a, inputs_b, run_a, capture_b.load(pair.record_b), "A's layer run on B's inputs"),
            (model_b, inputs_a, run_b, capture_a.load(pair.record_a), "B's layer run on A's inputs")):
        if model is None:
            continue
        if inputs is None:
            return _replace_note(unknown, f"cannot replay: {missing}")
        part = _PART.search(name[-1])   # a part of a split fused layer (``qkv[0:96]``): the layer run whole, then cut
        try:
            outputs = replay.replay_layer(model, _PART.sub("", name[0]), inputs)
            for later in name[1:]:
                outputs = replay.replay_layer(model, _PART.sub("", later), outputs[:1])
        except ConfigError as exc:
            return _replace_note(unknown, f"cannot replay: {exc}")
        name = name[-1]
        index = 0 if len(outputs) == 1 else _output_index(name)
        if index >= len(outputs):
            return _replace_note(unknown, f"the replayed layer gave {len(outputs)} output(s), not output {index}")
        output = outputs[index] if part is None else _cut(outputs[index], reference.shape, part)
        if same_row_major(output.shape, reference.shape):   # [N, H*W, C] against [N, H, W, C], as compared
            output = output.reshape(reference.shape)
        own = compare_arrays(output, reference)
        own_error = attribution.error_of(attribution.Entry(name, attribution.FORWARD, own, entry.dtype_a,
                                                           entry.dtype_b))
        # own when, on the same inputs, it still differs beyond the floor by about as much (an output of another
        # shape or with NaN/Inf, inf on both counts, is its own doing)
        verdict = OWN if own_error > floor and (not math.isfinite(own_error)
                                                or own_error * attribution.JUMP > observed) else INHERITED
        return ReplayVerdict(name_a, verdict, how, own_error, input_error, observed, floor)
    if input_error is None:
        return _replace_note(unknown, "no model to replay (compare_layers(..., replay_a=model)) and the captures "
                                      "hold no inputs of this layer (record_inputs=True)")
    verdict = INHERITED if input_error > floor and observed <= attribution.JUMP * input_error else OWN
    return ReplayVerdict(name_a, verdict, "compared the recorded inputs", None, input_error, observed, floor)


_PART = re.compile(r"\[(?P<start>\d+):(?P<stop>\d+)\]")


def _cut(output: Any, shape: tuple, part: re.Match) -> Any:
    """The part ``[start:stop]`` of a fused layer's replayed output, along the one axis where its shape differs from
    the partner's ``shape`` (as the records were split); the whole output when no axis does."""
    axes = [axis for axis, (a, b) in enumerate(zip(output.shape, shape)) if a != b]
    if len(output.shape) != len(shape) or len(axes) != 1:
        return output
    index = [slice(None)] * output.ndim
    index[axes[0]] = slice(int(part["start"]), int(part["stop"]))
    return output[tuple(index)]


def _replace_note(verdict: ReplayVerdict, note: str) -> ReplayVerdict:
    return ReplayVerdict(verdict.layer, verdict.verdict, verdict.how, None, None, verdict.observed_error,
                         verdict.floor, note)


def _input_error(inputs_a: list, inputs_b: list) -> Optional[float]:
    if len(inputs_a) != len(inputs_b) or not inputs_a:
        return None
    errors = [attribution.error_of(attribution.Entry("input", attribution.FORWARD, compare_arrays(a, b)))
              for a, b in zip(inputs_a, inputs_b)]
    return max(errors)


def _output_index(name: str) -> int:
    """A tuple output's index from its record name (``lstm.0`` -> 0, ``lstm.1#2`` -> 1), for a layer whose replay gave
    several outputs."""
    base = name.split("#", 1)[0]
    tail = base.rsplit(".", 1)[-1]
    return int(tail) if tail.isdigit() and "." in base else 0
