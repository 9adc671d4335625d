"""Small attention models for the split/fused pairing (tests/compare/test_port_fused.py): one side computes queries,
keys and values with one fused Linear / Dense (``qkv``, ``[3D, D]``), the other with three (``q``, ``k``, ``v``),
as timm's Swin and mindcv's do. Both directions: a PyTorch ``qkv`` against MindSpore ``q``, ``k``, ``v``, and a
MindSpore ``qkv`` against PyTorch ``q``, ``k``, ``v``. Imports both frameworks.
"""
from __future__ import annotations

from mindspore import nn as mnn
from mindspore import ops
from torch import nn as tnn

D = 8


class TorchFused(tnn.Module):
    """embed -> attention with one fused qkv Linear -> proj -> mean over tokens -> head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = tnn.Linear(4, D)
        self.qkv = tnn.Linear(D, 3 * D)
        self.proj = tnn.Linear(D, D)
        self.head = tnn.Linear(D, 3)

    def forward(self, x):
        x = self.embed(x)
        q, k, v = self.qkv(x).chunk(3, -1)
        return self.head(self.proj((q @ k.transpose(-2, -1) / D ** 0.5).softmax(-1) @ v).mean(1))


class TorchSplit(tnn.Module):
    """The same network with three Linear layers q, k, v."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = tnn.Linear(4, D)
        self.q, self.k, self.v = tnn.Linear(D, D), tnn.Linear(D, D), tnn.Linear(D, D)
        self.proj = tnn.Linear(D, D)
        self.head = tnn.Linear(D, 3)

    def forward(self, x):
        x = self.embed(x)
        q, k, v = self.q(x), self.k(x), self.v(x)
        return self.head(self.proj((q @ k.transpose(-2, -1) / D ** 0.5).softmax(-1) @ v).mean(1))


class CellSplit(mnn.Cell):
    """The port of ``TorchFused`` with three Dense layers q, k, v (as mindcv's Swin)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = mnn.Dense(4, D)
        self.q, self.k, self.v = mnn.Dense(D, D), mnn.Dense(D, D), mnn.Dense(D, D)
        self.proj = mnn.Dense(D, D)
        self.head = mnn.Dense(D, 3)
        self.softmax = ops.Softmax(-1)

    def construct(self, x):
        x = self.embed(x)
        q, k, v = self.q(x), self.k(x), self.v(x)
        return self.head(self.proj(ops.matmul(self.softmax(ops.matmul(q, k.swapaxes(-2, -1)) / D ** 0.5), v))
                         .mean(1))


class CellFused(mnn.Cell):
    """The port of ``TorchSplit`` with one fused Dense qkv."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = mnn.Dense(4, D)
        self.qkv = mnn.Dense(D, 3 * D)
        self.proj = mnn.Dense(D, D)
        self.head = mnn.Dense(D, 3)
        self.softmax = ops.Softmax(-1)

    def construct(self, x):
        x = self.embed(x)
        q, k, v = ops.split(self.qkv(x), D, -1)
        return self.head(self.proj(ops.matmul(self.softmax(ops.matmul(q, k.swapaxes(-2, -1)) / D ** 0.5), v))
                         .mean(1))


class CellDropTwice(mnn.Cell):
    """One random layer called twice (mindcv's Swin block and its ``drop_path``)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = mnn.Dense(D, D)
        self.drop = mnn.Dropout(p=0.5)

    def construct(self, x):
        x = x + self.drop(self.fc(x))
        return x + self.drop(self.fc(x))


class TorchDropTwice(tnn.Module):
    """Two random layers called once each (timm's ``drop_path1``, ``drop_path2``)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = tnn.Linear(D, D)
        self.drop1, self.drop2 = tnn.Dropout(0.5), tnn.Dropout(0.5)

    def forward(self, x):
        x = x + self.drop1(self.fc(x))
        return x + self.drop2(self.fc(x))
