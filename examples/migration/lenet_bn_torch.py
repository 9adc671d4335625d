"""LeNet-5 with BatchNorm in PyTorch: the reference model of the migration example."""
from __future__ import annotations


def make_lenet_bn_torch(seed: int = 0):
    import torch
    from torch import nn

    class LeNetBN(nn.Module):
        def __init__(self, num_classes: int = 10) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 6, 5)
            self.bn1 = nn.BatchNorm2d(6, eps=1e-5, momentum=0.1)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.bn2 = nn.BatchNorm2d(16, eps=1e-5, momentum=0.1)
            self.relu = nn.ReLU()
            self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
            self.flatten = nn.Flatten()
            self.fc1 = nn.Linear(16 * 5 * 5, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, num_classes)

        def forward(self, x):
            x = self.pool(self.relu(self.bn1(self.conv1(x))))
            x = self.pool(self.relu(self.bn2(self.conv2(x))))
            x = self.flatten(x)
            x = self.relu(self.fc1(x))
            x = self.relu(self.fc2(x))
            return self.fc3(x)

    torch.manual_seed(seed)
    return LeNetBN()
