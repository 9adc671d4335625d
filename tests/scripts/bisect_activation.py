"""A small MindSpore classifier trained with ``Model.train``, as a user writes one: no msdebug import anywhere.

Dense, activation, LayerNorm, dense, in GRAPH_MODE on a fixed synthetic dataset from seeded weights: two runs of it
are bit-identical on the CPU. The bisect tests write copies with another activation (``nn.ReLU()``,
``nn.GELU(approximate=False)``) and bisect the copy against this file.
"""
import argparse

import numpy as np
import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn
from mindspore.train import Model


class Classifier(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(20, 32)
        self.act = nn.GELU()
        self.norm = nn.LayerNorm((32,))
        self.fc2 = nn.Dense(32, 4)

    def construct(self, x):
        x = self.norm(self.act(self.fc1(x)))
        return self.fc2(x)


def batches(count):
    rng = np.random.default_rng(0)
    for _ in range(count):
        labels = rng.integers(0, 4, size=(8,)).astype(np.int32)
        features = rng.standard_normal((8, 20)).astype(np.float32)
        features[np.arange(8), labels] += 1.5
        yield features, labels


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(1)
    net = Classifier()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = Model(net, loss, nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9))
    data = ds.GeneratorDataset(lambda: batches(args.steps), column_names=["x", "label"], shuffle=False)
    model.train(1, data, dataset_sink_mode=False)
    print("training done")


if __name__ == "__main__":
    main()
