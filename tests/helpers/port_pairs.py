"""Small PyTorch / MindSpore model pairs written the way users write ports, for the port check's clean-means-clean
rules (tests/compare/test_port_clean.py through tests/scripts/port_clean_run.py).

Each pair is correct unless it says otherwise; the differences between the sides are the ones real ports show:
a functional ``torch.relu`` against an ``nn.ReLU`` cell, an ``nn.Identity`` norm, a ``Dropout`` cell the other side
lacks, an adaptive pool + flatten against a ``mean``, blocks of a user class inside a built-in container, layers
called from a helper method, and activations whose attribute names shifted. Imports both frameworks.
"""
from __future__ import annotations

import mindspore as ms
import torch
import torch.nn.functional as F
from mindspore import nn as mnn
from mindspore import ops
from torch import nn as tnn


# --- a classifier head: functional vs cell activations, identity norms, dropout, pool vs mean -------------------
class TorchNet(tnn.Module):
    """conv -> bn -> torch.relu (functional) -> conv -> Identity norm -> relu -> mean -> fc."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = tnn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = tnn.BatchNorm2d(8)
        self.conv2 = tnn.Conv2d(8, 8, 3, padding=1)
        self.norm = tnn.Identity()
        self.fc = tnn.Linear(8, 5)

    def forward_features(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.norm(self.conv2(x)))

    def forward(self, x):
        return self.fc(self.forward_features(x).mean((2, 3)))


class MsNet(mnn.Cell):
    """The same with cells: ReLU cells, no norm, a Dropout(p=0) cell, AdaptiveAvgPool2d + Flatten."""

    def __init__(self, extra: str = "") -> None:
        """``extra``: ``"gelu"`` ports act2 as a GELU; ``"dropout"`` leaves the Dropout cell at p = 0.5 (it runs in
        training mode, where PyTorch has no dropout)."""
        super().__init__()
        self.conv1 = mnn.Conv2d(3, 8, 3, pad_mode="pad", padding=1, has_bias=True)
        self.bn1 = mnn.BatchNorm2d(8, momentum=0.9)
        self.act1 = mnn.ReLU()
        self.conv2 = mnn.Conv2d(8, 8, 3, pad_mode="pad", padding=1, has_bias=True)
        self.act2 = mnn.ReLU() if extra != "gelu" else mnn.GELU(approximate=False)
        self.pool = mnn.AdaptiveAvgPool2d(1)
        self.flatten = mnn.Flatten()
        self.drop = mnn.Dropout(p=0.5 if extra == "dropout" else 0.0)
        self.fc = mnn.Dense(8, 5)
        self.extra = extra

    def forward_features(self, x):
        x = self.act1(self.bn1(self.conv1(x)))
        return self.act2(self.conv2(x))

    def construct(self, x):
        return self.fc(self.drop(self.flatten(self.pool(self.forward_features(x)))))


def torch_net() -> TorchNet:
    torch.manual_seed(0)
    return TorchNet()


def mindspore_net() -> MsNet:
    return MsNet()


def mindspore_net_gelu() -> MsNet:
    """The port with act2 a GELU where the reference calls ``torch.relu``: a real bug in an unpaired layer."""
    return MsNet("gelu")


# --- activations whose attribute names shifted: paired by order and role -----------------------------------------
class TorchMlp(tnn.Module):
    """``b_extra``: a Tanh gate before fc3 that the port lacks (a real bug: an unpaired layer that changes values)."""

    def __init__(self, b_extra: bool = False) -> None:
        super().__init__()
        self.fc1, self.act_a = tnn.Linear(6, 16), tnn.ReLU()
        self.fc2, self.act_b = tnn.Linear(16, 16), tnn.ReLU()
        self.fc3 = tnn.Linear(16, 4)
        self.gate = tnn.Tanh() if b_extra else None

    def forward(self, x):
        x = self.act_b(self.fc2(self.act_a(self.fc1(x))))
        return self.fc3(self.gate(x) if self.gate is not None else x)


class MsMlp(mnn.Cell):
    """``activation1``/``activation2`` for PyTorch's ``act_a``/``act_b``; ``swap``: the second is a GELU."""

    def __init__(self, swap: bool = False) -> None:
        super().__init__()
        self.fc1, self.activation1 = mnn.Dense(6, 16), mnn.ReLU()
        self.fc2 = mnn.Dense(16, 16)
        self.activation2 = mnn.GELU(approximate=False) if swap else mnn.ReLU()
        self.fc3 = mnn.Dense(16, 4)

    def construct(self, x):
        return self.fc3(self.activation2(self.fc2(self.activation1(self.fc1(x)))))


