"""Training-loop primitives every callback and the debugger share: the step's loss, the overflow flag, a loss for a
log line, and a clean, explained stop (a vote, see ``stop_agreement.py``).

The ground floor below ``callbacks/`` and ``debugger/``: no MindSpore import here (the values are read through the
duck-typed objects MindSpore passes in).
"""
from __future__ import annotations

import logging
from typing import Any, Optional


def loss_value(net_outputs: Any) -> Optional[float]:
    """The scalar loss from whatever the train cell returned, or None if there is none.

    ``TrainOneStepCell`` returns a Tensor; loss-scale cells return ``(loss, overflow, scale)``; custom cells may return
    a list. The first element of a tuple/list is the loss (MindSpore's own convention in ``LossMonitor``).
    Reads one scalar with ``.item()`` (cheaper than ``.asnumpy()`` for a 0-d tensor).
    """
    value = net_outputs
    while isinstance(value, (tuple, list)):
        if not value:
            return None
        value = value[0]
    if value is None:
        return None
    if hasattr(value, "item") and getattr(value, "size", 1) == 1:
        return float(value.item())
    if hasattr(value, "asnumpy"):
        array = value.asnumpy()
        return float(array.reshape(-1)[0]) if array.size else None
    return float(value)


def request_stop(run_context: Any, logger: logging.Logger, reason: str, *, source: Any = None) -> None:
    """Ask MindSpore to stop after the current step and say why, in one log line that names the rank.

    ``request_stop()`` lets every callback's ``on_train_epoch_end`` / ``on_train_end`` run (an exception would not).
    In a multi-rank job this is a vote that every rank agrees on before anyone stops (``stop_agreement.py``), so all
    ranks stop after the same step; ``source`` is the voting callback (its class names the vote on the other ranks).
    """
    from msdebug_hooks import stop_agreement

    stop_agreement.vote(run_context, logger, reason, source)


_LOSS_CACHE_KEY = "_msdebug_step_loss"


def step_loss(cb_params: Any) -> Optional[float]:
    """The loss of the current step, read from the device once per step however many callbacks ask.

    The value is cached on ``cb_params`` (MindSpore's ``original_args()`` object, shared by all callbacks of a run)
    with the step number and the ``net_outputs`` object it came from; a new step means a fresh read.
    """
    if not isinstance(cb_params, dict):
        return loss_value(getattr(cb_params, "net_outputs", None))
    outputs = cb_params.get("net_outputs")
    step = cb_params.get("cur_step_num")
    cached = cb_params.get(_LOSS_CACHE_KEY)
    if cached is not None and cached[0] == step and cached[1] is outputs:
        return cached[2]
    value = loss_value(outputs)
    cb_params[_LOSS_CACHE_KEY] = (step, outputs, value)
    return value


def overflow_flag(net_outputs: Any) -> Optional[bool]:
    """The overflow flag of a loss-scale cell's ``(loss, overflow, scale)`` output, or None for other outputs."""
    if not isinstance(net_outputs, (tuple, list)) or len(net_outputs) < 2:
        return None
    flag = net_outputs[1]
    if isinstance(flag, bool):
        return flag
    dtype = str(getattr(flag, "dtype", ""))
    if "bool" not in dtype.lower() or getattr(flag, "size", 0) != 1:
        return None
    return bool(flag.item())


def format_loss(value: Optional[float]) -> str:
    """A loss for a log line: 6 significant digits, ``nan``/``inf`` as such, ``n/a`` when there is none."""
    return "n/a" if value is None else f"{value:.6g}"
