"""LossGuard on real MindSpore CPU training: the exact failing step for Tensor and tuple outputs, graceful stop vs
raise, last good parameters, and the rerun recipe that dumps just the failing iterations."""
from __future__ import annotations

import math
import os

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn
from mindspore.train import Callback, Model

from _recording import Recorder
from project import ROOT, run_python
from lenet import make_dataset, make_loss_scale_cell, make_model, synthetic_batches
from msdebug_hooks import ConfigError, LossGuard, LossGuardError, StopAtStep

pytestmark = pytest.mark.mindspore

HELPERS = ROOT / "tests" / "helpers"      # _recording, for the rerun in a fresh process


def make_linear_model():
    """A network without ReLU, so a NaN pixel reaches the loss (MindSpore's CPU ReLU maps NaN to 0)."""
    ms.set_seed(1)
    network = nn.SequentialCell([nn.Flatten(), nn.Dense(32 * 32, 10)])
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(network.trainable_params(), learning_rate=0.01, momentum=0.9)
    return Model(network, loss_fn, optimizer), network


def dataset_from(batches):
    batches = list(batches)
    return ds.GeneratorDataset(lambda: iter(batches), column_names=["image", "label"], shuffle=False)


def test_tensor_output_nan_loss_stops_at_the_exact_step_and_other_end_hooks_run(caplog):
    model, _ = make_linear_model()
    guard, recorder = LossGuard(), Recorder()
    model.train(3, make_dataset(num_batches=4, nan_batches={2}), callbacks=[guard, recorder])
    assert recorder.steps == [1, 2, 3]
    assert math.isnan(recorder.losses[-1]) and recorder.first_non_finite_step() == 3
    assert (guard.failed_step, guard.failed_epoch) == (3, 1)
    assert math.isnan(guard.failed_loss) and guard.reason == "loss is nan"
    assert recorder.events == ["train_begin", ("epoch_end", 1), "train_end"]     # graceful: end hooks ran
    stop_line, = [message for message in caplog.messages if "stopping training" in message]
    assert "LossGuard: loss is nan at epoch 1, step 3" in stop_line and "rank 0" in stop_line
    recipe, = [message for message in caplog.messages if "rerun recipe" in message]
    assert "StopAtStep(3)" in recipe and "1|2" in recipe
    assert "  model.train(..., callbacks=[StopAtStep(3)])" in recipe and '"path": ""' not in recipe


def test_lenet_inf_loss_is_caught_at_its_step():
    model, _ = make_model()
    guard, recorder = LossGuard(), Recorder()
    model.train(3, make_dataset(num_batches=4, nan_batches={1}), callbacks=[guard, recorder])
    assert recorder.first_non_finite_step() == guard.failed_step == 2
    assert math.isinf(guard.failed_loss)


def test_tuple_output_of_a_loss_scale_cell_is_guarded():
    cell, _ = make_loss_scale_cell()
    guard, recorder = LossGuard(), Recorder()
    Model(cell).train(2, make_dataset(num_batches=6, nan_batches={3}), callbacks=[guard, recorder])
    assert recorder.steps == [1, 2, 3, 4] and recorder.first_non_finite_step() == 4
    assert guard.failed_step == 4
    assert "overflow flag set" in guard.reason        # the update was skipped, the loss itself is not finite
    assert recorder.events[-1] == "train_end"


def _nan_pixel_only(num_batches, bad):
    """A NaN pixel and nothing else: the loss stays finite (ReLU drops it) but the gradients overflow."""
    for index, (images, labels) in enumerate(synthetic_batches(num_batches)):
        if index == bad:
            images[0, 0, 10, 10] = np.nan
        yield images, labels


def test_overflow_with_a_finite_loss_is_not_a_failure_unless_asked():
    cell, _ = make_loss_scale_cell(dynamic=False)
    overflow_steps = []

    class Overflows(Callback):
        def on_train_step_end(self, run_context):
            args = run_context.original_args()
            if bool(args.net_outputs[1].item()):
                overflow_steps.append(args.cur_step_num)

    guard, recorder = LossGuard(), Recorder()
    Model(cell).train(1, dataset_from(_nan_pixel_only(5, 2)), callbacks=[guard, recorder, Overflows()])
    assert overflow_steps == [3] and all(math.isfinite(loss) for loss in recorder.losses)
    assert guard.failed_step is None and recorder.steps == [1, 2, 3, 4, 5]

    cell, _ = make_loss_scale_cell(dynamic=False)
    strict = LossGuard(overflow_patience=1)
    Model(cell).train(1, dataset_from(_nan_pixel_only(5, 2)), callbacks=[strict])
    assert strict.failed_step == 3 and "overflowed 1 steps in a row" in strict.reason


def test_threshold_and_spike():
    model, _ = make_model()
    guard = LossGuard(threshold=2.0)            # LeNet starts near ln(10) = 2.3
    model.train(1, make_dataset(num_batches=4), callbacks=[guard])
    assert guard.failed_step == 1 and "above threshold 2" in guard.reason

    def spiky():
        for index, (images, labels) in enumerate(synthetic_batches(8)):
            if index == 6:
                images *= np.float32(1000.0)     # a finite loss about 4x the usual one
            yield images, labels

    model, _ = make_model()
    guard, recorder = LossGuard(spike_factor=3, spike_window=10), Recorder()
    model.train(1, dataset_from(spiky()), callbacks=[guard, recorder])
    assert guard.failed_step == 7 and math.isfinite(guard.failed_loss)
    assert recorder.losses[-1] > 3 * float(np.median(recorder.losses[:-1]))
    assert "spiked above 3 x the median" in guard.reason


