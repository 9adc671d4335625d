"""Issue 32 point 2: LossGuard next to MindSpore's LossMonitor, which every tutorial script has and which raises
``ValueError`` on a NaN/Inf loss in the same step end. Real LeNet training on the CPU whose step 2 has an Inf loss.

Before or after the guard in the list, the guard's record (the step, the last good checkpoint, the rerun recipe) is
complete before LossMonitor raises, and one line says what LossMonitor will do and how to keep it;
``quiet_loss_monitor=True`` lets the training stop cleanly with LossMonitor still printing its loss lines.
"""
from __future__ import annotations

import math

import pytest
from mindspore.train import LossMonitor

from _recording import Recorder
from lenet import make_dataset, make_model
from msdebug_hooks import LossGuard

pytestmark = pytest.mark.mindspore

INF_STEP = 2          # batch 1 is poisoned: the loss of step 2 is Inf


def _callbacks(order: str, guard, monitor, recorder) -> list:
    return [monitor, guard, recorder] if order == "monitor-first" else [guard, monitor, recorder]


@pytest.mark.parametrize("order", ["monitor-first", "guard-first"])
def test_the_guard_records_everything_before_loss_monitor_raises_and_says_what_it_will_do(tmp_path, caplog,
                                                                                          order):
    model, _ = make_model()
    guard, monitor, recorder = LossGuard(save_last_good=tmp_path, keep_previous=True), LossMonitor(), Recorder()
    with pytest.raises(ValueError, match="loss is NAN or INF"):
        model.train(1, make_dataset(num_batches=4, nan_batches={INF_STEP - 1}),
                    callbacks=_callbacks(order, guard, monitor, recorder), dataset_sink_mode=False)
    assert guard.failed_step == INF_STEP and math.isinf(guard.failed_loss)
    assert guard.last_good_checkpoint == tmp_path / f"last_good_rank0_step{INF_STEP - 1}.ckpt"
    assert guard.last_good_checkpoint.is_file()
    messages = caplog.messages
    recipe = next(i for i, m in enumerate(messages) if "rerun recipe for step 2" in m)
    said = [i for i, m in enumerate(messages) if "LossMonitor" in m]
    assert len(said) == 1 and said[0] > recipe, messages
    place = "before" if order == "monitor-first" else "after"
    assert f"the LossMonitor listed {place} the guard will raise ValueError" in messages[said[0]]
    assert "LossGuard(quiet_loss_monitor=True)" in messages[said[0]]
    assert "\n" not in messages[said[0]]
    assert "on_train_step_end" not in vars(monitor)        # no wrapper left behind after the error


@pytest.mark.parametrize("order", ["monitor-first", "guard-first"])
def test_quiet_loss_monitor_lets_the_training_stop_cleanly_and_keeps_its_loss_lines(caplog, capsys, order):
    model, _ = make_model()
    guard, monitor, recorder = LossGuard(quiet_loss_monitor=True), LossMonitor(), Recorder()
    model.train(1, make_dataset(num_batches=4, nan_batches={INF_STEP - 1}),
                callbacks=_callbacks(order, guard, monitor, recorder), dataset_sink_mode=False)
    assert guard.failed_step == INF_STEP
    assert recorder.steps == [1, INF_STEP] and recorder.events[-1] == "train_end"     # stopped through request_stop
    printed = capsys.readouterr().out
    assert "step: 1, loss is" in printed and f"step: {INF_STEP}," not in printed
    said = [m for m in caplog.messages if "LossMonitor" in m]
    assert len(said) == 1 and "leaves out step 2 (quiet_loss_monitor=True)" in said[0]
    assert "on_train_step_end" not in vars(monitor)


def test_a_callback_that_runs_first_at_a_lower_rank_stays_ahead_of_the_guard():
    """The debugger's step end (``step_end_rank = 0``) comes before the guard's on every callback both put their
    hook in front of, and the guard does not wrap it: a hit still pauses before the guard stops or raises. A
    stand-in with the debugger's means (``step_order.run_first``), in a real training."""
    from mindspore.train import Callback

    from msdebug_hooks.step_order import OncePerStep, restore, run_first

    seen = []

    class RunsFirst(Callback):
        step_end_rank = 0

        def on_train_begin(self, run_context):
            self.hook = OncePerStep(lambda rc: seen.append((rc.original_args().cur_step_num, guard.failed_step)))
            self.wrapped = run_first(run_context.original_args().list_callback, self, self.hook)

        def on_train_step_end(self, run_context):
            self.hook(run_context)

        def on_train_end(self, run_context):
            restore(self.wrapped, self.hook)

    model, _ = make_model()
    guard, monitor, first = LossGuard(quiet_loss_monitor=True), LossMonitor(), RunsFirst()
    model.train(1, make_dataset(num_batches=4, nan_batches={INF_STEP - 1}), callbacks=[monitor, guard, first],
                dataset_sink_mode=False)
    assert seen == [(1, None), (INF_STEP, None)]      # at step 2 it ran before the guard had failed the step
    assert guard.failed_step == INF_STEP
    assert "on_train_step_end" not in vars(first) and "on_train_step_end" not in vars(monitor)
