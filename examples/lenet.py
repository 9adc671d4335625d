"""A LeNet-5 and a synthetic dataset, shared by the examples, the tests and the benchmarks.

Synthetic data keeps everything offline and reproducible: 32x32 single-channel images whose label is a simple function
of the image, so the network really learns (the loss goes down) within a few dozen steps.
"""
from __future__ import annotations

from typing import Iterator, Optional, Set, Tuple

import numpy as np


def synthetic_batches(num_batches: int = 8, batch_size: int = 32, *, seed: int = 0,
                      nan_batches: Optional[Set[int]] = None) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
    """Yield ``(images float32 [B,1,32,32], labels int32 [B])``; batches listed in ``nan_batches`` (0-based) are
    poisoned so that step's loss is not finite.

    A NaN pixel alone never reaches the loss (MindSpore's CPU ReLU maps NaN to 0), so a poisoned batch also scales
    every image by 1e30 (one huge image whose label wins its logits adds 0: a finite loss in about 1 run in 10): that
    step's loss is Inf, and its update turns the weights (and every later loss) into NaN, as real divergence does."""
    rng = np.random.default_rng(seed)
    for index in range(num_batches):
        labels = rng.integers(0, 10, size=(batch_size,)).astype(np.int32)
        images = rng.standard_normal((batch_size, 1, 32, 32)).astype(np.float32) * 0.1
        # label-dependent bright square: learnable signal
        for row, label in enumerate(labels):
            top = 2 + 3 * int(label)
            images[row, 0, top:top + 3, 4:28] += 1.0
        if nan_batches and index in nan_batches:
            images[0, 0, 0, 0] = np.nan
            images *= np.float32(1e30)
        yield images, labels


def make_dataset(num_batches: int = 8, batch_size: int = 32, *, seed: int = 0,
                 nan_batches: Optional[Set[int]] = None, prebuilt: bool = False):
    """A ``mindspore.dataset.GeneratorDataset`` over :func:`synthetic_batches` (already batched).

    ``prebuilt=True`` makes every batch up front behind a random-access source, so no Python data generation runs
    inside a timed training loop (the benchmarks use it).
    """
    import mindspore.dataset as ds

    if prebuilt:
        batches = list(synthetic_batches(num_batches, batch_size, seed=seed, nan_batches=nan_batches))

        class Batches:
            def __getitem__(self, index: int):
                return batches[index]

            def __len__(self) -> int:
                return len(batches)

        return ds.GeneratorDataset(Batches(), column_names=["image", "label"], shuffle=False)

    def generate():
        yield from synthetic_batches(num_batches, batch_size, seed=seed, nan_batches=nan_batches)

    return ds.GeneratorDataset(generate, column_names=["image", "label"], shuffle=False)


def make_lenet():
    """LeNet-5 as in MindSpore's tutorials (conv 6, conv 16, dense 120/84/10)."""
    from mindspore import nn

    class LeNet5(nn.Cell):
        def __init__(self, num_classes: int = 10) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 6, 5, pad_mode="valid")
            self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid")
            self.relu = nn.ReLU()
            self.max_pool2d = nn.MaxPool2d(kernel_size=2, stride=2)
            self.flatten = nn.Flatten()
            self.fc1 = nn.Dense(16 * 5 * 5, 120)
            self.fc2 = nn.Dense(120, 84)
            self.fc3 = nn.Dense(84, num_classes)

        def construct(self, x):
            x = self.max_pool2d(self.relu(self.conv1(x)))
            x = self.max_pool2d(self.relu(self.conv2(x)))
            x = self.flatten(x)
            x = self.relu(self.fc1(x))
            x = self.relu(self.fc2(x))
            return self.fc3(x)

    return LeNet5()


def make_model(learning_rate: float = 0.01, *, metrics: Optional[dict] = None, seed: int = 1):
    """``(model, network)``: a ``mindspore.train.Model`` over LeNet-5 with softmax cross-entropy and Momentum."""
    import mindspore as ms
    from mindspore import nn
    from mindspore.train import Model

    ms.set_seed(seed)
    network = make_lenet()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(network.trainable_params(), learning_rate=learning_rate, momentum=0.9)
    return Model(network, loss_fn, optimizer, metrics=metrics), network


def make_loss_scale_cell(learning_rate: float = 0.01, *, dynamic: bool = True, seed: int = 1):
    """``(train_cell, network)``: LeNet-5 in ``nn.TrainOneStepWithLossScaleCell``, which returns
    ``(loss, overflow, scale)`` each step: the tuple output of mixed-precision training.

    MindSpore 2.10's loss-scale cell reads its overflow status with Ascend/GPU-only operators; on the CPU we override
    its documented ``get_overflow_status`` hook with a plain "are all gradients finite" check.
    """
    import mindspore as ms
    from mindspore import nn, ops

    class CpuLossScaleCell(nn.TrainOneStepWithLossScaleCell):
        def get_overflow_status(self, status, compute_output):
            finite = ops.stack([ops.isfinite(grad).all() for grad in compute_output]).all()
            return ops.logical_not(finite)

    ms.set_seed(seed)
    network = make_lenet()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(network.trainable_params(), learning_rate=learning_rate, momentum=0.9)
    manager = nn.DynamicLossScaleUpdateCell(2.0 ** 12, 2, 1000) if dynamic else nn.FixedLossScaleUpdateCell(2.0 ** 12)
    return CpuLossScaleCell(nn.WithLossCell(network, loss_fn), optimizer, scale_sense=manager), network
