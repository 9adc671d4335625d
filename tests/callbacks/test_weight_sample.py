"""WeightMonitor's sampled check (the default) on real MindSpore 2.10 CPU training: what it names from the sample,
what it confirms with the exact check, and what only the exact check can see (a NaN between the sampled elements)."""
from __future__ import annotations

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
import mindspore.dataset as ds  # noqa: E402
from mindspore import nn, ops  # noqa: E402
from mindspore.train import Callback, Model  # noqa: E402

from lenet import make_dataset, make_lenet  # noqa: E402
from msdebug_hooks import ConfigError, WeightMonitor  # noqa: E402
from msdebug_hooks.callbacks._weight_sample import WeightSample, sample_plan, sampled_positions  # noqa: E402

pytestmark = pytest.mark.mindspore


def test_the_plan_covers_every_run_of_stride_elements_and_walks_across_columns():
    for shape, size in [((120, 400), 1024), ((6, 1, 5, 5), 16), ((10,), 1024), ((7, 64), 50), ((1000, 3), 64)]:
        plan = sample_plan(shape, size)
        first, stride, blocks, run = plan
        n = int(np.prod(shape))
        positions = sampled_positions(plan)
        assert len(positions) <= size and positions[-1] < n and len(set(positions.tolist())) == len(positions)
        gaps = np.diff(np.concatenate([[-1], positions, [n]]))
        assert gaps.max() <= stride                     # any run of `stride` consecutive elements holds a sample
        if len(positions) < n:
            assert run == 16 and np.gcd(stride, shape[-1]) == 1   # cache-line runs; the next run, other columns
    assert sample_plan((10,), 1024) == (0, 10, 1, 10)   # small: whole


def test_the_compiled_and_the_numpy_check_agree():
    rng = np.random.default_rng(0)
    before = [rng.standard_normal((300, 70)).astype(np.float32), rng.standard_normal(9).astype(np.float32)]
    after = [before[0] + 1e-2, before[1].copy()]
    after[0][150, 3] = np.nan
    verdicts = []
    for arrays in ([a.copy() for a in after], [a.astype(np.float64) for a in after]):   # float64: numpy path
        sample = WeightSample([a.astype(arrays[0].dtype) for a in before], size=64, rtol=1e-5, atol=1e-8,
                              ratio_gt=1e-4)
        verdicts.append(sample.check(arrays))
    compiled, plain = verdicts
    assert compiled.unchanged.tolist() == plain.unchanged.tolist() == [False, True]
    np.testing.assert_allclose(compiled.ratio[0], plain.ratio[0], rtol=1e-5)
    assert compiled.not_finite.tolist() == plain.not_finite.tolist()


def _model(lr_zero=()):
    ms.set_seed(1)
    network = make_lenet()
    zero = [p for p in network.trainable_params() if p.name in lr_zero]
    rest = [p for p in network.trainable_params() if p.name not in lr_zero]
    groups = [{"params": zero, "lr": 0.0}, {"params": rest}] if zero else rest
    optimizer = nn.Momentum(groups, learning_rate=0.05, momentum=0.9)
    return Model(network, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer), network


class _NudgeBetweenSamples(Callback):
    """Every step, moves fc1.weight's elements that its sample does not hold (a sparse update in miniature)."""

    def __init__(self, network, size: int) -> None:
        super().__init__()
        self.weight = network.fc1.weight
        self.mask = np.ones(self.weight.size, bool)
        self.mask[sampled_positions(sample_plan(self.weight.shape, size))] = False

    def on_train_step_end(self, run_context) -> None:
        values = self.weight.asnumpy().reshape(-1).copy()
        values[self.mask] += 1e-3
        self.weight.set_data(ms.Tensor(values.reshape(self.weight.shape)))


def test_a_sampled_unchanged_is_confirmed_exactly_and_a_sparse_mover_is_not_named():
    model, network = _model(lr_zero=("fc1.weight", "fc1.bias"))
    monitor = WeightMonitor(sample=64)
    model.train(1, make_dataset(5), callbacks=[monitor], dataset_sink_mode=False)
    fc1 = [(p.step, p.check) for p in monitor.problems if p.parameter == "fc1.weight"]
    assert fc1 == [(1, "exact")] + [(step, "sampled") for step in range(2, 6)]   # the first check is exact
    assert {p.parameter for p in monitor.problems} == {"fc1.weight", "fc1.bias"}

    model, network = _model(lr_zero=("fc1.weight",))
    monitor = WeightMonitor(sample=64)
    model.train(1, make_dataset(5), callbacks=[_NudgeBetweenSamples(network, 64), monitor],
                dataset_sink_mode=False)
    assert [p for p in monitor.problems if p.parameter == "fc1.weight"] == []    # the exact check saw it move


