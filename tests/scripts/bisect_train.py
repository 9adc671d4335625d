"""A small, ordinary MindSpore training script for the bisect tests: no msdebug import anywhere.

A LeNet-style net (conv, pool, dense, LayerNorm, dense) in GRAPH_MODE on a fixed synthetic dataset, trained with
``Model.train`` from seeded weights: two runs of it are bit-identical. The tests write changed copies of this file
(one epsilon, one weight changed by a callback after a step, a crash) and bisect the copy against this one.
``--distributed``: data parallel under ``msrun``, each rank on its own shard.
"""
import argparse

import numpy as np
import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn
from mindspore.train import Callback, Model

EPSILON = 1e-5          # the LayerNorm's epsilon
CHANGE_AFTER = 0        # > 0: the callback below rescales fc2's weight after this step
SCALE = 1.5             # by this factor
CHANGE_RANK = -1        # the rank where it does (-1: every rank)
CRASH_AT = 0            # > 0: the training raises at this step


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, pad_mode="valid")
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(4 * 7 * 7, 32)
        self.norm = nn.LayerNorm((32,), epsilon=EPSILON)
        self.fc2 = nn.Dense(32, 10)

    def construct(self, x):
        x = self.flatten(self.pool(self.relu(self.conv(x))))
        x = self.relu(self.norm(self.fc1(x)))
        return self.fc2(x)


class Tweak(Callback):
    """What the changed copies of this script do between steps."""

    def __init__(self, net, rank):
        super().__init__()
        self.net, self.rank = net, rank

    def on_train_step_end(self, run_context):
        step = run_context.original_args().cur_step_num
        if step == CHANGE_AFTER and CHANGE_RANK in (-1, self.rank):
            self.net.fc2.weight.set_data(ms.Tensor(self.net.fc2.weight.asnumpy() * np.float32(SCALE)))
        if step + 1 == CRASH_AT:
            raise RuntimeError(f"the data loader broke before step {CRASH_AT}")


def batches(count, rank=0):
    rng = np.random.default_rng(rank)
    for _ in range(count):
        labels = rng.integers(0, 10, size=(16,)).astype(np.int32)
        images = rng.standard_normal((16, 1, 16, 16)).astype(np.float32)
        images[np.arange(16), 0, labels, :] += 2.0
        yield images, labels


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--distributed", action="store_true", help="data parallel under msrun, one shard per rank")
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE)
    rank = 0
    if args.distributed:
        from mindspore.communication import get_rank, init

        ms.set_device("CPU")
        init()
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
        rank = get_rank()
    ms.set_seed(1)
    net = Net()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = Model(net, loss, nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9))
    data = ds.GeneratorDataset(lambda: batches(args.steps, rank), column_names=["image", "label"], shuffle=False)
    model.train(1, data, callbacks=[Tweak(net, rank)], dataset_sink_mode=False)
    print("training done")


if __name__ == "__main__":
    main()
