"""The update each parameter and buffer received in step 1 (``after - before``), compared between the two sides of
a port check (:func:`.port_check.compare_models`, step 4)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from msdebug_hooks.compare import attribution
from msdebug_hooks.compare.layouts import one_layout
from msdebug_hooks.compare.port_run import SideRun
from msdebug_hooks.compare.port_weights import WeightCopy


@dataclass(frozen=True)
class UpdateFinding:
    """A parameter or buffer whose update in step 1 differs between the two sides."""

    name: str          # MindSpore name
    torch_name: str
    error: float       # |da-db|/|db| of the updates (inf: one side did not move)
    floor: float
    message: str

    def as_dict(self) -> dict:
        return {"name": self.name, "torch_name": self.torch_name, "error": _json(self.error), "floor": self.floor,
                "message": self.message}


@dataclass(frozen=True)
class Inherited:
    """The error each update inherits from the comparison of the step's records (:func:`inherited_errors`)."""

    gradients: dict = field(default_factory=dict)   # parameter name -> its gradient's error (as attribution reads it)
    forward: dict = field(default_factory=dict)     # layer name -> the largest forward error up to its output
    forward_level: float = 0.0                      # the largest forward error of the step

    def of(self, name: str, trained: bool) -> tuple[float, str]:
        """``(error, the words before it in a message)``: what an update of ``name`` inherits: a trained parameter
        its gradient's error (the update is ``-lr x gradient``), a buffer its layer's forward level (running
        statistics are forward results)."""
        if trained:
            if name in self.gradients:
                return self.gradients[name], "its gradient differs by"
            return 0.0, ""
        layer = attribution.layer_of(name)
        if layer in self.forward:
            return self.forward[layer], "the forward outputs up to its layer differ by"
        return self.forward_level, "the forward outputs differ by"


def inherited_errors(entries: Sequence[attribution.Entry], negligible: float = 1e-6) -> Inherited:
    """What the updates are judged against, from the step's compared records in execution order: each gradient's
    error (:func:`.attribution.scaled_errors`) and the running largest forward error by layer."""
    scaled = attribution.scaled_errors(entries, attribution.GRADIENT, negligible)
    gradients, forward, level = {}, {}, 0.0
    for entry, error in zip(entries, scaled):
        if not np.isfinite(error):
            continue
        if entry.kind == attribution.GRADIENT:
            gradients[entry.name] = error
        elif entry.kind == attribution.FORWARD:
            level = max(level, error)
            forward[entry.name] = level
    return Inherited(gradients, forward, level)


def _rounding(after: np.ndarray) -> float:
    """The norm of the rounding a stored ``after`` carries (half the spacing of its dtype per element): an update
    that small is lost in the tensor's own storage, whatever the gradient was."""
    dtype = after.dtype if np.issubdtype(after.dtype, np.floating) else np.dtype(np.float32)
    return 0.5 * float(np.finfo(dtype).eps) * float(np.linalg.norm(after.astype(np.float64)))


