"""What ``WeightMonitor`` says beyond "did not change": the likely cause, read from the optimizer, and the summary
at the end of training.

A trainable parameter that does not move has, in practice, one of three causes, told apart by the optimizer the
training uses (``cb_params.optimizer``), in this order:

1. it is not among the optimizer's parameters (left out when the optimizer was made: a parameter list built before
   a layer was added, a filter on names);
2. its learning rate is 0 (``optimizer.get_lr_parameter``: a parameter group's ``lr``, or the optimizer's own); a
   learning-rate schedule is not evaluated here;
3. its gradient was 0 at every step: its optimizer state (the tensors named ``<state>.<parameter name>``, such as
   Momentum's ``moments.fc3.weight`` or Adam's ``moment1.fc3.weight``) is all zero after a step, which a non-zero
   gradient would have changed (a branch the loss does not reach, a dead ReLU, a detached tensor).

When none of them can be read (no optimizer in the run context, an optimizer without state such as plain SGD) the
three are listed as possibilities. A parameter that moved, but within the tolerances, is said so by the monitor
itself.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np

__all__ = ["unchanged_cause", "summary"]

_GENERIC = ("likely causes: it is not among the optimizer's parameters, its learning rate is 0, or its gradient is "
            "0 (a branch the loss does not reach, a dead ReLU, a detached tensor)")


def _values(tensor: Any) -> Any:
    try:
        return tensor.asnumpy()
    except Exception:   # noqa: BLE001 - a schedule cell or anything else without values: not readable here
        return None


def unchanged_cause(param: Any, optimizer: Any) -> str:
    """One clause naming the likely cause why ``param`` (a MindSpore ``Parameter``) did not change under
    ``optimizer`` (None: unknown), as the module docstring orders them."""
    if optimizer is None or not hasattr(optimizer, "parameters"):
        return _GENERIC
    optimized = list(optimizer.parameters)
    if not any(p is param or p.name == param.name for p in optimized):
        return (f"it is not among the {type(optimizer).__name__} optimizer's {len(optimized)} parameters (left out "
                "when the optimizer was made)")
    try:
        rate = _values(optimizer.get_lr_parameter(param))
    except Exception:   # noqa: BLE001 - an optimizer that cannot say: the other causes remain
        rate = None
    if rate is not None and np.size(rate) and not np.any(rate):
        return "its learning rate is 0 (its parameter group's 'lr', or the optimizer's learning_rate)"
    states = [s for s in optimizer.get_parameters(expand=False) if s.name.endswith("." + param.name)]
    values = [_values(s) for s in states]
    if states and all(v is not None and not np.any(v) for v in values):
        names = ", ".join(s.name for s in states[:3])
        return (f"its gradient was 0 at every step: its optimizer state ({names}) is all zero, which a non-zero "
                "gradient would have changed (a branch the loss does not reach, a dead ReLU, a detached tensor)")
    return _GENERIC


def summary(checks: int, checked: Iterable[str], counts: Mapping[tuple[str, str], int],
            first_steps: Mapping[tuple[str, str], int]) -> str:
    """The end-of-training line: how many parameters were checked how often, and per kind of problem the
    parameters with it (at how many checks, from which step); or that none was found."""
    names = list(checked)
    head = f"WeightMonitor summary: {len(names)} parameter(s) checked at {checks} step(s)"
    if not counts:
        return head + ": no problem found"
    kinds: dict[str, list[str]] = {}
    for (name, kind), count in sorted(counts.items(), key=lambda item: (first_steps.get(item[0], 0), item[0])):
        kinds.setdefault(kind, []).append(f"{name} ({count} check(s) from step {first_steps.get((name, kind), '?')})")
    return head + "; " + "; ".join(f"{kind}: {', '.join(found)}" for kind, found in kinds.items())
