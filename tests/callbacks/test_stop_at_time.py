"""StopAtTime on real MindSpore CPU training slowed to a known step time; budget forms; resume keeps the budget."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from _recording import Recorder
from lenet import make_dataset, make_model
from msdebug_hooks import ConfigError, StopAtTime

pytestmark = pytest.mark.mindspore

STEP_SLEEP = 0.25   # seconds added to every step by the recording callback


@pytest.mark.parametrize("run_time, unit, seconds", [
    (90, "seconds", 90.0),
    (1.5, "minutes", 90.0),
    (2, "hours", 7200.0),
    ("00:01:30", "minutes", 90.0),
    ("01:00:01:30", "minutes", 86490.0),
    (dt.timedelta(minutes=1, seconds=30), "minutes", 90.0),
    ({"hours": 1, "minutes": 30}, "minutes", 5400.0),
])
def test_accepted_budget_forms(run_time, unit, seconds):
    assert StopAtTime(run_time, unit=unit).run_time == pytest.approx(seconds)


@pytest.mark.parametrize("run_time, unit, field", [
    ("1h", "minutes", "run_time"), ("00:61:00", "minutes", "run_time"), (0, "minutes", "run_time"),
    (-5, "seconds", "run_time"), (True, "minutes", "run_time"), ([1], "minutes", "run_time"),
    ({"fortnights": 1}, "minutes", "run_time"), (float("nan"), "minutes", "run_time"), (10, "weeks", "unit"),
])
def test_wrong_forms_fail_at_construction_listing_the_accepted_forms(run_time, unit, field):
    with pytest.raises(ConfigError) as info:
        StopAtTime(run_time, unit=unit)
    assert info.value.field == field
    if field == "run_time":
        assert "DD:HH:MM:SS" in str(info.value) and "timedelta" in str(info.value)


def _slow_training(stopper, epochs=20):
    """LeNet training whose every step takes at least STEP_SLEEP; the recorder reads the stopper's clock."""
    model, _ = make_model()
    recorder = Recorder(sleep=STEP_SLEEP, clock=stopper.time_elapsed)
    model.train(epochs, make_dataset(num_batches=4), callbacks=[recorder, stopper])
    return recorder


def test_stops_within_two_steps_of_the_deadline(caplog):
    budget = 1.5
    stopper = StopAtTime(budget, unit="seconds")
    recorder = _slow_training(stopper)
    # the recorder sleeps, then reads the clock before StopAtTime checks it in the same step end; on a loaded machine
    # the budget may run out between those two reads, so the crossing step can be the stopped step itself
    over = [step for step, elapsed in zip(recorder.steps, recorder.clock_values) if elapsed >= budget]
    crossing = over[0] if over else stopper.stopped_step
    assert stopper.stopped_step is not None and stopper.time_elapsed() >= budget, "the budget was never reached"
    assert recorder.steps[-1] == stopper.stopped_step
    assert stopper.stopped_step - crossing <= 1          # stopped at the crossing step or the next one
    assert len(recorder.steps) < 80                      # well before the 20 epochs x 4 steps ran out
    assert recorder.events[-1] == "train_end"
    line, = [message for message in caplog.messages if "StopAtTime" in message]
    assert f"step {stopper.stopped_step}" in line and "epoch" in line and "loss" in line and "rank 0" in line
    assert stopper.time_remaining() == 0.0


def test_state_dict_round_trip_keeps_the_budget():
    budget = 2.0
    first = StopAtTime(budget, unit="seconds")
    first.load_state_dict({"time_elapsed": 1.5})
    state = json.loads(json.dumps(first.state_dict()))
    assert state["time_elapsed"] == pytest.approx(1.5) and state["run_time"] == budget

    resumed = StopAtTime(budget, unit="seconds")
    resumed.load_state_dict(state)
    assert resumed.time_remaining() == pytest.approx(0.5)
    recorder = _slow_training(resumed)
    # 0.5 s of budget left and >= 0.25 s per step: the resumed job stops within 3 steps, not after ~8
    assert 1 <= len(recorder.steps) <= 3
    assert resumed.time_elapsed() >= budget


def test_exhausted_budget_stops_a_resumed_job_after_its_first_step(caplog):
    stopper = StopAtTime(1, unit="seconds")
    stopper.load_state_dict({"time_elapsed": 5.0, "run_time": 1.0})
    recorder = _slow_training(stopper)
    assert recorder.steps == [1]
    assert "already used up" in caplog.text


def test_bad_state_is_rejected():
    stopper = StopAtTime(1)
    for bad in ({}, {"time_elapsed": "soon"}, {"time_elapsed": -1}):
        with pytest.raises(ConfigError) as info:
            stopper.load_state_dict(bad)
        assert info.value.field == "state.time_elapsed"