def compare_updates(copy: WeightCopy, run_a: SideRun, run_b: SideRun,
                    inherited: Optional[Inherited] = None) -> tuple[list, float]:
    """``(findings, level)``: the parameters and buffers whose step-1 update differs, and the largest error among
    those that agree. A parameter trained on one side only (``requires_grad`` differs) is a finding.

    The noise model (docs/compare-pytorch.md, item 4): the difference of the updates ``|da - db|`` is measured
    against the update's scale, never against the value the tensor started from: the larger of ``|db|`` and its
    layer's update scale (:func:`.attribution.layer_scale` over the updates of the layer's tensors of the same kind,
    trained or buffer). An update that is zero in exact arithmetic (a BatchNorm beta whose gradient cancels, a
    running mean of zero-mean inputs) is rounding noise on both sides and differs by 100 %, but is tiny against
    its layer's updates. The rounding each side's stored result carries (half its dtype's spacing) is allowed on
    top. Trained parameters are judged against the gradient floor (the update is ``-lr * grad``), buffers such as
    running statistics against the forward floor (they are forward results).

    And like every record, an update differs only where its error *appears or jumps*: above the floor **and** more
    than ``attribution.JUMP`` times the error it inherits (``inherited``, :func:`inherited_errors`): a trained
    parameter's own gradient error, a buffer's forward level up to its layer. Float32 noise grows through a deep
    net (a ResNet-50's late BatchNorms over 8 values: forward outputs 3e-4 apart, gradients 2e-2) and the updates
    carry it; a wrong momentum or learning rate still moves an update by far more than its inputs differ."""
    findings, level = [], 0.0
    items = []
    before_b, after_b = {}, {}   # MindSpore name -> PyTorch's values (a part of a fused tensor: its slice)
    for ms_name, torch_name, trained_b in _reference(copy, run_b, before_b, after_b):
        if ms_name not in run_a.before:
            continue
        trained_a = ms_name in run_a.trainable
        if trained_a != trained_b:
            findings.append(UpdateFinding(ms_name, torch_name, float("inf"), 0.0,
                                          f"{ms_name}: trained in {'MindSpore' if trained_a else 'PyTorch'} only "
                                          f"(trainable: MindSpore {trained_a}, PyTorch {trained_b}; requires_grad "
                                          f"differs)"))
            continue
        delta_a = run_a.after[ms_name].astype(np.float64) - run_a.before[ms_name]
        delta_b = after_b[ms_name].astype(np.float64) - before_b[ms_name]
        delta_a, delta_b, _ = one_layout(delta_a, delta_b)
        items.append((ms_name, torch_name, trained_a, delta_a, delta_b))
    groups: dict = {}
    for ms_name, _, trained, _, delta_b in items:
        groups.setdefault((attribution.layer_of(ms_name), trained), []).append(
            (float(np.linalg.norm(delta_b)), int(delta_b.size)))
    for ms_name, torch_name, trained, delta_a, delta_b in items:
        if delta_a.shape != delta_b.shape:
            findings.append(UpdateFinding(ms_name, torch_name, float("inf"), 0.0,
                                          f"{ms_name}: its update has shape {list(delta_a.shape)}, PyTorch's "
                                          f"{torch_name} {list(delta_b.shape)}"))
            continue
        finite = np.isfinite(delta_a)
        if not np.array_equal(finite, np.isfinite(delta_b)):
            findings.append(UpdateFinding(ms_name, torch_name, float("inf"), 0.0,
                                          f"{ms_name}: its update is NaN/Inf where PyTorch's {torch_name} is not"))
            continue
        delta_a, delta_b = np.where(finite, delta_a, 0.0), np.where(finite, delta_b, 0.0)
        table = attribution.GRADIENT_FLOOR if trained else attribution.FORWARD_FLOOR
        floor = table[attribution.coarser_dtype(str(run_a.before[ms_name].dtype),
                                                str(before_b[ms_name].dtype))]
        difference = float(np.linalg.norm(delta_a - delta_b))
        scale = max(float(np.linalg.norm(delta_b)),
                    attribution.layer_scale(groups[(attribution.layer_of(ms_name), trained)], delta_b.size))
        rounding = _rounding(run_a.after[ms_name]) + _rounding(after_b[ms_name])
        if difference <= rounding:
            continue
        error = difference / scale if scale > 0 else float("inf")
        upstream, source = inherited.of(ms_name, trained) if inherited is not None else (0.0, "")
        if difference > floor * scale + rounding and error > attribution.JUMP * upstream:
            what = "update (-lr x gradient)" if trained else "change in the step (a running statistic)"
            against = f"; {source} {_size(upstream)}" if source else ""
            findings.append(UpdateFinding(ms_name, torch_name, error, floor,
                                          f"{ms_name}: its {what} differs by {_size(error)} relative from PyTorch's "
                                          f"{torch_name} (floor {floor:.0e} of its layer's update scale{against})"))
        else:
            level = max(level, min(error, max(floor, attribution.JUMP * upstream)))
    return findings, level

def _reference(copy: WeightCopy, run_b: SideRun, before: dict, after: dict) -> list:
    """``[(MindSpore name, PyTorch name, trained in PyTorch)]`` for every pair whose PyTorch values were recorded,
    filling ``before`` / ``after`` (MindSpore name -> PyTorch's values): a part of a fused tensor gets its slice
    (or the parts their concatenation), named ``qkv.weight[0:96]``."""
    found = []
    for ms_name, torch_name in copy.pairs.items():
        if torch_name in run_b.before:
            before[ms_name], after[ms_name] = run_b.before[torch_name], run_b.after[torch_name]
            found.append((ms_name, torch_name, torch_name in run_b.trainable))
    for pair in copy.fused:
        if not all(name in run_b.before for name in pair.torch):
            continue
        start = pair.mindspore_values(run_b.before)
        end = pair.mindspore_values(run_b.after)
        for ms_name, label in zip(pair.mindspore, pair.reference_names()):
            before[ms_name], after[ms_name] = start[ms_name], end[ms_name]
            found.append((ms_name, label, all(name in run_b.trainable for name in pair.torch)))
    return found


def _size(value: float) -> str:
    return "inf" if value == float("inf") else ("0" if value == 0 else f"{value:.1e}")


def _json(value: float) -> Any:
    return value if np.isfinite(value) else str(value)


__all__ = ["Inherited", "UpdateFinding", "compare_updates", "inherited_errors"]
