"""Two runs' losses, aligned by step: the first step where they part, the errors, and what that step says.

A step parts when ``|a - b| > atol + tol * |b|`` (``b``: the reference run, the second one). MindSpore's docs call a
relative difference of about 1e-3 between a MindSpore script and its reference normal, hence ``rtol=1e-3`` for the
steps after the first. The first step is different: run from the same initial weights on the same batch, its loss
comes from the forward pass alone, and two correct float32 forward passes differ only by rounding (different kernels
sum in different orders): measured 0..5e-7 relative, at most about 1e-6. So step 1 is judged by ``forward_rtol``
(1e-6, the top of that noise) and a larger difference is read as a forward-pass parting even when it is below
``rtol``.
That holds only when step 1 is the runs' first step (step 0 or 1 in both files); files that start later (a resumed
run, ``--common-steps`` on a shorter run) compare weights that already went through updates, and every step is
judged by ``rtol``. If step 1 agrees to the noise and a later step parts, the forward pass agreed on the same
weights, so look at the backward pass and the weight update.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Optional

from msdebug_hooks.compare.loss import LossFileError, LossSeries
from msdebug_hooks.validation import real_number

DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 0.0
#: step 1's tolerance: the top of float32 forward noise (the corpus in docs/precision-comparison.md: correct ports
#: and float32/float64 pairs part by 0..1e-7 at step 1, a LayerNorm epsilon bug by 3e-6, bfloat16 by 7e-6)
DEFAULT_FORWARD_RTOL = 1e-6
#: the relative loss difference two correct float32 forward passes reach at most (measured 1e-7..5e-7, CPU)
FLOAT32_FORWARD_NOISE = 1e-6
#: the step numbers a run's first step carries (0-based or 1-based logs)
FIRST_STEPS = (0, 1)
RELATIVE_EPSILON = 1e-12

_LOW_PRECISION = ("with float16 or TF32 (10-bit mantissa) or bfloat16 (7-bit) in either run a step-1 difference is "
                  "expected (measured against float32 on a small MLP: float16 1e-5..1e-4, bfloat16 1e-4..1e-3 "
                  "relative; deeper networks more): compare two float32 runs to tell that from a bug")


@dataclass(frozen=True)
class StepDifference:
    """One step of both runs. ``forward``: judged as the pure forward comparison (tolerance ``forward_rtol``)."""

    step: int
    loss_a: float
    loss_b: float
    abs_error: float
    rel_error: float
    parted: bool
    forward: bool = False


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _sci(value: float, digits: int = 1) -> str:
    """``6.0e-4`` rather than Python's ``6.0e-04``."""
    if not math.isfinite(value):
        return str(value)
    return f"{value:.{digits}e}".replace("e-0", "e-").replace("e+0", "e+").replace("e+", "e")


