"""The update each parameter and buffer received in step 1 (``after - before``), compared between the two sides of
a port check (:func:`.port_check.compare_models`, step 4)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from msdebug_hooks.compare import attribution
from msdebug_hooks.compare.layouts import one_layout
from msdebug_hooks.compare.metrics import compare_arrays
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


def _moves(delta: np.ndarray, before: np.ndarray) -> bool:
    """Whether an update changes its tensor by more than the float32 spacing of its values (normwise): a gradient
    that is pure rounding noise (a bias before a BatchNorm, whose gradient is zero in exact arithmetic) does not."""
    return float(np.linalg.norm(delta)) > np.finfo(np.float32).eps * float(np.linalg.norm(before))


def compare_updates(copy: WeightCopy, run_a: SideRun, run_b: SideRun) -> tuple[list, float]:
    """``(findings, level)``: the parameters and buffers whose step-1 update differs, and the largest error among
    those that agree. Trained parameters are judged against the gradient floor (the update is ``-lr * grad``),
    buffers such as running statistics against the forward floor (they are forward results). An update below the
    float32 spacing of its tensor on both sides is rounding noise and not compared; a parameter trained on one side
    only (``requires_grad`` differs) is a finding."""
    findings, level = [], 0.0
    for ms_name, torch_name in copy.pairs.items():
        if ms_name not in run_a.before or torch_name not in run_b.before:
            continue
        trained_a, trained_b = ms_name in run_a.trainable, torch_name in run_b.trainable
        delta_a = run_a.after[ms_name].astype(np.float64) - run_a.before[ms_name]
        delta_b = run_b.after[torch_name].astype(np.float64) - run_b.before[torch_name]
        delta_a, delta_b, _ = one_layout(delta_a, delta_b)
        if trained_a != trained_b:
            findings.append(UpdateFinding(ms_name, torch_name, float("inf"), 0.0,
                                          f"{ms_name}: trained in {'MindSpore' if trained_a else 'PyTorch'} only "
                                          f"(trainable: MindSpore {trained_a}, PyTorch {trained_b}; requires_grad "
                                          f"differs)"))
            continue
        if not (_moves(delta_a, run_a.before[ms_name]) or _moves(delta_b, run_b.before[torch_name])):
            continue
        table = attribution.GRADIENT_FLOOR if trained_a else attribution.FORWARD_FLOOR
        floor = table[attribution.coarser_dtype(str(run_a.before[ms_name].dtype),
                                                str(run_b.before[torch_name].dtype))]
        error = attribution.error_of(attribution.Entry(ms_name, attribution.FORWARD,
                                                       compare_arrays(delta_a, delta_b)), negligible=0.0)
        if error > floor:
            what = "update (-lr x gradient)" if trained_a else "change in the step (a running statistic)"
            findings.append(UpdateFinding(ms_name, torch_name, error, floor,
                                          f"{ms_name}: its {what} differs by {_size(error)} relative from PyTorch's "
                                          f"{torch_name} (floor {floor:.0e})"))
        else:
            level = max(level, error)
    return findings, level


def _size(value: float) -> str:
    return "inf" if value == float("inf") else ("0" if value == 0 else f"{value:.1e}")


def _json(value: float) -> Any:
    return value if np.isfinite(value) else str(value)


__all__ = ["UpdateFinding", "compare_updates"]
