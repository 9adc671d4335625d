"""WeightMonitor on real MindSpore 2.10 CPU training of LeNet-5: a zero-learning-rate layer is named, a frozen layer
is not a false alarm, NaN weights are flagged."""
from __future__ import annotations

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import nn  # noqa: E402
from mindspore.train import Callback, Model  # noqa: E402

from lenet import make_dataset, make_lenet  # noqa: E402
from msdebug_hooks import ConfigError, WeightMonitor  # noqa: E402
from msdebug_hooks.callbacks.weight_monitor import WeightProblemError  # noqa: E402

pytestmark = pytest.mark.mindspore  # every test here trains in this process

FC3 = {"fc3.weight", "fc3.bias"}


class _StepCounter(Callback):
    def __init__(self) -> None:
        super().__init__()
        self.steps = 0
        self.ended = False

    def on_train_step_end(self, run_context) -> None:
        self.steps += 1

    def on_train_end(self, run_context) -> None:
        self.ended = True


def _model(*, fc3_lr=None, freeze_fc3=False, lr=0.05, leave_out=()):
    ms.set_seed(1)
    network = make_lenet()
    if freeze_fc3:
        for param in network.fc3.trainable_params():
            param.requires_grad = False
    if fc3_lr is None:
        params = network.trainable_params()
    else:
        fc3 = [p for p in network.fc3.trainable_params() if p.name not in leave_out]
        params = [{"params": fc3, "lr": fc3_lr},
                  {"params": [p for p in network.trainable_params() if p.name not in FC3]}]
    optimizer = nn.Momentum(params, learning_rate=lr, momentum=0.9)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return Model(network, loss_fn, optimizer), network


def test_names_the_layer_whose_learning_rate_is_zero(caplog):
    caplog.set_level("INFO", logger="msdebug_hooks")
    model, network = _model(fc3_lr=0.0, leave_out={"fc3.bias"})      # fc3.bias: in no parameter group
    monitor = WeightMonitor()
    model.train(1, make_dataset(4), callbacks=[monitor], dataset_sink_mode=False)

    assert {p.parameter for p in monitor.problems} == FC3
    assert {p.kind for p in monitor.problems} == {"unchanged"}
    assert sorted(p.step for p in monitor.problems if p.parameter == "fc3.weight") == [1, 2, 3, 4]
    assert all(p.actual_value == 0.0 for p in monitor.problems)
    assert monitor.counts[("fc3.weight", "unchanged")] == 4
    assert len(monitor.checked) == 8 and monitor.frozen == []
    warnings = [line for line in caplog.messages if "did not change" in line]
    assert len(warnings) == 2 and all("rank 0" in line for line in warnings)  # one line per parameter, not per step
    assert {name for name in FC3 if any(name in line for line in warnings)} == FC3
    # issue 32 point 4: each with its likely cause, read from the optimizer, and one summary at the end
    weight, = [line for line in warnings if "fc3.weight" in line]
    bias, = [line for line in warnings if "fc3.bias" in line]
    assert "fc3.weight did not change (max |change| 0); its learning rate is 0 (its parameter group's 'lr', or the " \
        "optimizer's learning_rate); further hits" in weight, weight
    assert "fc3.bias did not change (max |change| 0); it is not among the Momentum optimizer's 7 parameters (left " \
        "out when the optimizer was made); further hits" in bias, bias
    summary, = [line for line in caplog.messages if "WeightMonitor summary" in line]
    assert summary.endswith("WeightMonitor summary: 8 parameter(s) checked at 4 step(s); unchanged: fc3.bias (4 "
                            "check(s) from step 1), fc3.weight (4 check(s) from step 1)"), summary


def test_a_layer_moving_within_the_tolerance_is_named_with_the_tolerance_that_hid_its_steps(caplog):
    model, _ = _model(fc3_lr=3e-8)   # fc3 moves, but by far less than rtol=1e-5 of its values
    monitor = WeightMonitor()
    model.train(1, make_dataset(3), callbacks=[monitor], dataset_sink_mode=False)

    weight = [p for p in monitor.problems if p.parameter == "fc3.weight"]
    assert [p.kind for p in weight] == ["unchanged"] * 3 and all(p.actual_value > 0 for p in weight)
    warnings = [line for line in caplog.messages if "fc3.weight did not change" in line]
    assert len(warnings) == 1 and "it moved, but within rtol=1e-05, atol=1e-08" in warnings[0]