@dataclass(frozen=True)
class LossComparison:
    """The result of comparing run ``a`` with the reference run ``b``.

    ``forward_step`` is the step judged by ``forward_rtol`` (the runs' first step), ``None`` when the files start
    later and every step was judged by ``rtol``.
    """

    path_a: str
    path_b: str
    rtol: float
    atol: float
    steps: list[StepDifference] = field(default_factory=list)
    forward_rtol: float = DEFAULT_FORWARD_RTOL
    forward_step: Optional[int] = None

    @property
    def first_parted(self) -> Optional[StepDifference]:
        return next((s for s in self.steps if s.parted), None)

    @property
    def forward_check(self) -> Optional[StepDifference]:
        """The step compared as a pure forward pass (same weights, same batch), if the files start at step 0/1."""
        return self.steps[0] if self.steps and self.steps[0].forward else None

    @property
    def forward_noise_multiple(self) -> Optional[float]:
        """Step 1's relative difference in units of float32 forward noise (``None`` without a forward check)."""
        check = self.forward_check
        return None if check is None else check.rel_error / FLOAT32_FORWARD_NOISE

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

    def _forward_size(self, check: StepDifference) -> str:
        if not math.isfinite(check.rel_error):
            return "has a loss that is finite in one run only"
        if check.abs_error == 0:
            return "is bit-equal in both runs"
        multiple = check.rel_error / FLOAT32_FORWARD_NOISE
        size = f"{multiple:,.0f}x float32 forward noise" if multiple >= 1.5 else "within float32 forward noise"
        return f"differs by {_sci(check.rel_error)} relative, {size} (at most about {_sci(FLOAT32_FORWARD_NOISE, 0)})"

    def forward_summary(self) -> Optional[str]:
        """Step 1's difference against float32 forward noise, in one clause (``None`` without a forward check)."""
        check = self.forward_check
        return None if check is None else f"step {check.step} {self._forward_size(check)}"

    def reading(self) -> str:
        """What the first parting step means, in the words of the comparison workflow."""
        first = self.first_parted
        summary = self.forward_summary()
        if first is None:
            text = (f"the runs agree on all {len(self.steps)} steps within rtol {self.rtol:g} / atol {self.atol:g}: "
                    f"about 1e-3 relative difference is normal between two frameworks")
            return f"{text}; {summary}: the forward pass agrees" if summary else text
        compare = (f"compare the layers' outputs of step {first.step} (compare-layers, or compare-dumps on dumps of "
                   f"that step), from the input onwards")
        if first.forward:
            where = (f"below the cross-framework rtol {self.rtol:g} but beyond forward-rtol {self.forward_rtol:g}"
                     if first.rel_error <= self.rtol else f"beyond forward-rtol {self.forward_rtol:g} and rtol "
                                                          f"{self.rtol:g}")
            return (f"step {first.step} ran the same weights on the same batch, a pure forward comparison, and "
                    f"{self._forward_size(first)}, {where}: the forward pass differs (or the "
                    f"inputs or initial weights): {compare}; {_LOW_PRECISION}")
        if first.step == self.steps[0].step:
            return (f"step {first.step} is the first step compared and already differs: the forward pass differs "
                    f"(or the inputs, or the weights it starts from: the steps compared start after the runs' first "
                    f"step, so this one is judged by rtol, not as a pure forward comparison): {compare}")
        before = self.steps[self.steps.index(first) - 1].step
        checked = (f"{summary}, so the forward pass agreed on the same weights; " if summary else
                   f"the steps compared start after the runs' first step, so the forward pass was checked only to "
                   f"rtol {self.rtol:g}; ")
        return (f"steps up to {before} agree, step {first.step} differs: {checked}look at the backward pass and the "
                f"weight update of step {before} (gradients, optimizer, learning rate, loss scale), or at the data "
                f"of step {first.step}")

    def as_dict(self) -> dict:
        first = self.first_parted
        check = self.forward_check
        return {"a": self.path_a, "b": self.path_b, "rtol": self.rtol, "atol": self.atol,
                "forward_rtol": self.forward_rtol, "forward_step": self.forward_step,
                "forward_parted": check.parted if check else None,
                "forward_rel_error": check.rel_error if check else None,
                "forward_noise_multiple": self.forward_noise_multiple,
                "float32_forward_noise": FLOAT32_FORWARD_NOISE,
                "steps_compared": len(self.steps), "steps_parted": self.parted_count,
                "first_parted_step": first.step if first else None,
                "first_parted": asdict(first) if first else None,
                "max_abs_error": self.max_abs_error, "mean_abs_error": self.mean_abs_error,
                "max_rel_error": self.max_rel_error, "mean_rel_error": self.mean_rel_error,
                "reading": self.reading()}


def _check_tolerance(name: str, value: float) -> float:
    return real_number(name, value, minimum=0, allowed="a finite number >= 0")


def _differ(a: float, b: float, rtol: float, atol: float) -> tuple[float, float, bool]:
    if not (math.isfinite(a) and math.isfinite(b)):
        same = (math.isnan(a) and math.isnan(b)) or a == b
        return (0.0 if same else math.inf), (0.0 if same else math.inf), not same
    abs_error = abs(a - b)
    return abs_error, abs_error / (abs(b) + RELATIVE_EPSILON), abs_error > atol + rtol * abs(b)


def _forward_step(a: LossSeries, b: LossSeries, common: list[int]) -> Optional[int]:
    """The first compared step when it is both runs' first step (0 or 1): the one pure forward comparison."""
    first = common[0]
    return first if first in FIRST_STEPS and a.steps[0] == b.steps[0] == first else None


def compare_losses(a: LossSeries, b: LossSeries, *, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                   forward_rtol: float = DEFAULT_FORWARD_RTOL, common_steps: bool = False) -> LossComparison:
    """Align ``a`` and the reference ``b`` by step and compare each step's loss.

    The runs' first step (0 or 1) is judged by ``forward_rtol``, the others by ``rtol`` (module docstring: why).
    Both must hold the same steps (a different length is a :class:`LossFileError` naming the file and line where one
    stops or skips) unless ``common_steps``, which compares the steps both have.
    """
    rtol = _check_tolerance("rtol", rtol)
    atol = _check_tolerance("atol", atol)
    forward_rtol = _check_tolerance("forward_rtol", forward_rtol)
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
    forward_step = _forward_step(a, b, common)
    steps = []
    for step in common:
        la, lb = a.losses[step], b.losses[step]
        forward = step == forward_step
        abs_error, rel_error, parted = _differ(la, lb, forward_rtol if forward else rtol, atol)
        steps.append(StepDifference(step, la, lb, abs_error, rel_error, parted, forward))
    return LossComparison(a.path, b.path, rtol, atol, steps, forward_rtol, forward_step)
