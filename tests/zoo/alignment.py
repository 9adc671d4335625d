"""Aligners: each sets one real difference between a mindcv model and its reference equal, on the built models, by
layer type (never by a layer's name), and a finder that lists the MindSpore layers the difference sits in.

The "aligned" variant of a port applies every aligner of its architecture; the "published" variant applies none;
the single-difference variants apply all but one. Which differences an architecture has, and where each is written
in the two zoos' sources, is in :mod:`zoo.differences`.
"""
from __future__ import annotations

import types
from typing import Any

from zoo import edits


def _kernel(cell: Any) -> int:
    size = cell.kernel_size
    return max(size) if isinstance(size, (tuple, list)) else int(size)


def _stride(cell: Any) -> int:
    stride = cell.stride
    return max(stride) if isinstance(stride, (tuple, list)) else int(stride)


# --- finders: the MindSpore layers a difference sits in -------------------------------------------------------------
def same_padded_pools(net: Any) -> list:
    """MaxPool2d with ``pad_mode='same'``: pads only bottom/right (TensorFlow's rule) where PyTorch pads each side."""
    from mindspore import nn

    return edits.of_type(net, nn.MaxPool2d, lambda c: str(c.pad_mode).lower() == "same" and _stride(c) > 1)


def same_padded_strided_convs(net: Any) -> list:
    """Conv2d with ``pad_mode='same'``, stride > 1 and a kernel > 1 (their windows shift against symmetric padding)."""
    from mindspore import nn

    return edits.of_type(net, nn.Conv2d, lambda c: str(c.pad_mode).lower() == "same" and _stride(c) > 1
                         and _kernel(c) > 1)


def batchnorms(net: Any) -> list:
    from mindspore import nn

    return edits.of_type(net, nn.BatchNorm2d)


def layernorms_with(net: Any, epsilon: float) -> list:
    from mindspore import nn

    return edits.of_type(net, nn.LayerNorm, lambda c: abs(c.epsilon - epsilon) <= 1e-3 * epsilon)


def gelus(net: Any) -> list:
    from mindspore import nn

    return edits.of_type(net, nn.GELU)


def convs(net: Any) -> list:
    from mindspore import nn

    return edits.of_type(net, nn.Conv2d)


def dense_without_bias(net: Any) -> list:
    from mindspore import nn

    return edits.of_type(net, nn.Dense, lambda c: not c.has_bias)


def drop_paths(net: Any) -> list:
    """mindcv's DropPath cells with a rate above 0."""
    from mindcv.models.layers.drop_path import DropPath

    return edits.of_type(net, DropPath, lambda c: c.keep_prob < 1.0)


def shuffle_blocks(net: Any) -> list:
    from mindcv.models.shufflenetv2 import ShuffleV2Block

    return edits.of_type(net, ShuffleV2Block)


# --- aligners: set the difference equal ----------------------------------------------------------------------------
def pad_pools_symmetrically(net: Any, model: Any) -> None:
    """Every same-padded MaxPool2d becomes ``pad_mode='pad', padding=(k-1)//2`` (PyTorch's ``padding``)."""
    from mindspore import nn

    for name in same_padded_pools(net):
        old = edits.cell(net, name)
        kernel, stride = _kernel(old), _stride(old)
        edits.replace(net, name, nn.MaxPool2d(kernel, stride, pad_mode="pad", padding=(kernel - 1) // 2))


def pad_strided_convs_symmetrically(net: Any, model: Any) -> None:
    """Every same-padded strided Conv2d becomes ``pad_mode='pad', padding=(k-1)//2``."""
    for name in same_padded_strided_convs(net):
        edits.set_conv_padding(net, name, "pad", (_kernel(edits.cell(net, name)) - 1) // 2)


def batchnorm_like_reference(eps: float = None, torch_momentum: float = None):
    """Every MindSpore BatchNorm2d gets ``eps`` and/or PyTorch's ``momentum`` (MindSpore's argument: 1 - it)."""
    def align(net: Any, model: Any) -> None:
        for name in batchnorms(net):
            edits.set_batchnorm(net, name, eps=eps,
                                momentum=None if torch_momentum is None else 1.0 - torch_momentum)
    return align


def layernorm_epsilon(published: float, reference: float):
    """Every MindSpore LayerNorm whose epsilon is ``published`` gets ``reference``."""
    def align(net: Any, model: Any) -> None:
        for name in layernorms_with(net, published):
            edits.set_layernorm(net, name, reference)
    return align


def exact_gelu(net: Any, model: Any) -> None:
    """Every MindSpore GELU computes the exact (erf) form, PyTorch's default."""
    for name in gelus(net):
        edits.set_gelu(net, name, approximate=False)


def torch_convs_without_bias(net: Any, model: Any) -> None:
    """The reference's Conv2d biases are dropped (the port has none)."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d) and module.bias is not None:
            module.register_parameter("bias", None)


def torch_linear_without_bias(net: Any, model: Any) -> None:
    """The reference's Linear layers lose their bias where the port's Dense has none (paired by output size)."""
    import torch

    sizes = {edits.cell(net, name).out_channels for name in dense_without_bias(net)}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.bias is not None and module.out_features in sizes:
            module.register_parameter("bias", None)


def _torchvision_shuffle_construct(self, x):
    """torchvision's block order: split in halves (stride 1), branch, concatenate, then shuffle two groups."""
    from mindspore import ops

    if self.stride == 1:
        half = x.shape[1] // 2
        out = ops.concat((x[:, :half], self.branch_main(x[:, half:])), axis=1)
    else:
        out = ops.concat((self.branch_proj(x), self.branch_main(x)), axis=1)
    batch, channels, height, width = out.shape
    out = ops.reshape(out, (batch, 2, channels // 2, height, width))
    out = ops.transpose(out, (0, 2, 1, 3, 4))
    return ops.reshape(out, (batch, channels, height, width))


def shuffle_like_torchvision(net: Any, model: Any) -> None:
    """Every ShuffleV2Block computes in torchvision's order (its own layers and weights unchanged)."""
    for name in shuffle_blocks(net):
        block = edits.cell(net, name)
        object.__setattr__(block, "construct", types.MethodType(_torchvision_shuffle_construct, block))
