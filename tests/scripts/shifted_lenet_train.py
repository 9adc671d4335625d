"""The examples' LeNet with one more ReLU after conv1 (same values, shifted op ids), trained one step in graph mode.

Graph mode parses ``construct`` from its source file, so this network lives in a file, not in ``python -c``.
"""
import mindspore as ms
from mindspore import nn
from mindspore.train import Model

import lenet
from lenet import make_dataset

ms.set_context(mode=ms.GRAPH_MODE)
LeNet5 = type(lenet.make_lenet())


class ShiftedLeNet(LeNet5):
    def construct(self, x):
        x = self.max_pool2d(self.relu(self.relu(self.conv1(x))))   # one more ReLU: ReLU(ReLU(x)) == ReLU(x)
        x = self.max_pool2d(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


if __name__ == "__main__":
    ms.set_seed(1)   # as lenet.make_model: the same initial weights
    network = ShiftedLeNet()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(network.trainable_params(), learning_rate=0.01, momentum=0.9)
    Model(network, loss_fn, optimizer).train(1, make_dataset(num_batches=1), dataset_sink_mode=False)
