"""How far apart two runs of one MindSpore training may be before ``msdebug bisect`` calls them parted.

compare-loss's defaults (``rtol`` 1e-3 after step 1) are a cross-framework tolerance: MindSpore against its PyTorch
reference. ``bisect`` compares two runs of *one* framework, usually on one machine, which are bit-equal where nothing
differs (the CPU kernels are deterministic); a changed activation (a tanh-approximated GELU for the exact one) moves
the loss by far less than 1e-3 and would go unseen. So, unless a tolerance is given, the runs are judged against the
noise they themselves show where nothing differs, read from step 1 (same initial weights, same batch, forward only):

1. **step 1 bit-equal on every rank**: the runs are reproducible. Every later step must be bit-equal too (``rtol``
   and ``atol`` 0): the first step that is not is dumped, and the dumps are compared bit for bit
   (``DumpComparer(exact=True)``: an operator whose inputs are bit-equal and whose output is not computes
   differently).
2. **step 1 not bit-equal**: either the change is in the forward pass, or the runs are not reproducible (threads,
   atomics on a GPU, two MindSpore versions or devices). The loss cannot tell these apart, the dump can: step 1 is
   dumped whatever its size (``forward_rtol`` 0) and its operators are judged against the float32 noise floors
   (:mod:`~msdebug_hooks.compare.attribution`). An operator beyond them is the answer. If none is, step 1's
   difference is the runs' own noise; such runs drift apart over the steps as two frameworks do, so the later steps
   are judged by compare-loss's ``rtol`` (1e-3) and the first that parts is dumped in turn.
3. **any of** ``rtol``, ``forward_rtol``, ``atol`` **given**: the tolerances are those (the others compare-loss's
   defaults), and the dumps are judged against the noise floors.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from msdebug_hooks.compare.loss import LossSeries
from msdebug_hooks.compare.loss_diff import DEFAULT_ATOL, DEFAULT_FORWARD_RTOL, DEFAULT_RTOL

EXACT, NOISE, GIVEN, AFTER_NOISE = "bit-equal", "step-1 noise", "given", "noise of step 1"


@dataclass(frozen=True)
class Tolerance:
    """The loss tolerances of one comparison, whether the dumps are compared bit for bit, and the rule in words."""

    rtol: float
    forward_rtol: float
    atol: float
    exact_dumps: bool
    rule: str
    kind: str


def given(rtol: Optional[float], forward_rtol: Optional[float], atol: Optional[float]) -> Optional[Tolerance]:
    """Rule 3: the tolerances the user set, or None when none was set (then :func:`from_step_one` decides)."""
    if rtol is None and forward_rtol is None and atol is None:
        return None
    chosen = (DEFAULT_RTOL if rtol is None else rtol, DEFAULT_FORWARD_RTOL if forward_rtol is None else forward_rtol,
              DEFAULT_ATOL if atol is None else atol)
    return Tolerance(*chosen, False, "tolerances as given; the dumps are judged against the float32 noise floors",
                     GIVEN)


def _first_equal(a: LossSeries, b: LossSeries) -> bool:
    common = sorted(set(a.losses) & set(b.losses))
    if not common:
        return False
    x, y = a.losses[common[0]], b.losses[common[0]]
    return x == y or (math.isnan(x) and math.isnan(y))


def from_step_one(pairs: Sequence[tuple[LossSeries, LossSeries]]) -> Tolerance:
    """Rules 1 and 2, from each rank's (A, B) loss series."""
    if pairs and all(_first_equal(a, b) for a, b in pairs):
        return Tolerance(0.0, 0.0, 0.0, True, "same framework: step 1 is bit-equal, so the runs are reproducible "
                                              "and every step must be bit-equal; the dumps are compared bit for bit",
                         EXACT)
    return Tolerance(DEFAULT_RTOL, 0.0, 0.0, False,
                     "same framework: step 1 is not bit-equal, so it is dumped to tell a change in the forward pass "
                     "from the runs' own noise (the operators judged against the float32 noise floors)", NOISE)


def after_noise() -> Tolerance:
    """Rule 2's second half: step 1's dump showed only noise, so the later steps are judged by ``rtol``."""
    return Tolerance(DEFAULT_RTOL, DEFAULT_RTOL, DEFAULT_ATOL, False,
                     f"same framework, not reproducible: step 1 differs by noise alone (no operator of its dump "
                     f"beyond the float32 noise floors), so the later steps are judged by rtol {DEFAULT_RTOL:g}",
                     AFTER_NOISE)
