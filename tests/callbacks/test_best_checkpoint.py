"""BestCheckpoint on real MindSpore 2.10 CPU training of LeNet-5: what it keeps is really the best, and reloads."""
from __future__ import annotations

import math

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import nn  # noqa: E402
from mindspore.train import Callback, Model  # noqa: E402

from lenet import make_dataset, make_lenet, make_model  # noqa: E402
from msdebug_hooks import BestCheckpoint, ConfigError  # noqa: E402
from msdebug_hooks.ckpt import scan_checkpoint  # noqa: E402

pytestmark = pytest.mark.mindspore  # every test here trains in this process


class _StepCounter(Callback):
    def __init__(self) -> None:
        super().__init__()
        self.steps = 0

    def on_train_step_end(self, run_context) -> None:
        self.steps += 1


def _eval_loss(network) -> float:
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return float(Model(network, loss_fn, metrics={"loss": nn.Loss()}).eval(
        make_dataset(4, seed=7), dataset_sink_mode=False)["loss"])


def _reload(path) -> object:
    network = make_lenet()
    not_loaded, _ = ms.load_param_into_net(network, ms.load_checkpoint(str(path)))
    assert not_loaded == []
    return network


def test_keep_one_file_that_reproduces_the_best_metric(tmp_path):
    model, network = make_model(0.05, metrics={"loss": nn.Loss()})
    best = BestCheckpoint(model, make_dataset(4, seed=7), monitor="loss", mode="min", every_n_epochs=1,
                          directory=tmp_path)
    model.train(4, make_dataset(4), callbacks=[best], dataset_sink_mode=False)

    assert len(best.evaluations) == 4
    values = [e.value for e in best.evaluations]
    assert best.best_score == min(values)
    files = sorted((tmp_path / "rank_0").glob("*.ckpt"))
    assert files == [best.best_path]
    winner = best.evaluations[values.index(min(values))]
    assert f"rank0-epoch{winner.epoch}-step{winner.step}-loss" in best.best_path.name
    assert not list((tmp_path / "rank_0").glob(".*"))  # no staging leftovers
    assert _eval_loss(_reload(best.best_path)) == pytest.approx(best.best_score, rel=1e-6, abs=1e-7)


def test_keep_two_keeps_the_two_best_every_n_steps(tmp_path):
    model, _ = make_model(0.05, metrics={"loss": nn.Loss()})
    best = BestCheckpoint(model, make_dataset(4, seed=7), monitor="loss", mode="min", every_n_steps=2, keep=2,
                          directory=tmp_path, prefix="top")
    model.train(2, make_dataset(6), callbacks=[best], dataset_sink_mode=False)

    assert [e.step for e in best.evaluations] == [2, 4, 6, 8, 10, 12]
    two_best = sorted(best.evaluations, key=lambda e: e.value)[:2]
    files = set((tmp_path / "rank_0").glob("top-*.ckpt"))
    assert files == {e.path for e in two_best} == set(best.kept_paths)
    assert best.best_path == two_best[0].path
    for kept in two_best:
        assert _eval_loss(_reload(kept.path)) == pytest.approx(kept.value, rel=1e-6, abs=1e-7)


def test_nan_metric_is_never_best_and_patience_stops_cleanly(tmp_path):
    # batch 3 carries a NaN: from step 4 on the weights are NaN and so is the evaluation loss
    model, _ = make_model(0.05, metrics={"loss": nn.Loss()})
    best = BestCheckpoint(model, make_dataset(4, seed=7), monitor="loss", mode="min", every_n_steps=2,
                          patience=2, directory=tmp_path)
    counter = _StepCounter()
    model.train(3, make_dataset(8, nan_batches={3}), callbacks=[best, counter], dataset_sink_mode=False)

    values = [e.value for e in best.evaluations]
    assert math.isfinite(values[0]) and all(math.isnan(v) for v in values[1:])
    assert best.best_score == values[0]
    assert [p.name for p in (tmp_path / "rank_0").glob("*.ckpt")] == [best.best_path.name]
    reloaded = ms.load_checkpoint(str(best.best_path))
    assert all(np.isfinite(p.asnumpy()).all() for p in reloaded.values())
    assert counter.steps == 6  # two NaN evaluations (steps 4 and 6) exhaust patience=2


