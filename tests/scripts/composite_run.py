"""The port check on small composite-layer pairs (tests/compare/test_composite_layers.py), in one process.

Usage: ``composite_run.py OUT_DIR``. Each case builds a PyTorch reference and a MindSpore port by hand, runs
``compare_models`` with its defaults (one step) and writes an entry of ``OUT_DIR/results.json``: ``ok``, the marked
layer, its kind, the replay verdict, the settings found, the notes and the pairs' names (A, B, run of A).

* ``swish``: the port computes SiLU as a cell holding a ``Sigmoid`` child (``x * sigmoid(x)``), the reference
  ``nn.SiLU``; ``hard_swish``: the port's composite computes ``x * hsigmoid(x)`` instead (a real difference);
* ``bn_act``: the reference normalizes with a ``BatchNorm2d`` subclass that applies ``drop`` (Identity) and ``act``
  children in its forward; the port has ``BatchNorm2d`` then ``ReLU`` cells, inside ``CellList`` attributes (whose
  parameters MindSpore names without the attribute); ``bn_act_eps``: one port BatchNorm's eps is 1e-2;
  ``transposed``: one square 1x1 weight inside the ``CellList`` is loaded transposed; ``bn_leaky``: the port's
  activation after that BatchNorm is a ``LeakyReLU``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import mindspore as ms
import numpy as np
import torch
from mindspore import nn as msnn
from torch import nn

from msdebug_hooks.compare.port_check import compare_models
from msdebug_hooks.compare.port_weights import copy_into, pair_parameters, torch_state

OUT = Path(sys.argv[1])
ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
IMAGES = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
LABELS = np.array([1, 2])


class TorchSwishNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.act = nn.Conv2d(3, 4, 3), nn.SiLU()
        self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.act(self.conv(x))), 1))


class MsSwish(msnn.Cell):          # x * sigmoid(x) through a child cell, as mindcv's Swish
    def __init__(self) -> None:
        super().__init__()
        self.sigmoid = msnn.Sigmoid()

    def construct(self, x):
        return x * self.sigmoid(x)


class MsHardSwish(msnn.Cell):      # x * hsigmoid(x): a hard swish, not SiLU
    def __init__(self) -> None:
        super().__init__()
        self.gate = msnn.HSigmoid()

    def construct(self, x):
        return x * self.gate(x)


class MsSwishNet(msnn.Cell):
    def __init__(self, act=MsSwish) -> None:
        super().__init__()
        self.conv = msnn.Conv2d(3, 4, 3, pad_mode="valid", has_bias=True)
        self.act, self.fc = act(), msnn.Dense(4, 3)

    def construct(self, x):
        return self.fc(self.act(self.conv(x)).mean(axis=(2, 3)))


class BatchNormAct(nn.BatchNorm2d):   # normalize, then the children, in one forward (as timm's BatchNormAct2d)
    def __init__(self, channels: int, act: bool = True) -> None:
        super().__init__(channels)
        self.drop, self.act = nn.Identity(), nn.ReLU() if act else nn.Identity()

    def forward(self, x):
        return self.act(self.drop(super().forward(x)))


class TorchBnActNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 4, 3, padding=1, bias=False), BatchNormAct(4)
        self.conv2, self.bn2 = nn.Conv2d(4, 4, 1, bias=False), BatchNormAct(4, act=False)
        self.relu, self.fc = nn.ReLU(), nn.Linear(4, 3)

    def forward(self, x):
        x = self.bn1(self.conv1(x))
        return self.fc(self.relu(self.bn2(self.conv2(x)) + x).mean((2, 3)))


class MsBlock(msnn.Cell):
    def __init__(self, eps: float, act=msnn.ReLU) -> None:
        super().__init__()
        self.a = msnn.Conv2d(3, 4, 3, pad_mode="pad", padding=1)
        self.a_bn, self.a_af = msnn.BatchNorm2d(4, eps=eps, momentum=0.9), act()
        self.b, self.b_bn = msnn.Conv2d(4, 4, 1), msnn.BatchNorm2d(4, momentum=0.9)

    def construct(self, x):
        x = self.a_af(self.a_bn(self.a(x)))
        return self.b_bn(self.b(x)) + x


class MsBnActNet(msnn.Cell):
    def __init__(self, eps: float = 1e-5, act=msnn.ReLU) -> None:
        super().__init__()
        self.stages = msnn.CellList()      # filled after assignment, as mindcv's RegNet: "0.a.weight"
        self.stages.append(MsBlock(eps, act))
        self.af, self.fc = msnn.ReLU(), msnn.Dense(4, 3)

    def construct(self, x):
        for stage in self.stages:
            x = stage(x)
        return self.fc(self.af(x).mean(axis=(2, 3)))


def _transposed(net) -> None:
    param = next(p for path, p in net.parameters_and_names() if path == "stages.0.b.weight")
    param.set_data(ms.Tensor(param.asnumpy().transpose(1, 0, 2, 3).copy()))


CASES = {
    "swish": (TorchSwishNet, MsSwishNet, None),
    "hard_swish": (TorchSwishNet, lambda: MsSwishNet(MsHardSwish), None),
    "bn_act": (TorchBnActNet, MsBnActNet, None),
    "bn_act_eps": (TorchBnActNet, lambda: MsBnActNet(eps=1e-2), None),
    "transposed": (TorchBnActNet, MsBnActNet, _transposed),
    "bn_leaky": (TorchBnActNet, lambda: MsBnActNet(act=msnn.LeakyReLU), None),
}

results = {}
for name, (build_torch, build_ms, plant) in CASES.items():
    torch.manual_seed(0)
    model, net = build_torch(), build_ms()
    if plant is not None:   # the converter's mistake: the tool's own pairing, then the plant
        state = torch_state(model)
        copy_into(net, state, pair_parameters(state, net, None))
        plant(net)
    check = compare_models(model, net, IMAGES, LABELS, steps=1, copy_weights=plant is None)
    replay = check.layers.replay
    results[name] = {
        "ok": check.ok, "headline": check.headline(), "marked": check.marked, "kind": check.marked_kind,
        "replay": None if replay is None else replay.verdict,
        "settings": [[f.layer, f.setting] for f in check.conventions], "notes": check.layers.notes,
        "pairs": [[p.record_a.name, p.record_b.name, list(p.run_a)] for p in check.layers.pairs
                  if p.record_a.kind == "forward-output"],
        "unmatched": [[r.name for r in side] for side in (check.layers.unmatched_a, check.layers.unmatched_b)],
        "renamed": sorted(p.name for path, p in net.parameters_and_names() if p.name != path)}
    print(f"{name}: ok={check.ok} {check.headline()[:200]}", flush=True)
(OUT / "results.json").write_text(json.dumps(results, indent=1, default=str))
