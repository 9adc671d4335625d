"""A callback that records what the other callbacks made MindSpore do: steps run, losses, epoch and train ends."""
from __future__ import annotations

import math
import time

from mindspore.train import Callback

from msdebug_hooks.training_loop import loss_value


class Recorder(Callback):
    """Records every step's global number and loss, every epoch end and the train end (put it last in the list)."""

    def __init__(self, sleep: float = 0.0, clock=None, on_step=None) -> None:
        super().__init__()
        self.sleep = sleep
        self.clock = clock          # optional callable read at each step end (e.g. StopAtTime.time_elapsed)
        self.on_step = on_step      # optional callable(number of steps recorded so far), after recording
        self.steps: list[int] = []
        self.losses: list[float] = []
        self.clock_values: list[float] = []
        self.events: list = []

    def on_train_begin(self, run_context):
        self.events.append("train_begin")

    def on_train_step_end(self, run_context):
        cb_params = run_context.original_args()
        if self.sleep:
            time.sleep(self.sleep)
        self.steps.append(int(cb_params.cur_step_num))
        self.losses.append(loss_value(cb_params.net_outputs))
        if self.clock is not None:
            self.clock_values.append(self.clock())
        if self.on_step is not None:
            self.on_step(len(self.steps))

    def on_train_epoch_end(self, run_context):
        self.events.append(("epoch_end", int(run_context.original_args().cur_epoch_num)))

    def on_train_end(self, run_context):
        self.events.append("train_end")

    def first_non_finite_step(self):
        for step, loss in zip(self.steps, self.losses):
            if not math.isfinite(loss):
                return step
        return None


def train_losses(callbacks, batches: int, *, on_step=None) -> list[float]:
    """Train the seeded LeNet (examples/lenet.py) for one epoch of ``batches`` with ``callbacks``; the loss of every
    step that ran. Two runs with the same seed give the same losses, so a run compares with an undisturbed one."""
    from lenet import make_dataset, make_model

    recorder = Recorder(on_step=on_step)
    model, _ = make_model()
    model.train(1, make_dataset(batches), callbacks=[*callbacks, recorder], dataset_sink_mode=False)
    return recorder.losses