def test_eval_fn_and_nan_values_from_it(tmp_path):
    scores = iter([0.3, float("nan"), 0.5, 0.4])
    seen = []

    def eval_fn(network):
        seen.append(type(network).__name__)
        return {"accuracy": next(scores)}

    model, _ = make_model(0.05)
    best = BestCheckpoint(eval_fn, monitor="accuracy", mode="max", every_n_steps=1, directory=tmp_path)
    model.train(1, make_dataset(4), callbacks=[best], dataset_sink_mode=False)
    assert seen == ["LeNet5"] * 4
    assert best.best_score == 0.5
    assert best.best_path.name.startswith("best-rank0-epoch1-step3-accuracy0.5")
    assert [p.name for p in (tmp_path / "rank_0").glob("*.ckpt")] == [best.best_path.name]


def test_evaluating_inside_training_does_not_change_training(tmp_path):
    plain_model, plain_net = make_model(0.05, metrics={"loss": nn.Loss()})
    plain_model.train(1, make_dataset(6), dataset_sink_mode=False)
    model, network = make_model(0.05, metrics={"loss": nn.Loss()})
    best = BestCheckpoint(model, make_dataset(4, seed=7), monitor="loss", mode="min", every_n_steps=1,
                          directory=tmp_path)
    model.fit(1, make_dataset(6), callbacks=[best], dataset_sink_mode=False)  # fit rejects legacy hooks
    assert len(best.evaluations) == 6
    for a, b in zip(plain_net.trainable_params(), network.trainable_params()):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
    assert network.training  # put back in train mode after each evaluation


def test_unknown_monitor_is_a_clear_error(tmp_path):
    model, _ = make_model(0.05, metrics={"loss": nn.Loss()})
    best = BestCheckpoint(model, make_dataset(2, seed=7), monitor="accuracy", directory=tmp_path)
    with pytest.raises(ConfigError, match=r"monitor='accuracy'.*\['loss'\]"):
        model.train(1, make_dataset(2), callbacks=[best], dataset_sink_mode=False)
    assert not (tmp_path / "rank_0").exists() or not list((tmp_path / "rank_0").iterdir())


@pytest.mark.parametrize("kwargs, field", [
    ({"mode": "best"}, "mode"),
    ({"every_n_steps": 0}, "every_n_steps"),
    ({"every_n_epochs": None}, "every_n_epochs"),
    ({"keep": 0}, "keep"),
    ({"min_delta": -1.0}, "min_delta"),
    ({"patience": 0}, "patience"),
    ({"prefix": "a/b"}, "prefix"),
    ({"monitor": ""}, "monitor"),
])
def test_bad_settings_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as info:
        BestCheckpoint(lambda network: 0.0, **kwargs)
    assert info.value.field == field


def test_model_needs_an_eval_dataset():
    model, _ = make_model(0.05)
    with pytest.raises(ConfigError, match="eval_dataset"):
        BestCheckpoint(model)
    with pytest.raises(ConfigError, match="model_or_eval_fn"):
        BestCheckpoint(42)


def test_a_finite_metric_of_nan_weights_is_never_saved(tmp_path, caplog):
    # batch 2 is poisoned: from step 3 on the weights are NaN, yet accuracy stays a finite number (argmax of NaN
    # logits picks class 0), so only the weights can tell. keep=10 would keep every finite evaluation.
    model, network = make_model(0.05, metrics={"accuracy": nn.Accuracy()})
    best = BestCheckpoint(model, make_dataset(4, seed=7), monitor="accuracy", mode="max", every_n_steps=1, keep=10,
                          directory=tmp_path)
    model.train(1, make_dataset(6, nan_batches={2}), callbacks=[best], dataset_sink_mode=False)

    assert not np.isfinite(network.conv1.weight.asnumpy()).all()           # the network really diverged
    after = [e for e in best.evaluations if e.step >= 3]
    assert len(after) == 4 and all(math.isfinite(e.value) and e.path is None for e in after)
    saved = sorted((tmp_path / "rank_0").glob("*.ckpt"))
    assert saved and set(saved) == set(best.kept_paths) == {e.path for e in best.evaluations if e.step < 3}
    for path in saved:                                                       # the project's own scan agrees
        assert scan_checkpoint(path).ok, scan_checkpoint(path).format()
    assert best.best_path in saved
    skipped = [message for message in caplog.messages if "hold NaN/Inf" in message]
    assert len(skipped) == 4 and "conv1.weight" in skipped[0] and "not saved, not counted as best" in skipped[0]
    assert f"the best stays {best.best_score:.6g} in {best.best_path}" in skipped[0]
