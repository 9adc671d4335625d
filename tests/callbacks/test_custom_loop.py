"""DebugSession: the callbacks driven from functional training loops (ms.value_and_grad + optimizer), no Model."""
from __future__ import annotations

import math

import mindspore as ms
import pytest
from mindspore import Tensor, nn

from _recording import Recorder
from lenet import make_lenet, make_loss_scale_cell, synthetic_batches
from msdebug_hooks import ConfigError, DebugSession, LossGuard, LossGuardError, StopAtStep, StopAtTime

pytestmark = pytest.mark.mindspore


def make_functional_step(seed=1):
    ms.set_seed(seed)
    network = make_lenet()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(network.trainable_params(), learning_rate=0.01, momentum=0.9)

    def forward(images, labels):
        return loss_fn(network(images), labels)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    def train_step(images, labels):
        loss, grads = grad_fn(images, labels)
        optimizer(grads)
        return loss

    return train_step, network, optimizer


def run_loop(session, train_step, epochs, batches, nan_batches=None, use_step_begin=False):
    for _ in range(epochs):
        for images, labels in synthetic_batches(batches, nan_batches=nan_batches):
            if use_step_begin:
                session.step_begin()
            loss = train_step(Tensor(images), Tensor(labels))
            session.step_end(loss)
            if session.should_stop:
                break
        session.epoch_end()
        if session.should_stop:
            break


@pytest.mark.parametrize("use_step_begin", [False, True])
def test_stop_at_step_in_a_functional_loop(use_step_begin):
    train_step, network, optimizer = make_functional_step()
    stop, recorder = StopAtStep(6), Recorder()
    with DebugSession(callbacks=[stop, recorder], network=network, optimizer=optimizer, epoch_size=5) as session:
        run_loop(session, train_step, epochs=5, batches=4, use_step_begin=use_step_begin)
    assert recorder.steps == [1, 2, 3, 4, 5, 6]
    assert recorder.events == ["train_begin", ("epoch_end", 1), ("epoch_end", 2), "train_end"]
    assert session.cur_step_num == 6 and session.cur_epoch_num == 2


def test_loss_guard_and_stop_at_step_together_in_a_functional_loop(tmp_path, caplog):
    train_step, network, optimizer = make_functional_step()
    guard, recorder = LossGuard(save_last_good=tmp_path, keep_previous=True), Recorder()
    with DebugSession(callbacks=[guard, StopAtStep(20), StopAtTime(10), recorder], network=network,
                      optimizer=optimizer) as session:
        for images, labels in synthetic_batches(8, nan_batches={5}):
            session.step_end(train_step(Tensor(images), Tensor(labels)))
            if session.should_stop:
                break            # no epoch_end(): the session closes the open epoch on exit
    assert recorder.steps == [1, 2, 3, 4, 5, 6] and recorder.first_non_finite_step() == 6
    assert (guard.failed_step, guard.failed_epoch) == (6, 1) and math.isinf(guard.failed_loss)
    assert recorder.events == ["train_begin", ("epoch_end", 1), "train_end"]
    assert guard.last_good_checkpoint == tmp_path / "last_good_rank0_step5.ckpt"
    assert guard.stop_at_step().step == 6
    # issue 32 point 4: the recipe fits the loop that failed (no model.train here) and names no empty dump path
    recipe, = [message for message in caplog.messages if "rerun recipe" in message]
    assert "in the same loop: DebugSession(callbacks=[..., StopAtStep(6)], ...), and break when session.should_stop" \
        in recipe and "model.train" not in recipe, recipe
    assert '"path": ""' not in recipe and '"path": "<an absolute directory: guard.dump_config(path)>"' in recipe


def test_tuple_outputs_from_a_loss_scale_cell_in_a_custom_loop():
    cell, network = make_loss_scale_cell(dynamic=False)
    guard = LossGuard()
    with DebugSession(callbacks=[guard], network=network, train_network=cell) as session:
        for images, labels in synthetic_batches(6, nan_batches={2}):
            outputs = cell(Tensor(images), Tensor(labels))          # (loss, overflow, scale)
            session.step_end(outputs=outputs)
            if session.should_stop:
                break
    assert guard.failed_step == 3 and "overflow flag set" in guard.reason


def test_an_exception_propagates_and_skips_the_end_hooks():
    train_step, network, optimizer = make_functional_step()
    recorder = Recorder()
    with pytest.raises(LossGuardError):
        with DebugSession(callbacks=[LossGuard(raise_error=True), recorder], network=network) as session:
            run_loop(session, train_step, epochs=2, batches=4, nan_batches={1})
    assert recorder.steps == [1]      # step 2 raised in the guard, before the recorder saw it
    assert "train_end" not in recorder.events and not any(isinstance(e, tuple) for e in recorder.events)


def test_misuse_is_reported():
    with pytest.raises(ConfigError) as info:
        DebugSession(callbacks=[object()])
    assert info.value.field == "callbacks[0]"
    with pytest.raises(ConfigError):
        DebugSession(callbacks=[], epoch_size=0)
    session = DebugSession(callbacks=[StopAtStep(1)])
    with pytest.raises(RuntimeError, match="outside"):
        session.step_end(1.0)


def test_the_loss_is_read_once_per_step_however_many_callbacks_use_it():
    reads = []

    class CountingLoss:
        """A loss object that counts device reads (``.item()``), as a Tensor would do them."""
        size = 1

        def __init__(self, value):
            self.value = value

        def item(self):
            reads.append(self.value)
            return self.value

    with DebugSession(callbacks=[LossGuard(spike_factor=10), StopAtStep(3)]) as session:
        for value in (2.0, 2.1, 2.2):
            session.step_end(CountingLoss(value))       # LossGuard reads every step, StopAtStep at step 3
    assert reads == [2.0, 2.1, 2.2]
    assert session.should_stop
