"""Stop training right after a given global step: the programmatic early stop at the failing iteration.

MindSpore's dump guide says: dump only the failing iteration and the one before it, then end training with
``run_context.request_stop()`` once the failing iteration has run. This callback is that stop.
"""
from __future__ import annotations

from typing import Any, Optional

from mindspore.train import Callback

from msdebug_hooks._log import get_logger
from msdebug_hooks.stop_agreement import AgreedStop
from msdebug_hooks.training_loop import format_loss, request_stop, step_loss
from msdebug_hooks.validation import whole_number

_LOG = get_logger("callbacks.stop_at_step")


def sink_stop_step(step: int, initial_step: int, sink_size: int) -> int:
    """The step at which a stop requested after ``step`` really takes effect when MindSpore sinks ``sink_size``
    steps at a time from ``initial_step``: the end of the sink that contains ``step``."""
    done = max(0, step - initial_step)
    sinks = -(-done // sink_size)  # ceil
    return initial_step + max(1, sinks) * sink_size


class StopAtStep(AgreedStop, Callback):
    """Stop right after global step ``step`` (1-based ``cur_step_num``, counted across epochs) completes.

    In non-sink mode (the default, and always on CPU) training stops after exactly ``step`` steps; the other
    callbacks' ``on_train_epoch_end`` and ``on_train_end`` still run. In dataset-sink mode on Ascend/GPU MindSpore
    reads the stop request only at the end of a sink of ``sink_size`` steps, so training stops at the end of the sink
    that contains ``step``; the callback says so at ``on_train_begin``, with the step where it will really stop.
    Use ``sink_size=1`` (or a divisor of ``step``) to stop exactly there.

    In a multi-rank job every rank counts the same steps, and the stop goes through the ranks' agreement
    (``stop_agreement.py``) like every stop of ours, so all ranks stop after the same step.

    Args:
        step: the last step to run, an int >= 1, as ``cur_step_num`` counts it (a resumed job starts counting at its
            ``initial_step``).

    Example:
        >>> model.train(10, dataset, callbacks=[StopAtStep(guard.failed_step)])   # rerun up to the failure
    """

    def __init__(self, step: int) -> None:
        super().__init__()
        whole_number("step", step, minimum=1,
                     allowed="an int >= 1: the 1-based global step (cur_step_num) to stop after")
        self.step = step
        self.stopped_step: Optional[int] = None
        self.expected_stop_step: int = step

    def __repr__(self) -> str:
        return f"StopAtStep({self.step})"

    def on_train_begin(self, run_context: Any) -> None:
        cb_params = run_context.original_args()
        self.expected_stop_step = self.step
        self.stopped_step = None
        if not cb_params.get("dataset_sink_mode", False):
            return
        sink_size = int(cb_params.get("sink_size", -1) or -1)
        if sink_size <= 0:
            sink_size = int(cb_params.get("batch_num", 0) or 0)
        if sink_size <= 1:
            return
        initial_step = int(cb_params.get("cur_step_num", 0) or 0)
        self.expected_stop_step = sink_stop_step(self.step, initial_step, sink_size)
        if self.expected_stop_step != self.step:
            _LOG.warning("StopAtStep(%d): dataset sink mode runs %d steps per sink and MindSpore honours a stop only "
                         "at the end of a sink, so training will really stop after step %d, not %d. To stop exactly "
                         "after step %d, train with sink_size=1 (or a sink_size that divides %d).",
                         self.step, sink_size, self.expected_stop_step, self.step, self.step, self.step - initial_step)

    def _train_step_end(self, run_context: Any) -> None:
        cb_params = run_context.original_args()
        current = cb_params.cur_step_num
        if current < self.step or self.stopped_step is not None:
            return
        self.stopped_step = int(current)
        where = f"step {current}" if current == self.step else f"the first step at or after {self.step}"
        request_stop(run_context, _LOG, f"reached {where}, loss {format_loss(step_loss(cb_params))}", source=self)
