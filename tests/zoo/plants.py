"""Bugs planted in the aligned MindSpore port after construction, the mistakes people make porting: a norm epsilon
left at another framework's default, an activation of the wrong type or form, a padding mode, dropout left on, and a
converter's weight mistakes (transposed, swapped, spatially flipped). Each names the MindSpore layer it is planted
in; the port check must name that layer, with the finding's kind (``layer`` for a computation, ``parameter`` for a
weight loaded wrong: checked with ``copy_weights=False``, ``update`` for BatchNorm momentum) and the replay's verdict
(``own``: the layer itself computes differently; none for an update finding).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from zoo import edits


@dataclass(frozen=True)
class Plant:
    key: str
    what: str
    layer: str                          # the MindSpore layer the check must name
    apply: Callable[[Any], None]        # plants it in the built (aligned) MindSpore port
    kind: str = "layer"                 # the finding's kind
    replay: Optional[str] = "own"       # the replay's verdict on that layer
    weights: bool = False               # a converter's mistake: loaded by the harness, checked with copy_weights=False


def bn_eps(layer: str, eps: float = 1e-3) -> Plant:
    return Plant("bn_eps", f"BatchNorm eps {eps:g} (Keras/TensorFlow's default) in {layer}", layer,
                 lambda net: edits.set_batchnorm(net, layer, eps=eps))


def bn_eps_default(layer: str) -> Plant:
    return Plant("bn_eps", f"BatchNorm eps left at MindSpore's 1e-5 in {layer} (the reference: 1e-3)", layer,
                 lambda net: edits.set_batchnorm(net, layer, eps=1e-5))


def bn_momentum(layer: str) -> Plant:
    return Plant("bn_momentum", f"BatchNorm momentum copied as 0.1 in {layer} (MindSpore's momentum is 1 - "
                 f"PyTorch's): the running statistics move by 0.9 of the batch", layer,
                 lambda net: edits.set_batchnorm(net, layer, momentum=0.1), kind="update", replay=None)


def ln_eps(layer: str, epsilon: float = 1e-3) -> Plant:
    return Plant("ln_eps", f"LayerNorm epsilon {epsilon:g} in {layer}", layer,
                 lambda net: edits.set_layernorm(net, layer, epsilon))


def activation(layer: str, make: Callable[[], Any], what: str) -> Plant:
    return Plant("activation", f"{what} in {layer}", layer, lambda net: edits.replace(net, layer, make()))


def leaky_relu(layer: str) -> Plant:
    from mindspore import nn

    return activation(layer, lambda: nn.LeakyReLU(0.2), "LeakyReLU (MindSpore's default alpha 0.2) for ReLU")


def gelu_tanh(layer: str) -> Plant:
    return Plant("gelu_form", f"tanh-approximated GELU (MindSpore's default) for the exact form in {layer}", layer,
                 lambda net: edits.set_gelu(net, layer, approximate=True))


def conv_same(layer: str) -> Plant:
    return Plant("padding", f"strided convolution {layer} left at MindSpore's pad_mode='same' (bottom/right only) "
                 f"where the reference pads each side", layer,
                 lambda net: edits.set_conv_padding(net, layer, "same"))


def dropout_on(layer: str, p: float = 0.1) -> Plant:
    return Plant("dropout", f"dropout left on (p={p}) in {layer}; the reference's is off", layer,
                 lambda net: edits.set_dropout(net, layer, p))


def transposed(param: str, axes: tuple = (1, 0)) -> Plant:
    layer = param.rpartition(".")[0]
    return Plant("transposed", f"square weight {param} loaded transposed", layer,
                 lambda net: edits.edit_weight(net, param, lambda v: v.transpose(axes + tuple(range(2, v.ndim)))),
                 kind="parameter", weights=True)


def flipped(param: str) -> Plant:
    layer = param.rpartition(".")[0]
    return Plant("flipped", f"convolution kernel {param} loaded flipped in both spatial axes (a convolution "
                 f"converted as a correlation)", layer,
                 lambda net: edits.edit_weight(net, param, lambda v: v[..., ::-1, ::-1]), kind="parameter",
                 weights=True)


def swapped(first: str, second: str) -> Plant:
    layer = first.rpartition(".")[0]
    return Plant("swapped", f"weights {first} and {second} exchanged by the converter", layer,
                 lambda net: edits.swap_weights(net, first, second), kind="parameter", weights=True)


def plants_for(arch: str) -> tuple:
    """The planted bugs of one architecture (MindSpore layer names of the aligned port)."""
    from mindspore import nn

    table = {
        "resnet18": (bn_eps("layer1.0.bn2"), leaky_relu("relu"), conv_same("layer2.0.conv1"),
                     flipped("layer1.0.conv1.weight"), swapped("layer1.1.conv1.weight", "layer1.1.conv2.weight"),
                     bn_momentum("bn1")),
        "resnet50": (bn_eps("layer2.0.bn2"), conv_same("layer3.0.conv2"),
                     transposed("layer1.0.conv1.weight")),
        "vgg11": (flipped("features.3.weight"),),
        "densenet121": (bn_eps("features.denseblock1.cell_list.0.norm2"), leaky_relu("features.relu0"),
                        flipped("features.denseblock1.cell_list.1.conv2.weight")),
        "mobilenet_v2_100": (conv_same("features.4.layers.3"), bn_eps("features.5.layers.4"),
                             activation("features.2", nn.HSwish, "HSwish for ReLU6"),
                             swapped("features.5.layers.0.weight", "features.6.layers.0.weight")),
        "mobilenet_v3_small_100": (bn_eps_default("features.4.layers.4"), conv_same("features.0"),
                                   activation("features.3.layers.3.gate", nn.Sigmoid, "Sigmoid for the SE gate's "
                                              "hard sigmoid"),
                                   flipped("features.5.layers.3.weight")),
        "shufflenet_v2_x0_5": (bn_eps("features.2.branch_main.4"), conv_same("first_conv.0"),
                               leaky_relu("features.1.branch_main.2"),
                               swapped("features.1.branch_main.0.weight", "features.1.branch_main.5.weight")),
        "efficientnet_b0": (activation("features.2", nn.HSwish, "HSwish for Swish (SiLU)"),
                            bn_eps("features.4.0.block.4"), flipped("features.4.0.block.3.weight")),
        "regnet_x_200mf": (bn_eps("stages.1.blocks.0.f.b_bn"), conv_same("stem.conv"), leaky_relu("stem.af"),
                           transposed("stages.0.blocks.0.f.c.weight")),
        "convnext_tiny": (gelu_tanh("feature.1.1.act"), ln_eps("feature.3.0.norm"),
                          activation("feature.3.1.act", nn.ReLU, "ReLU for GELU"),
                          flipped("feature.1.0.dwconv.weight"),
                          swapped("feature.1.0.pwconv1.weight", "feature.1.1.pwconv1.weight")),
        "vit_b_32_224": (gelu_tanh("blocks.2.mlp.act"), ln_eps("blocks.1.norm2"),
                         activation("blocks.3.mlp.act", nn.ReLU, "ReLU for GELU"),
                         dropout_on("pos_drop"), transposed("blocks.1.attn.proj.weight"),
                         swapped("blocks.0.mlp.fc1.weight", "blocks.1.mlp.fc1.weight")),
        "swin_tiny": (gelu_tanh("layers.0.blocks.0.mlp.act"), ln_eps("layers.1.blocks.0.norm1"),
                      dropout_on("layers.0.blocks.0.attn.attn_drop"),
                      transposed("layers.0.blocks.0.attn.proj.weight"),
                      swapped("layers.0.blocks.0.attn.q.weight", "layers.0.blocks.0.attn.k.weight")),
    }
    return table[arch]