# --- a user block class inside a built-in container (DenseNet's features) -----------------------------------------
class _TorchDenseLayer(tnn.Module):
    def __init__(self, channels: int, growth: int) -> None:
        super().__init__()
        self.norm = tnn.BatchNorm2d(channels)
        self.conv = tnn.Conv2d(channels, growth, 3, padding=1, bias=False)

    def forward(self, x):
        return torch.cat([x, self.conv(F.relu(self.norm(x)))], 1)


class _TorchDenseBlock(tnn.Module):
    def __init__(self, channels: int, growth: int) -> None:
        super().__init__()
        self.layer1 = _TorchDenseLayer(channels, growth)
        self.layer2 = _TorchDenseLayer(channels + growth, growth)

    def forward(self, x):
        return self.layer2(self.layer1(x))


class TorchDense(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = tnn.Sequential(tnn.Conv2d(3, 4, 3, padding=1, bias=False), _TorchDenseBlock(4, 4),
                                       tnn.BatchNorm2d(12))
        self.classifier = tnn.Linear(12, 5)

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(F.relu(self.features(x)), 1), 1))


class _MsDenseLayer(mnn.Cell):
    def __init__(self, channels: int, growth: int, eps: float) -> None:
        super().__init__()
        self.norm = mnn.BatchNorm2d(channels, momentum=0.9, eps=eps)
        self.relu = mnn.ReLU()
        self.conv = mnn.Conv2d(channels, growth, 3, pad_mode="pad", padding=1)

    def construct(self, x):
        return ops.cat([x, self.conv(self.relu(self.norm(x)))], 1)


class _MsDenseBlock(mnn.Cell):
    def __init__(self, channels: int, growth: int, eps: float) -> None:
        super().__init__()
        self.layer1 = _MsDenseLayer(channels, growth, 1e-5)
        self.layer2 = _MsDenseLayer(channels + growth, growth, eps)

    def construct(self, x):
        return self.layer2(self.layer1(x))


class GlobalAvgPooling(mnn.Cell):
    """mindcv-style: the mean over the spatial axes, ``[N, C]`` where PyTorch's adaptive pool gives ``[N, C, 1, 1]``."""

    def construct(self, x):
        return ops.mean(x, (2, 3), keep_dims=False)


class MsDense(mnn.Cell):
    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.features = mnn.SequentialCell([mnn.Conv2d(3, 4, 3, pad_mode="pad", padding=1),
                                            _MsDenseBlock(4, 4, eps), mnn.BatchNorm2d(12, momentum=0.9)])
        self.relu = mnn.ReLU()
        self.pool = GlobalAvgPooling()
        self.classifier = mnn.Dense(12, 5)

    def construct(self, x):
        return self.classifier(self.pool(self.relu(self.features(x))))


