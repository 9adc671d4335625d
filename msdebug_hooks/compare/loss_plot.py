"""Both loss curves and their relative error in one PNG (matplotlib: the optional extra ``plot``)."""
from __future__ import annotations

import math
from pathlib import Path

from msdebug_hooks._files import atomic_path
from msdebug_hooks.compare.loss_diff import LossComparison
from msdebug_hooks.errors import MissingExtraError

INSTALL_HINT = 'pip install "msdebug-hooks[plot]"'


class PlotUnavailable(MissingExtraError):
    """matplotlib is not installed."""


def plot_losses(result: LossComparison, target: str | Path, *, label_a: str = "a", label_b: str = "b") -> Path:
    """Draw the two curves (top) and the relative error per step (bottom, log scale, ``rtol`` marked)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable(f"--plot needs matplotlib: {INSTALL_HINT}") from None
    steps = [s.step for s in result.steps]
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    top.plot(steps, [s.loss_a for s in result.steps], label=label_a, linewidth=1.5)
    top.plot(steps, [s.loss_b for s in result.steps], label=f"{label_b} (reference)", linewidth=1.0,
             linestyle="--")
    top.set_ylabel("loss")
    top.legend()
    rel = [s.rel_error if math.isfinite(s.rel_error) and s.rel_error > 0 else math.nan for s in result.steps]
    bottom.plot(steps, rel, marker=".", color="tab:red")
    bottom.axhline(result.rtol, color="grey", linestyle=":", label=f"rtol {result.rtol:g}")
    if any(math.isfinite(v) for v in rel):
        bottom.set_yscale("log")
    bottom.set_ylabel("relative error")
    bottom.set_xlabel("step")
    first = result.first_parted
    if first is not None:
        for axis in (top, bottom):
            axis.axvline(first.step, color="tab:red", alpha=0.4)
        top.set_title(f"first step beyond tolerance: {first.step}")
    else:
        top.set_title("no step beyond tolerance")
    bottom.legend()
    figure.tight_layout()
    target = Path(target).expanduser()
    with atomic_path(target, mode=0o644) as tmp:
        figure.savefig(tmp, format="png", dpi=100)
    plt.close(figure)
    return target