def test_frozen_layer_is_not_a_false_alarm(caplog):
    model, network = _model(freeze_fc3=True)
    monitor = WeightMonitor(max_update_ratio=10.0)
    model.train(1, make_dataset(4), callbacks=[monitor], dataset_sink_mode=False)

    assert monitor.problems == []
    assert set(monitor.frozen) == FC3 and not FC3 & set(monitor.checked)
    assert len([line for line in caplog.messages if "frozen" in line]) == 1


def test_every_n_steps_and_parameter_filter():
    model, _ = _model(fc3_lr=0.0)
    monitor = WeightMonitor(every_n_steps=2, parameters=r"^fc3\.weight$")
    model.fit(1, make_dataset(4), callbacks=[monitor], dataset_sink_mode=False)  # fit rejects legacy hooks
    assert monitor.checked == ["fc3.weight"]
    assert [(p.step, p.parameter) for p in monitor.problems] == [(2, "fc3.weight"), (4, "fc3.weight")]


def test_nan_weights_are_flagged_and_stop_cleanly():
    model, _ = _model()
    monitor = WeightMonitor(on_problem="stop")
    counter = _StepCounter()
    # batch 2 (0-based) has a NaN in pixel (0, 0) of its first image: at step 3 the gradient of the one conv1 weight
    # of each of the 6 filters that sees that pixel is NaN, so exactly 6 weights turn NaN
    model.train(2, make_dataset(6, nan_batches={2}), callbacks=[monitor, counter], dataset_sink_mode=False)

    assert counter.steps == 3 and counter.ended
    assert [(p.step, p.parameter, p.kind, p.actual_value) for p in monitor.problems] == \
        [(3, "conv1.weight", "nan_or_inf", 6.0)]


def test_too_large_change_raises_when_asked():
    model, _ = _model(lr=0.05)
    monitor = WeightMonitor(max_update_ratio=1e-7, on_problem="raise")
    with pytest.raises(WeightProblemError, match=r"rank 0: WeightMonitor: .*changed too much.* at epoch 1, step 1"):
        model.train(1, make_dataset(2), callbacks=[monitor], dataset_sink_mode=False)
    ratios = [p.actual_value for p in monitor.problems]
    assert ratios and all(r > 1e-7 for r in ratios)


def test_previous_values_are_a_copy_not_a_view():
    # Parameter.asnumpy() on CPU returns a view of the live weights; a monitor that kept that view would see
    # "unchanged" everywhere. A normal run must report no unchanged parameter.
    model, _ = _model()
    monitor = WeightMonitor()
    model.train(1, make_dataset(3), callbacks=[monitor], dataset_sink_mode=False)
    assert [p for p in monitor.problems if p.kind == "unchanged"] == []


@pytest.mark.parametrize("kwargs, field", [
    ({"every_n_steps": 0}, "every_n_steps"),
    ({"on_problem": "ignore"}, "on_problem"),
    ({"max_update_ratio": 0}, "max_update_ratio"),
    ({"parameters": "fc3("}, "parameters"),
    ({"parameters": []}, "parameters"),
    ({"rtol": -1.0}, "rtol"),
    ({"rtol": "tight"}, "rtol"),
])
def test_bad_settings_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as info:
        WeightMonitor(**kwargs)
    assert info.value.field == field


def test_unchanged_in_a_functional_loop_through_debug_session():
    from msdebug_hooks import DebugSession

    ms.set_seed(1)
    network = make_lenet()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    fc3 = network.fc3.trainable_params()
    optimizer = nn.SGD([{"params": fc3, "lr": 0.0},
                        {"params": [p for p in network.trainable_params() if p.name not in FC3]}],
                       learning_rate=0.05)

    def forward(x, y):
        return loss_fn(network(x), y)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    monitor = WeightMonitor()
    with DebugSession(callbacks=[monitor], network=network) as session:
        from lenet import synthetic_batches
        for images, labels in synthetic_batches(3):
            loss, grads = grad_fn(ms.Tensor(images), ms.Tensor(labels))
            optimizer(grads)
            session.step_end(loss=loss)
    assert {p.parameter for p in monitor.problems} == FC3
    assert np.all([p.step for p in monitor.problems if p.parameter == "fc3.bias"] == np.array([1, 2, 3]))