class TorchPoolHead(tnn.Module):
    """An adaptive pool module ``[N, C, 1, 1]`` and a functional flatten, against the port's ``[N, C]`` pool cell."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = tnn.Conv2d(3, 6, 3, padding=1)
        self.pool = tnn.AdaptiveAvgPool2d(1)
        self.fc = tnn.Linear(6, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.conv(x)), 1))


class MsPoolHead(mnn.Cell):
    def __init__(self, wrong_pool: bool = False) -> None:
        super().__init__()
        self.conv = mnn.Conv2d(3, 6, 3, pad_mode="pad", padding=1, has_bias=True)
        self.global_pool = MaxGlobalPooling() if wrong_pool else GlobalAvgPooling()
        self.fc = mnn.Dense(6, 3)

    def construct(self, x):
        return self.fc(self.global_pool(self.conv(x)))


class MaxGlobalPooling(mnn.Cell):
    """The wrong port of an average pool: the maximum."""

    def construct(self, x):
        return ops.amax(x, (2, 3))


__all__ = ["TorchNet", "MsNet", "TorchMlp", "MsMlp", "TorchDense", "MsDense", "TorchPoolHead", "MsPoolHead", "ms"]


# --- stochastic depth of a class of its own on both sides (as timm's and mindcv's DropPath) ------------------------
class TorchDropPath(tnn.Module):
    """Drops whole samples of a residual branch in training mode."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0:
            return x
        keep = (torch.rand(x.shape[0], 1) >= self.p).to(x.dtype)
        return x * keep / (1 - self.p)


class TorchResidual(tnn.Module):
    """fc -> relu -> drop path, added to its input -> fc."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = tnn.Linear(6, 6)
        self.drop_path = TorchDropPath(0.5)
        self.fc2 = tnn.Linear(6, 3)

    def forward(self, x):
        return self.fc2(x + self.drop_path(torch.relu(self.fc1(x))))


class MsDropPath(mnn.Cell):
    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def construct(self, x):
        if not self.training or self.p == 0:
            return x
        keep = (ops.rand((x.shape[0], 1)) >= self.p).astype(x.dtype)
        return x * keep / (1 - self.p)


class MsResidual(mnn.Cell):
    """The port; ``dropout_on``: a Dropout(0.5) before the head that PyTorch's model does not have."""

    def __init__(self, dropout_on: bool = False) -> None:
        super().__init__()
        self.fc1 = mnn.Dense(6, 6)
        self.relu = mnn.ReLU()
        self.drop_path = MsDropPath(0.5)
        self.drop = mnn.Dropout(p=0.5) if dropout_on else mnn.Identity()
        self.fc2 = mnn.Dense(6, 3)

    def construct(self, x):
        return self.fc2(self.drop(x + self.drop_path(self.relu(self.fc1(x)))))


# --- a head whose port dropped the bias (has_bias=False where PyTorch's Linear has one) ----------------------------
class TorchHead(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = tnn.Linear(6, 6)
        self.fc = tnn.Linear(6, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.fc1(x)))


class MsHead(mnn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = mnn.Dense(6, 6)
        self.relu = mnn.ReLU()
        self.fc = mnn.Dense(6, 3, has_bias=False)

    def construct(self, x):
        return self.fc(self.relu(self.fc1(x)))


# --- a patchify stem (kernel = stride, MindSpore's default pad_mode='same') and a strided 'same' max pool ----------
class TorchStem(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.patch = tnn.Conv2d(3, 4, 2, stride=2)
        self.maxpool = tnn.MaxPool2d(3, 2, padding=1)
        self.fc = tnn.Linear(4, 3)

    def forward(self, x):
        return self.fc(self.maxpool(self.patch(x)).mean((2, 3)))


class MsStem(mnn.Cell):
    """``pool_same``: the max pool left at pad_mode='same' (zeros after only, at even sizes)."""

    def __init__(self, pool_same: bool = False) -> None:
        super().__init__()
        self.patch = mnn.Conv2d(3, 4, 2, stride=2, has_bias=True)
        self.max_pool = mnn.MaxPool2d(3, 2, pad_mode="same") if pool_same else mnn.MaxPool2d(3, 2, pad_mode="pad",
                                                                                              padding=1)
        self.fc = mnn.Dense(4, 3)

    def construct(self, x):
        return self.fc(self.max_pool(self.patch(x)).mean((2, 3)))