def test_the_sample_names_exploding_and_nan_weights_with_the_check_that_saw_them():
    model, _ = _model()
    monitor = WeightMonitor(sample=64, max_update_ratio=1e-7)
    model.train(2, make_dataset(6, nan_batches={2}), callbacks=[monitor], dataset_sink_mode=False)
    large = {(p.parameter, p.check) for p in monitor.problems if p.kind == "change_too_large" and p.step == 2}
    assert ("fc1.weight", "sampled") in large and ("fc3.bias", "exact") in large   # fc3.bias: 10 elements, whole
    nan = [p for p in monitor.problems if p.kind == "nan_or_inf"]
    assert nan and nan[0].step == 3
    first = {p.parameter: p for p in nan if p.step == 3}
    # conv1.weight (150 elements; 64 sampled: runs of 16 from elements 11, 49, 87, 125) turns NaN in the tap each
    # filter applies to pixel (0, 0), elements 0, 25, ..., 125: 25, 50, 100, 125 are sampled; the count is over all
    assert first["conv1.weight"].check == "sampled" and first["conv1.weight"].actual_value == 6.0


class _Embedded(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(100, 16)
        self.head = nn.Dense(16, 2)

    def construct(self, ids):
        return self.head(ops.mean(self.embedding(ids), 1))


class _PoisonUnusedRow(Callback):
    """At the end of ``step``, one element of an embedding row no batch uses becomes NaN (it never spreads: no
    batch gathers that row, and its gradient stays zero)."""

    def __init__(self, network, step: int, element: int) -> None:
        super().__init__()
        self.table, self.step, self.element = network.embedding.embedding_table, step, element

    def on_train_step_end(self, run_context) -> None:
        if run_context.original_args().cur_step_num == self.step:
            values = self.table.asnumpy().reshape(-1).copy()
            values[self.element] = np.nan
            self.table.set_data(ms.Tensor(values.reshape(self.table.shape)))


def test_a_nan_between_the_sampled_elements_is_found_by_the_next_exact_check():
    ms.set_seed(0)
    network = _Embedded()
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, 50, (4, 3)).astype(np.int32), rng.integers(0, 2, 4).astype(np.int32))
               for _ in range(8)]
    dataset = ds.GeneratorDataset(lambda: iter(batches), ["ids", "label"], shuffle=False)
    sampled = set(sampled_positions(sample_plan((100, 16), 16)).tolist())
    element = next(e for e in range(80 * 16, 100 * 16) if e not in sampled)      # row >= 80: never in a batch
    model = Model(network, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.SGD(network.trainable_params(), learning_rate=0.1))
    monitor = WeightMonitor(sample=16, full_every=3)
    model.train(1, dataset, callbacks=[_PoisonUnusedRow(network, 2, element), monitor], dataset_sink_mode=False)
    nan = [(p.step, p.parameter, p.check, p.actual_value) for p in monitor.problems if p.kind == "nan_or_inf"]
    # checks: 1 exact (the first), 2-3 sampled, 3 arms, 4 exact; the NaN appeared at step 2, between the samples
    assert nan[0] == (4, "embedding.embedding_table", "exact", 1.0)


def test_request_full_check_makes_the_check_after_next_exact():
    model, network = _model(lr_zero=("fc1.weight",))

    class _Ask(Callback):
        def on_train_step_end(self, run_context) -> None:
            if run_context.original_args().cur_step_num == 2:
                monitor.request_full_check()

    monitor = WeightMonitor(sample=64, full_every=1000)
    model.train(1, make_dataset(5), callbacks=[_Ask(), monitor], dataset_sink_mode=False)
    checks = [(p.step, p.check) for p in monitor.problems if p.parameter == "fc1.weight"]
    # asked before the monitor's check of step 2 (it is listed first): step 2's check copies, step 3's compares
    assert checks == [(1, "exact"), (2, "sampled"), (3, "exact"), (4, "sampled"), (5, "sampled")]


@pytest.mark.parametrize("kwargs, field", [({"sample": 0}, "sample"), ({"sample": 2.5}, "sample"),
                                           ({"full_every": 0}, "full_every")])
def test_bad_sample_settings_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as info:
        WeightMonitor(**kwargs)
    assert info.value.field == field