class _ReplaceWeight(Callback):
    """At the end of ``step``, gives ``fc2.weight`` new storage full of NaN (``set_data`` allocates anew)."""

    def __init__(self, network, step: int) -> None:
        super().__init__()
        self.network, self.step = network, step

    def on_train_step_end(self, run_context) -> None:
        if run_context.original_args().cur_step_num == self.step:
            weight = self.network.fc2.weight
            weight.set_data(ms.Tensor(np.full(weight.shape, np.nan, np.float32)))


def test_a_weight_given_new_storage_is_read_from_there():
    # the monitor keeps views of the weights' storage between steps instead of calling asnumpy() each step; a
    # parameter that moved (set_data, a reloaded checkpoint) must be read from its new storage, not the stale view
    model, network = _model()
    monitor = WeightMonitor(on_problem="stop")
    model.train(1, make_dataset(4), callbacks=[_ReplaceWeight(network, 2), monitor], dataset_sink_mode=False)
    assert [(p.step, p.parameter, p.kind, p.actual_value) for p in monitor.problems] == \
        [(2, "fc2.weight", "nan_or_inf", float(network.fc2.weight.size))]


def test_parameter_views_follow_in_place_updates_and_moves():
    from mindspore import Parameter, ops

    from msdebug_hooks.parameter_views import ParameterViews

    params = [Parameter(ms.Tensor(np.ones((3, 4), np.float32)), name="a"),
              Parameter(ms.Tensor(np.zeros(5, np.float32)), name="b")]
    views = ParameterViews(params)
    first = views.arrays()[0]
    ops.assign(params[0], ms.Tensor(np.full((3, 4), 5.0, np.float32)))      # in place: the same view, new values
    assert views.arrays()[0] is first and np.all(first == 5.0)
    params[1].set_data(ms.Tensor(np.arange(5, dtype=np.float32)))            # new storage: read again
    assert views.arrays()[1].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    # any other list of parameters (the debugger's watched ones) is read the same way, in its own order
    assert [v.tolist() for v in views.values([params[1]])] == [[0.0, 1.0, 2.0, 3.0, 4.0]]
    params[1].set_data(ms.Tensor(np.full(5, 7.0, np.float32)))
    assert views.values([params[1], params[0]])[0].tolist() == [7.0] * 5
    assert views.values([params[1]])[0].tolist() == [7.0] * 5 and views.arrays()[1].tolist() == [7.0] * 5


def test_a_weight_whose_gradients_were_zero_is_told_by_its_optimizer_state():
    """``weight_causes.py``, the cause a training cannot show cheaply: a real Momentum step where one parameter's
    gradient is 0 leaves its moment at 0; an optimizer without state (SGD) or none at all: the three causes listed."""
    from msdebug_hooks.callbacks.weight_causes import unchanged_cause

    network = make_lenet()
    optimizer = nn.Momentum(network.trainable_params(), learning_rate=0.1, momentum=0.9)
    optimizer(tuple(ms.Tensor(np.zeros(p.shape, np.float32) if p.name == "fc3.bias" else np.ones(p.shape, np.float32))
                    for p in optimizer.parameters))
    assert unchanged_cause(network.fc3.bias, optimizer).startswith(
        "its gradient was 0 at every step: its optimizer state (moments.fc3.bias) is all zero")
    generic = "likely causes: it is not among the optimizer's parameters, its learning rate is 0, or its gradient"
    assert unchanged_cause(network.fc3.weight, optimizer).startswith(generic)      # its moment moved
    assert unchanged_cause(network.fc3.bias, nn.SGD(network.trainable_params(), 0.1)).startswith(generic)
    assert unchanged_cause(network.fc3.bias, None).startswith(generic)
