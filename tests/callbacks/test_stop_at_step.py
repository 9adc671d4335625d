"""StopAtStep on real MindSpore CPU training: stops after exactly the given global step, other end hooks still run."""
from __future__ import annotations

import pytest
from mindspore.train import RunContext
from mindspore.train.callback._callback import InternalCallbackParam

from _recording import Recorder
from lenet import make_dataset, make_model
from msdebug_hooks import ConfigError, StopAtStep
from msdebug_hooks.callbacks.stop_at_step import sink_stop_step

pytestmark = pytest.mark.mindspore


def test_stops_after_global_step_6_of_4_step_epochs_and_end_hooks_run():
    model, _ = make_model()
    stop, recorder = StopAtStep(6), Recorder()
    model.train(5, make_dataset(num_batches=4), callbacks=[stop, recorder])
    assert recorder.steps == [1, 2, 3, 4, 5, 6]
    assert recorder.events == ["train_begin", ("epoch_end", 1), ("epoch_end", 2), "train_end"]
    assert stop.stopped_step == 6


def test_stop_is_logged_with_step_epoch_and_rank(caplog):
    model, _ = make_model()
    model.train(2, make_dataset(num_batches=4), callbacks=[StopAtStep(2)])
    lines = [message for message in caplog.messages if "StopAtStep" in message]
    assert len(lines) == 1
    assert "rank 0" in lines[0] and "step 2" in lines[0] and "epoch 1" in lines[0] and "loss" in lines[0]


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "6", None])
def test_rejects_anything_but_a_positive_int(bad):
    with pytest.raises(ConfigError) as info:
        StopAtStep(bad)
    assert info.value.field == "step" and "int >= 1" in str(info.value)


def test_sink_stop_step_is_the_end_of_the_sink_holding_the_step():
    assert sink_stop_step(6, 0, 4) == 8
    assert sink_stop_step(8, 0, 4) == 8
    assert sink_stop_step(1, 0, 4) == 4
    assert sink_stop_step(6, 2, 4) == 6     # resumed at step 2: sinks end at 6, 10, ...
    assert sink_stop_step(6, 0, 1) == 6


def _begin_in_sink_mode(caplog, stop, sink_size, batch_num=10):
    # The sink path cannot run on CPU (it falls back to non-sink); drive on_train_begin with a real RunContext
    # holding what Model._train_dataset_sink_process puts there.
    params = InternalCallbackParam()
    params.dataset_sink_mode, params.sink_size, params.batch_num, params.cur_step_num = True, sink_size, batch_num, 0
    caplog.clear()
    stop.on_train_begin(RunContext(params))
    return [r.getMessage() for r in caplog.records if r.name.startswith("msdebug_hooks")]


def test_sink_mode_says_where_it_really_stops_and_how_to_get_closer(caplog):
    stop = StopAtStep(6)
    messages = _begin_in_sink_mode(caplog, stop, 4)
    assert stop.expected_stop_step == 8
    assert len(messages) == 1
    assert "really stop after step 8, not 6" in messages[0] and "sink_size=1" in messages[0]


def test_sink_mode_quiet_when_the_step_ends_a_sink(caplog):
    stop = StopAtStep(8)
    assert _begin_in_sink_mode(caplog, stop, 4) == []
    assert stop.expected_stop_step == 8


def test_cpu_sink_request_falls_back_and_stops_exactly():
    model, _ = make_model()
    recorder = Recorder()
    model.train(3, make_dataset(num_batches=4), callbacks=[StopAtStep(5), recorder], dataset_sink_mode=True,
                sink_size=4)
    assert recorder.steps == [1, 2, 3, 4, 5]
