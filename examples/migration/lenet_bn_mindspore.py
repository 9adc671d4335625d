"""LeNet-5 with BatchNorm in MindSpore: the port of :mod:`lenet_bn_torch` (same layer names, same layout).

``bn_momentum`` is MindSpore's momentum: the weight of the *old* running statistics. PyTorch's ``momentum=0.1``
(the weight of the *new* batch) is MindSpore's ``momentum=0.9``; passing 0.1 here is the porting mistake the
migration example finds.
"""
from __future__ import annotations

BN_MOMENTUM = 0.9  # the right port of PyTorch's momentum=0.1


def make_lenet_bn(bn_momentum: float = BN_MOMENTUM):
    from mindspore import nn

    class LeNetBN(nn.Cell):
        def __init__(self, num_classes: int = 10) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 6, 5, pad_mode="valid", has_bias=True)
            self.bn1 = nn.BatchNorm2d(6, eps=1e-5, momentum=bn_momentum)
            self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid", has_bias=True)
            self.bn2 = nn.BatchNorm2d(16, eps=1e-5, momentum=bn_momentum)
            self.relu = nn.ReLU()
            self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
            self.flatten = nn.Flatten()
            self.fc1 = nn.Dense(16 * 5 * 5, 120)
            self.fc2 = nn.Dense(120, 84)
            self.fc3 = nn.Dense(84, num_classes)

        def construct(self, x):
            x = self.pool(self.relu(self.bn1(self.conv1(x))))
            x = self.pool(self.relu(self.bn2(self.conv2(x))))
            x = self.flatten(x)
            x = self.relu(self.fc1(x))
            x = self.relu(self.fc2(x))
            return self.fc3(x)

    return LeNetBN()
