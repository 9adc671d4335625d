"""Weights paired by module structure on real model zoos and on small planted ports, in one process.

Usage: ``port_pairing_run.py OUT_DIR``. Zoo pairs (mindcv 0.3.0 against timm 1.0.31 / torchvision 0.28.0, random
weights, ``num_classes=10``): ``pair_parameters`` then ``copy_into`` with random BatchNorm statistics, and the logits
of both in eval mode on one batch. The input side is chosen so that MindSpore's ``pad_mode='same'`` layers
(mindcv's max pool, ConvNeXt-style stems) pad as PyTorch's explicit padding does; the architectures are otherwise
the same. ShuffleNet v2 differs by architecture (mindcv shuffles channels at the start of a block, torchvision at
the end), so only its module map is kept. Small ports: a layer scale ``[C]`` against ``[C, 1, 1]`` (also run
through ``compare_models``: one training step must read clean, the ``[C]`` parameter compared as ``[C, 1, 1]``),
and ports missing or changing one layer (the error). Results go to ``OUT_DIR/results.json`` for
tests/compare/test_port_pairing.py.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import mindspore as ms
import numpy as np
import torch
from mindcv.models import create_model
from mindspore import nn as mnn
from torch import nn as tnn

from msdebug_hooks.compare.port_check import compare_models
from msdebug_hooks.compare.port_weights import copy_into, pair_parameters, torch_state
from msdebug_hooks.errors import ConfigError
from zoo.torch_zoos import import_torch_zoos

#: mindcv name -> (library, PyTorch name, image side)
ZOO = {"resnet18": ("timm", "resnet18", 65), "mobilenet_v3_small_100": ("timm", "mobilenetv3_small_100", 65),
       "regnet_x_200mf": ("timm", "regnetx_002", 64), "mobilenet_v2_100": ("torchvision", "mobilenet_v2", 65),
       "shufflenet_v2_x0_5": ("torchvision", "shufflenet_v2_x0_5", None)}


def logits_error(cell, module, side: int) -> float:
    module.eval()
    cell.set_train(False)
    x = np.random.default_rng(0).standard_normal((2, 3, side, side)).astype(np.float32)
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    got = cell(ms.Tensor(x)).asnumpy()
    return float(np.abs(got - expected).max() / np.abs(expected).max())


def randomize_statistics(module) -> None:
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, buffer in module.named_buffers():
            if name.endswith("running_mean"):
                buffer.copy_(torch.randn(buffer.shape, generator=generator) * 0.1)
            elif name.endswith("running_var"):
                buffer.copy_(torch.rand(buffer.shape, generator=generator) + 0.5)


def zoo_case(name: str) -> dict:
    library, torch_name, side = ZOO[name]
    timm, torchvision = import_torch_zoos()
    cell = create_model(name, pretrained=False, num_classes=10)
    module = (timm.create_model(torch_name, pretrained=False, num_classes=10) if library == "timm"
              else getattr(torchvision.models, torch_name)(num_classes=10))
    randomize_statistics(module)
    state = torch_state(module)
    copy = pair_parameters(state, cell, torch_module=module)
    result = {"pairs": copy.pairs, "how": copy.how, "modules": copy.modules, "unit_axes": copy.unit_axes,
              "unpaired_torch": copy.unpaired_torch, "summary": copy.summary(),
              "parameters": len(list(cell.get_parameters()))}
    if side is not None:
        copy_into(cell, state, copy)
        result["logits_error"] = logits_error(cell, module, side)
    return result


class ScaleCell(mnn.Cell):
    """A block with a layer scale ``[C]`` (MindSpore side) and its BatchNorm inside a renamed container."""

    def __init__(self, extra: bool = False):
        super().__init__()
        self.scale = ms.Parameter(ms.Tensor(np.full(4, 0.5, np.float32)), name="scale")
        self.conv = mnn.Conv2d(3, 4, 3, pad_mode="pad", padding=1, has_bias=True)
        self.down_sample = mnn.SequentialCell(mnn.Conv2d(4, 4, 1, has_bias=False), mnn.BatchNorm2d(4))
        self.extra = mnn.Conv2d(4, 4, 1, has_bias=True) if extra else None
        self.head = mnn.Dense(4, 5)

    def construct(self, x):
        x = self.conv(x) * self.scale.reshape(1, 4, 1, 1)
        x = self.down_sample(x)
        if self.extra is not None:
            x = self.extra(x)
        return self.head(x.mean(axis=(2, 3)))


class ScaleModule(tnn.Module):
    """The reference: layer scale ``[C, 1, 1]``; ``other``: a 3x3 convolution where the port has a 1x1 one."""

    def __init__(self, other: bool = False):
        super().__init__()
        self.conv = tnn.Conv2d(3, 4, 3, padding=1)
        self.gamma = tnn.Parameter(torch.rand(4, 1, 1) + 0.5)
        self.downsample = tnn.Sequential(tnn.Conv2d(4, 4, 1, bias=False), tnn.BatchNorm2d(4))
        self.other = tnn.Conv2d(4, 4, 3, padding=1) if other else None
        self.fc = tnn.Linear(4, 5)

    def forward(self, x):
        x = self.downsample(self.conv(x) * self.gamma)
        return self.fc((self.other(x) if self.other is not None else x).mean(dim=(2, 3)))


class MaskedCell(mnn.Cell):
    """Constants the model builds itself held as non-trainable Parameters: a float mask and an integer index."""

    def __init__(self):
        super().__init__()
        self.conv = mnn.Conv2d(3, 4, 3, pad_mode="pad", padding=1, has_bias=True)
        self.mask = ms.Parameter(ms.Tensor(np.array([1, 0, 1, 1], np.float32)), name="mask", requires_grad=False)
        self.index = ms.Parameter(ms.Tensor(np.array([3, 2, 1, 0], np.int32)), name="index", requires_grad=False)
        self.norm = mnn.BatchNorm2d(4)
        self.head = mnn.Dense(4, 5)

    def construct(self, x):
        x = self.norm(self.conv(x)).mean(axis=(2, 3)) * self.mask
        return self.head(x[:, self.index])


class MaskedModule(tnn.Module):
    """The reference: the same constants as buffers that are not saved (not in the state dict)."""

    def __init__(self):
        super().__init__()
        self.conv = tnn.Conv2d(3, 4, 3, padding=1)
        self.register_buffer("mask", torch.tensor([1.0, 0.0, 1.0, 1.0]), persistent=False)
        self.register_buffer("index", torch.tensor([3, 2, 1, 0]), persistent=False)
        self.bn = tnn.BatchNorm2d(4)
        self.fc = tnn.Linear(4, 5)

    def forward(self, x):
        return self.fc((self.bn(self.conv(x)).mean(dim=(2, 3)) * self.mask)[:, self.index])


def copied_pair(module, cell):
    """``module``'s weights (BatchNorm statistics randomized) paired with ``cell``'s and copied in: the copy."""
    randomize_statistics(module)
    state = torch_state(module)
    copy = pair_parameters(state, cell, torch_module=module)
    copy_into(cell, state, copy)
    return copy


def constants_case() -> dict:
    torch.manual_seed(0)
    module, cell = MaskedModule(), MaskedCell()
    copy = copied_pair(module, cell)
    return {"pairs": copy.pairs, "constants": copy.constants, "summary": copy.summary(),
            "logits_error": logits_error(cell, module, 6)}


def swin_case() -> dict:
    """mindcv's swin_tiny against timm's: constants set aside, the fused qkv split into q, k, v."""
    timm, _ = import_torch_zoos()
    module = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, num_classes=10)
    try:
        copy = pair_parameters(torch_state(module), create_model("swin_tiny", pretrained=False, num_classes=10),
                               torch_module=module)
    except ConfigError as exc:
        return {"error": str(exc)}
    return {"error": None, "summary": copy.summary(), "constants": copy.constants, "pairs": len(copy.pairs),
            "fused": [[list(pair.mindspore), list(pair.torch), pair.axis] for pair in copy.fused],
            "unpaired_torch": copy.unpaired_torch}


def planted_cases() -> dict:
    torch.manual_seed(0)
    module, cell = ScaleModule(), ScaleCell()
    copy = copied_pair(module, cell)
    scale = {"pairs": copy.pairs, "how": copy.how, "unit_axes": copy.unit_axes, "summary": copy.summary(),
             "modules": copy.modules, "logits_error": logits_error(cell, module, 6)}
    torch.manual_seed(1)
    check = compare_models(ScaleModule(), ScaleCell(), np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(
        np.float32), np.array([1, 3]), steps=1)
    scale["port_check"] = {"ok": check.ok, "headline": check.headline()}
    errors = {}
    for case, reference in (("missing_layer", module), ("different_layer", ScaleModule(other=True))):
        try:
            pair_parameters(torch_state(reference), ScaleCell(extra=True), torch_module=reference)
            errors[case] = {"error": None}
        except ConfigError as exc:
            errors[case] = {"error": str(exc)}
    return {"layer_scale": scale, **errors}


def regnet_cases() -> dict:
    """mindcv's ``regnet_x_400mf`` against torchvision's: a real difference of architecture (mindcv rounds the last
    stage to 384 channels, torchvision to 400), refused with the shapes in the line; then against torchvision's
    RegNet built with mindcv's stage widths and depths, which must pair every tensor and give the same logits
    (mindcv's stages sit in a CellList whose parameter names do not follow the cell path)."""
    timm, torchvision = import_torch_zoos()
    from torchvision.models.regnet import BlockParams, RegNet

    cell = create_model("regnet_x_400mf", pretrained=False, num_classes=10)
    try:
        pair_parameters(torch_state(torchvision.models.regnet_x_400mf(num_classes=10)), cell,
                        torch_module=torchvision.models.regnet_x_400mf(num_classes=10))
        refused = {"error": None}
    except ConfigError as exc:
        refused = {"error": str(exc)}
    torch.manual_seed(0)
    module = RegNet(BlockParams(depths=[1, 2, 7, 12], widths=[32, 64, 160, 384], group_widths=[16] * 4,
                                bottleneck_multipliers=[1.0] * 4, strides=[2] * 4), num_classes=10)
    copy = copied_pair(module, cell)
    paths = {param.name: path for path, param in cell.parameters_and_names()}
    same = {"pairs": copy.pairs, "paths": paths, "modules": copy.modules, "summary": copy.summary(),
            "unpaired_torch": copy.unpaired_torch, "parameters": len(paths),
            "logits_error": logits_error(cell, module, 64)}
    return {"regnet_x_400mf_torchvision": refused, "regnet_x_400mf_same_widths": same}


def main() -> None:
    out = Path(sys.argv[1])
    ms.set_context(mode=ms.PYNATIVE_MODE)
    results = {name: zoo_case(name) for name in ZOO}
    results.update(planted_cases())
    results.update(regnet_cases())
    results.update(constants=constants_case(), swin_tiny=swin_case())
    (out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
