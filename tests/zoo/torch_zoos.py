"""Import timm and torchvision on the CPU build of PyTorch 2.13.0.

The only torchvision release for torch 2.13.0 on PyPI (0.28.0) is a CUDA build: its compiled operator library
(``torchvision/_C.so``) links ``libtorch_cuda.so`` and does not load beside the CPU torch, and its import then fails
in ``_meta_registrations.py``, which registers fake kernels for ``torchvision::nms`` and ``torchvision::qnms``
unconditionally ("operator torchvision::nms does not exist"; every other registration there checks first that the
library loaded). Declaring those two operators' schemas (torchvision's own, from ``csrc/ops/nms.cpp``) before the
import lets torchvision's Python layers import. No zoo model calls a torchvision operator (detection ops only);
calling one raises "no kernel", never a wrong value.
"""
from __future__ import annotations

from types import ModuleType

_SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
            "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_library = None


def import_torch_zoos() -> tuple[ModuleType, ModuleType]:
    """``(timm, torchvision)``, importable on the CPU torch (see the module docstring)."""
    global _library
    import torch

    if _library is None and not hasattr(torch.ops.torchvision, "nms"):
        _library = torch.library.Library("torchvision", "DEF")
        for schema in _SCHEMAS:
            _library.define(schema)
    import timm
    import torchvision

    return timm, torchvision
