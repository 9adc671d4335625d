"""Two runs' losses, aligned by step: the first step where they part, the errors, and what that step says.

A step parts when ``|a - b| > atol + rtol * |b|`` (``b``: the reference run, the second one). MindSpore's docs call a
relative difference of about 1e-3 between a MindSpore script and its reference normal, hence ``rtol=1e-3``. If the
first compared step already parts, the forward pass (or the inputs, or the initial weights) differs; if earlier steps
agree, the forward pass was right on the same weights, so look at the backward pass and the weight update.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from msdebug_hooks.compare.loss import LossFileError, LossSeries
from msdebug_hooks.errors import ConfigError

DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 0.0
RELATIVE_EPSILON = 1e-12


@dataclass(frozen=True)
class StepDifference:
    step: int
    loss_a: float
    loss_b: float
    abs_error: float
    rel_error: float
    parted: bool


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


@dataclass(frozen=True)
class LossComparison:
    """The result of comparing run ``a`` with the reference run ``b``."""

    path_a: str
    path_b: str
    rtol: float
    atol: float
    steps: list[StepDifference] = field(default_factory=list)

    @property
    def first_parted(self) -> Optional[StepDifference]:
        return next((s for s in self.steps if s.parted), None)

    @property
    def parted_count(self) -> int:
        return sum(s.parted for s in self.steps)

    def _finite(self, attr: str) -> list[float]:
        return [getattr(s, attr) for s in self.steps if math.isfinite(getattr(s, attr))]

    @property
    def max_abs_error(self) -> float:
        return max(self._finite("abs_error"), default=math.nan)

    @property
    def mean_abs_error(self) -> float:
        return _mean(self._finite("abs_error"))

    @property
    def max_rel_error(self) -> float:
        return max(self._finite("rel_error"), default=math.nan)

    @property
    def mean_rel_error(self) -> float:
        return _mean(self._finite("rel_error"))

    def reading(self) -> str:
        """What the first parting step means, in the words of the comparison workflow."""
        first = self.first_parted
        if first is None:
            return (f"the runs agree on all {len(self.steps)} steps within rtol {self.rtol:g} / atol {self.atol:g}: "
                    f"about 1e-3 relative difference is normal between two frameworks")
        if first.step == self.steps[0].step:
            return (f"step {first.step} is the first step compared and already differs: the forward pass differs "
                    f"(or the inputs or initial weights): compare the layers' outputs of step {first.step} "
                    f"(compare-layers, or compare-dumps on dumps of that step), from the input onwards")
        before = self.steps[self.steps.index(first) - 1].step
        return (f"steps up to {before} agree, step {first.step} differs: the forward pass agreed on the same weights, "
                f"so look at the backward pass and the weight update of step {before} (gradients, optimizer, "
                f"learning rate, loss scale), or at the data of step {first.step}")

    def as_dict(self) -> dict:
        first = self.first_parted
        return {"a": self.path_a, "b": self.path_b, "rtol": self.rtol, "atol": self.atol,
                "steps_compared": len(self.steps), "steps_parted": self.parted_count,
                "first_parted_step": first.step if first else None,
                "first_parted": first.__dict__ if first else None,
                "max_abs_error": self.max_abs_error, "mean_abs_error": self.mean_abs_error,
                "max_rel_error": self.max_rel_error, "mean_rel_error": self.mean_rel_error,
                "reading": self.reading()}


def _check_tolerance(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(name, value, "a finite number >= 0")
    return float(value)


def _differ(a: float, b: float, rtol: float, atol: float) -> tuple[float, float, bool]:
    if not (math.isfinite(a) and math.isfinite(b)):
        same = (math.isnan(a) and math.isnan(b)) or a == b
        return (0.0 if same else math.inf), (0.0 if same else math.inf), not same
    abs_error = abs(a - b)
    return abs_error, abs_error / (abs(b) + RELATIVE_EPSILON), abs_error > atol + rtol * abs(b)


def compare_losses(a: LossSeries, b: LossSeries, *, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                   common_steps: bool = False) -> LossComparison:
    """Align ``a`` and the reference ``b`` by step and compare each step's loss.

    Both must hold the same steps (a different length is a :class:`LossFileError` naming the file and line where one
    stops or skips) unless ``common_steps``, which compares the steps both have.
    """
    rtol = _check_tolerance("rtol", rtol)
    atol = _check_tolerance("atol", atol)
    only_a = sorted(set(a.losses) - set(b.losses))
    only_b = sorted(set(b.losses) - set(a.losses))
    if (only_a or only_b) and not common_steps:
        longer, shorter, extra = (a, b, only_a) if only_a else (b, a, only_b)
        step = extra[0]
        raise LossFileError(longer.path, longer.lines[step],
                            f"step {step} is not in {shorter.path} ({len(shorter.losses)} steps, "
                            f"{shorter.steps[0]}..{shorter.steps[-1]}; this file has {len(longer.losses)}): "
                            f"the runs differ in length or steps (--common-steps compares the steps both have)")
    common = sorted(set(a.losses) & set(b.losses))
    if not common:
        raise LossFileError(a.path, 0, f"no step in common with {b.path} "
                                       f"({a.steps[0]}..{a.steps[-1]} vs {b.steps[0]}..{b.steps[-1]})")
    steps = []
    for step in common:
        la, lb = a.losses[step], b.losses[step]
        abs_error, rel_error, parted = _differ(la, lb, rtol, atol)
        steps.append(StepDifference(step, la, lb, abs_error, rel_error, parted))
    return LossComparison(a.path, b.path, rtol, atol, steps)