def test_raise_error_raises_and_skips_the_other_end_hooks():
    model, _ = make_model()
    guard, recorder = LossGuard(raise_error=True), Recorder()
    with pytest.raises(LossGuardError) as info:
        model.train(2, make_dataset(num_batches=4, nan_batches={2}), callbacks=[guard, recorder])
    assert info.value.step == 3 and info.value.epoch == 1 and "step 3" in str(info.value)
    assert guard.failed_step == 3
    assert "train_end" not in recorder.events and ("epoch_end", 1) not in recorder.events


def test_keep_previous_saves_the_parameters_from_before_the_failing_update(tmp_path):
    model, network = make_model()
    kept = {}

    class Snapshot(Callback):
        def on_train_step_end(self, run_context):
            kept[run_context.original_args().cur_step_num] = network.conv1.weight.asnumpy().copy()

    guard = LossGuard(save_last_good=tmp_path, keep_previous=True)
    model.train(1, make_dataset(num_batches=6, nan_batches={3}), callbacks=[guard, Snapshot()])
    assert guard.failed_step == 4
    assert not np.isfinite(network.conv1.weight.asnumpy()).all()      # the failing update corrupted the weights
    path = guard.last_good_checkpoint
    assert path == tmp_path / "last_good_rank0_step3.ckpt" and sorted(os.listdir(tmp_path)) == [path.name]
    saved = ms.load_checkpoint(str(path))
    np.testing.assert_array_equal(saved["conv1.weight"].asnumpy(), kept[3])
    assert all(np.isfinite(value.asnumpy()).all() for value in saved.values())
    assert any("moments" in name for name in saved)                   # optimizer state is kept too


def test_without_keep_previous_corrupted_parameters_are_not_saved(tmp_path, caplog):
    model, _ = make_model()
    guard = LossGuard(save_last_good=tmp_path)
    model.train(1, make_dataset(num_batches=6, nan_batches={3}), callbacks=[guard])
    assert guard.failed_step == 4 and guard.last_good_checkpoint is None and os.listdir(tmp_path) == []
    assert "not saving the parameters" in caplog.text and "keep_previous=True" in caplog.text


def test_without_keep_previous_a_skipped_update_leaves_good_parameters_to_save(tmp_path):
    cell, network = make_loss_scale_cell()
    guard = LossGuard(save_last_good=tmp_path)
    Model(cell).train(1, make_dataset(num_batches=6, nan_batches={3}), callbacks=[guard])
    assert guard.last_good_checkpoint == tmp_path / "last_good_rank0_step4.ckpt"
    saved = ms.load_checkpoint(str(guard.last_good_checkpoint))
    np.testing.assert_array_equal(saved["conv1.weight"].asnumpy(), network.conv1.weight.asnumpy())


@pytest.mark.parametrize("kwargs, field", [
    ({"threshold": "high"}, "threshold"), ({"spike_factor": 1.0}, "spike_factor"),
    ({"spike_window": 1}, "spike_window"),
    ({"spike_reference": "mode"}, "spike_reference"), ({"overflow_patience": 0}, "overflow_patience"),
    ({"keep_previous": True}, "keep_previous"), ({"save_last_good": 3}, "save_last_good"),
])
def test_bad_options_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as info:
        LossGuard(**kwargs)
    assert info.value.field == field


def test_recipe_needs_a_failure_first():
    guard = LossGuard()
    with pytest.raises(RuntimeError, match="has not fired"):
        guard.stop_at_step()
    with pytest.raises(RuntimeError, match="has not fired"):
        guard.dump_config("/tmp/x")


def test_rerun_recipe_dumps_exactly_the_iteration_before_and_the_failing_one(tmp_path):
    model, _ = make_model()
    guard = LossGuard()
    model.train(2, make_dataset(num_batches=8, nan_batches={4}), callbacks=[guard])
    assert guard.failed_step == 5
    stop = guard.stop_at_step()
    assert isinstance(stop, StopAtStep) and stop.step == 5 and [c.step for c in guard.rerun_callbacks()] == [5]

    dump_dir = tmp_path / "dump"
    config = guard.dump_config(dump_dir)
    assert config.iteration == "3|4" and str(config.path) == str(dump_dir)
    config_file = config.write(tmp_path / "dump.json")

    # MindSpore reads the dump setting once per process: the rerun applies it in a fresh one, before training
    proc = run_python(f"""
        from msdebug_hooks import DumpConfig, StopAtStep
        DumpConfig.load({str(config_file)!r}).apply({str(config_file)!r})
        from _recording import Recorder
        from lenet import make_dataset, make_model
        model, _ = make_model()
        recorder = Recorder()
        model.train(2, make_dataset(num_batches=8, nan_batches={{4}}), callbacks=[{stop!r}, recorder])
        print("STEPS", recorder.steps)
    """, env={"PYTHONPATH": os.pathsep.join([str(HELPERS), str(ROOT / "examples"), str(ROOT)])})
    assert "STEPS [1, 2, 3, 4, 5]" in proc.stdout

    iteration_dirs = {p.name: p for p in dump_dir.glob("rank_0/Net/*/*") if p.is_dir()}
    assert set(iteration_dirs) == {"3", "4"}

    def all_finite(directory):
        return all(np.isfinite(np.load(f)).all() for f in directory.glob("*.npy") if np.load(f).dtype.kind == "f")

    assert list(iteration_dirs["4"].glob("*.npy")) and list(iteration_dirs["3"].glob("*.npy"))
    assert all_finite(iteration_dirs["3"]) and not all_finite(iteration_dirs["4"])   # the dump holds the failure
