"""A ResNet-style CNN in PyTorch (the reference) and its MindSpore port, small enough for a CPU.

conv-bn-relu stem (3x3, ``padding=0``: 16x16 images become 14x14), two basic residual blocks (``layer1``), one
downsampling block with a 1x1 convolution shortcut (``layer2``, stride 2), global average pooling, a classifier.
Every activation is its own cell, so each call is one record. Layer names (execution order):
``conv1 bn1 relu``, then per block ``conv1 bn1 relu1 conv2 bn2 [shortcut.0 shortcut.1] relu2`` under
``layer1.0``, ``layer1.1``, ``layer2.0``, then ``pool flatten fc``.

The correct port: ``pad_mode="valid"`` for the stem (MindSpore's default is ``"same"``), ``pad_mode="pad",
padding=1`` for the 3x3 convolutions, ``BatchNorm2d(eps=1e-5, momentum=0.9)`` (MindSpore's momentum is
``1 - PyTorch's``). Port options read (see ``plants``): ``eps``, ``activation``, ``pad_mode`` per layer,
``bn_momentum``.
"""
from __future__ import annotations


from corpus.batches import labelled_batches, mindspore_batch, torch_batch  # noqa: F401 (the interface)
from corpus.plants import PortPlants

NAME = "cnn"
CLASSES = 10
IMAGE = (3, 16, 16)
RENAMES: tuple = ()


def make_batches(num_steps: int, batch_size: int, seed: int = 0) -> list:
    """``[(images float32 [B, 3, 16, 16], labels int32 [B])]``, the same on every side."""
    return labelled_batches(IMAGE, CLASSES, num_steps, batch_size, seed)


def eval_batch(batch_size: int) -> tuple:
    return make_batches(1, batch_size, seed=1234)[0]


def build_torch(seed: int = 0):
    """The reference model, its weights drawn with ``torch.manual_seed(seed)``."""
    import torch
    from torch import nn

    def conv3(cin, cout, stride=1):
        return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)

    class BasicBlock(nn.Module):
        def __init__(self, channels: int) -> None:
            super().__init__()
            self.conv1, self.bn1, self.relu1 = conv3(channels, channels), nn.BatchNorm2d(channels), nn.ReLU()
            self.conv2, self.bn2, self.relu2 = conv3(channels, channels), nn.BatchNorm2d(channels), nn.ReLU()

        def forward(self, x):
            out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
            return self.relu2(out + x)

    class DownBlock(nn.Module):
        def __init__(self, cin: int, cout: int) -> None:
            super().__init__()
            self.conv1, self.bn1, self.relu1 = conv3(cin, cout, 2), nn.BatchNorm2d(cout), nn.ReLU()
            self.conv2, self.bn2, self.relu2 = conv3(cout, cout), nn.BatchNorm2d(cout), nn.ReLU()
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=2, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
            return self.relu2(out + self.shortcut(x))

    class SmallResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 16, 3, padding=0, bias=False)
            self.bn1, self.relu = nn.BatchNorm2d(16), nn.ReLU()
            self.layer1 = nn.Sequential(BasicBlock(16), BasicBlock(16))
            self.layer2 = nn.Sequential(DownBlock(16, 32))
            self.pool, self.flatten = nn.AdaptiveAvgPool2d(1), nn.Flatten()
            self.fc = nn.Linear(32, CLASSES)

        def forward(self, x):
            x = self.layer2(self.layer1(self.relu(self.bn1(self.conv1(x)))))
            return self.fc(self.flatten(self.pool(x)))

    torch.manual_seed(seed)
    return SmallResNet()


def build_mindspore(plants: PortPlants):
    """The port, with the options of ``plants`` (defaults: the correct port)."""
    from mindspore import nn

    momentum = plants.option("bn_momentum", 0.9)

    def conv(name, cin, cout, kernel, stride, padding):
        mode = plants.layer("pad_mode", name, "pad" if padding else "valid")
        extra = {"padding": padding} if mode == "pad" else {}
        return nn.Conv2d(cin, cout, kernel, stride=stride, pad_mode=mode, has_bias=False, **extra)

    def norm(name, channels):
        return nn.BatchNorm2d(channels, eps=plants.layer("eps", name, 1e-5), momentum=momentum)

    def act(name):
        kind = plants.layer("activation", name, "relu")
        return {"relu": nn.ReLU, "silu": nn.SiLU, "gelu": lambda: nn.GELU(approximate=False),
                "leaky_relu": lambda: nn.LeakyReLU(0.01)}[kind]()

    class BasicBlock(nn.Cell):
        def __init__(self, prefix: str, channels: int) -> None:
            super().__init__()
            self.conv1 = conv(prefix + "conv1", channels, channels, 3, 1, 1)
            self.bn1, self.relu1 = norm(prefix + "bn1", channels), act(prefix + "relu1")
            self.conv2 = conv(prefix + "conv2", channels, channels, 3, 1, 1)
            self.bn2, self.relu2 = norm(prefix + "bn2", channels), act(prefix + "relu2")

        def construct(self, x):
            out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
            return self.relu2(out + x)

    class DownBlock(nn.Cell):
        def __init__(self, prefix: str, cin: int, cout: int) -> None:
            super().__init__()
            self.conv1 = conv(prefix + "conv1", cin, cout, 3, 2, 1)
            self.bn1, self.relu1 = norm(prefix + "bn1", cout), act(prefix + "relu1")
            self.conv2 = conv(prefix + "conv2", cout, cout, 3, 1, 1)
            self.bn2, self.relu2 = norm(prefix + "bn2", cout), act(prefix + "relu2")
            self.shortcut = nn.SequentialCell([conv(prefix + "shortcut.0", cin, cout, 1, 2, 0),
                                               norm(prefix + "shortcut.1", cout)])

        def construct(self, x):
            out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
            return self.relu2(out + self.shortcut(x))

    class SmallResNet(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = conv("conv1", 3, 16, 3, 1, 0)
            self.bn1, self.relu = norm("bn1", 16), act("relu")
            self.layer1 = nn.SequentialCell([BasicBlock("layer1.0.", 16), BasicBlock("layer1.1.", 16)])
            self.layer2 = nn.SequentialCell([DownBlock("layer2.0.", 16, 32)])
            self.pool, self.flatten = nn.AdaptiveAvgPool2d(1), nn.Flatten()
            self.fc = nn.Dense(32, CLASSES)

        def construct(self, x):
            x = self.layer2(self.layer1(self.relu(self.bn1(self.conv1(x)))))
            return self.fc(self.flatten(self.pool(x)))

    return SmallResNet()
