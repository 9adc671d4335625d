"""Every real difference between a mindcv 0.3.0 model and its timm 1.0.31 / torchvision 0.28.0 reference, found by
reading both sources (paths relative to site-packages, lines of those releases), with the aligner that sets it equal
and the finder of the MindSpore layers it sits in.

A difference is "real" when the two models compute different numbers or train differently from the same weights on
the same batch. What is only a layout (names, nesting, a fused qkv against three projections, the order parameters
are created in, a tensor kept NHWC against (B, L, C)) is listed in ``LAYOUTS``: the port check must pair and compare
through it, and it is no finding. Facts checked and found equal are in ``EQUAL`` so a reader need not re-read them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from zoo import alignment as al


@dataclass(frozen=True)
class Difference:
    key: str
    what: str
    mindspore: str                     # where mindcv writes it (file:line and the code's fact)
    reference: str                     # where the reference writes it
    layers: Callable[[Any], list]      # the MindSpore layers it sits in (on the published port)
    align: Callable[[Any, Any], None] = lambda net, model: None  # set it equal on the built models
    torch_kwargs: dict = field(default_factory=dict)             # or: set it equal by the reference's constructor


RESNET_POOL = Difference(
    "max_pool_padding", "stem max pool pads bottom/right only (TensorFlow 'same') where the reference pads 1 on each "
    "side: same output size, windows shifted by one pixel",
    "mindcv/models/resnet.py:201 nn.MaxPool2d(kernel_size=3, stride=2, pad_mode='same')",
    "torchvision/models/resnet.py:200 nn.MaxPool2d(kernel_size=3, stride=2, padding=1)",
    al.same_padded_pools, al.pad_pools_symmetrically)

DIFFERENCES = {
    "resnet18": (RESNET_POOL,),
    "resnet50": (RESNET_POOL,),
    "vgg11": (
        Difference("conv_bias", "convolutions built without a bias (MindSpore's Conv2d default has_bias=False); the "
                   "reference's convolutions have one",
                   "mindcv/models/vgg.py:62 nn.Conv2d(in_channels, v, kernel_size=3, pad_mode='pad', padding=1)",
                   "torchvision/models/vgg.py:81 nn.Conv2d(in_channels, v, kernel_size=3, padding=1) (bias=True)",
                   al.convs, al.torch_convs_without_bias),
    ),
    "densenet121": (),
    "mobilenet_v2_100": (),
    "mobilenet_v3_small_100": (
        Difference("batchnorm_eps", "BatchNorm eps 1e-5 (MindSpore's default) where the reference uses 1e-3",
                   "mindcv/models/mobilenetv3.py:72 nn.BatchNorm2d(mid_channels) (eps=1e-5)",
                   "torchvision/models/mobilenetv3.py:155 partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)",
                   al.batchnorms, al.batchnorm_like_reference(eps=1e-3)),
        Difference("batchnorm_momentum", "BatchNorm running statistics move by 0.1 of the batch (MindSpore's "
                   "momentum=0.9) where the reference moves them by 0.01",
                   "mindcv/models/mobilenetv3.py:72 nn.BatchNorm2d(mid_channels) (momentum=0.9)",
                   "torchvision/models/mobilenetv3.py:155 partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)",
                   al.batchnorms, al.batchnorm_like_reference(torch_momentum=0.01)),
        Difference("depthwise_padding", "strided depthwise convolutions pad 'same' (bottom/right only) where the "
                   "reference pads (k-1)//2 on each side",
                   "mindcv/models/mobilenetv3.py:78 nn.Conv2d(..., kernel_size, stride, pad_mode='same', ...)",
                   "torchvision/ops/misc.py:88 padding = (kernel_size - 1) // 2 * dilation",
                   al.same_padded_strided_convs, al.pad_strided_convs_symmetrically),
    ),
    "shufflenet_v2_x0_5": (
        Difference("max_pool_padding", RESNET_POOL.what,
                   "mindcv/models/shufflenetv2.py:156 nn.MaxPool2d(kernel_size=3, stride=2, pad_mode='same')",
                   "torchvision/models/shufflenetv2.py:130 nn.MaxPool2d(kernel_size=3, stride=2, padding=1)",
                   al.same_padded_pools, al.pad_pools_symmetrically),
        Difference("channel_shuffle", "the block shuffles its input (even channels to the identity branch, odd to "
                   "the main branch) and concatenates unshuffled (the Megvii original), where the reference splits "
                   "its input in halves and shuffles after concatenating: a different function of the same weights",
                   "mindcv/models/shufflenetv2.py:99-105 channel_shuffle(old_x) then ops.concat((x_proj, ...))",
                   "torchvision/models/shufflenetv2.py:94-99 x.chunk(2, dim=1) ... channel_shuffle(out, 2)",
                   al.shuffle_blocks, al.shuffle_like_torchvision),
        Difference("classifier_bias", "the classifier has no bias where the reference's fc has one",
                   "mindcv/models/shufflenetv2.py:178 nn.Dense(..., num_classes, has_bias=False)",
                   "torchvision/models/shufflenetv2.py:151 nn.Linear(output_channels, num_classes)",
                   al.dense_without_bias, al.torch_linear_without_bias),
    ),
    "efficientnet_b0": (
        Difference("strided_conv_padding", "the stem and the strided depthwise convolutions pad 'same' (MindSpore's "
                   "Conv2d default: bottom/right only) where the reference pads (k-1)//2 on each side",
                   "mindcv/models/efficientnet.py:380 nn.Conv2d(in_channels, ..., kernel_size=3, stride=2) and :179",
                   "torchvision/ops/misc.py:88 padding = (kernel_size - 1) // 2 * dilation",
                   al.same_padded_strided_convs, al.pad_strided_convs_symmetrically),
    ),
    "regnet_x_200mf": (),
    "convnext_tiny": (
        Difference("gelu_form", "GELU in the tanh form (MindSpore's nn.GELU default approximate=True) where the "
                   "reference uses the exact erf form",
                   "mindcv/models/convnext.py:130 self.act = nn.GELU()",
                   "timm/models/convnext.py:147 act_layer='gelu' (timm/layers/activations.py:145 F.gelu(input))",
                   al.gelus, al.exact_gelu),
    ),
    "vit_b_32_224": (
        Difference("layernorm_eps", "LayerNorm epsilon 1e-7 (MindSpore's default) where the reference uses 1e-6",
                   "mindcv/models/vit.py:195 norm_layer=nn.LayerNorm, built as norm_layer((dim,))",
                   "timm/models/vision_transformer.py:840 LayerNorm (timm/layers/norm.py:78 eps=1e-6)",
                   lambda net: al.layernorms_with(net, 1e-7), al.layernorm_epsilon(1e-7, 1e-6)),
        Difference("gelu_form", "GELU in the tanh form where the reference uses the exact erf form",
                   "mindcv/models/vit.py:194 act_layer=nn.GELU (approximate=True)",
                   "timm/models/vision_transformer.py:842 nn.GELU (approximate='none')",
                   al.gelus, al.exact_gelu),
    ),
    "swin_tiny": (
        Difference("gelu_form", "GELU in the tanh form where the reference uses the exact erf form",
                   "mindcv/models/swintransformer.py:280 act_layer=nn.GELU (approximate=True)",
                   "timm/models/swin_transformer.py:399 act_layer=nn.GELU (approximate='none')",
                   al.gelus, al.exact_gelu),
        Difference("patch_merging_eps", "the patch-merging LayerNorm is built without epsilon (1e-7) where the "
                   "reference's has 1e-5",
                   "mindcv/models/swintransformer.py:422 self.norm = norm_layer([dim * 4, ])",
                   "timm/models/swin_transformer.py:638 norm_layer(4 * dim), :624 nn.LayerNorm (eps=1e-5)",
                   lambda net: al.layernorms_with(net, 1e-7), al.layernorm_epsilon(1e-7, 1e-5)),
        Difference("drop_path_rate", "stochastic depth rising to 0.2 where the reference's default rises to 0.1",
                   "mindcv/models/swintransformer.py:708 drop_path_rate=0.2",
                   "timm/models/swin_transformer.py:819 drop_path_rate: float = 0.1",
                   al.drop_paths, torch_kwargs={"drop_path_rate": 0.2}),
    ),
}

#: layouts the port check must pair and compare through (no finding), by architecture
LAYOUTS = {
    "resnet18": "down_sample (mindcv) for downsample; classifier for fc; head pooling by GlobalAvgPooling",
    "vgg11": "torchvision's AdaptiveAvgPool2d((7, 7)) has no MindSpore counterpart: at 224x224 it is the identity "
             "(mindcv's Dense(512*7*7) accepts only 224x224)",
    "densenet121": "torchvision applies the last ReLU in forward() after `features` (densenet.py F.relu), mindcv "
                   "inside `features` (relu5): the two `features` containers return different tensors of an equal "
                   "network; pool0 is Pad(0)+MaxPool(valid) against MaxPool(padding=1): equal after a ReLU",
    "mobilenet_v2_100": "InvertedResidual.layers (flat) against InvertedResidual.conv (Conv2dNormActivation nests)",
    "efficientnet_b0": "mindcv's Swish cell (x * Sigmoid(x)) against nn.SiLU; mindcv's DropPath against "
                       "torchvision's StochasticDepth, the same rates (efficientnet.py:413 / torchvision :293)",
    "regnet_x_200mf": "stem/stages.N.blocks.M/head against stem/sN.bM (timm's ConvNormAct: conv, bn, act nested)",
    "convnext_tiny": "feature.N (stem, stages and downsamples interleaved) against stem/stages.N.downsample/blocks; "
                     "gamma_ against gamma; timm's GELU is timm.layers.activations.GELU, not torch.nn.GELU",
    "vit_b_32_224": "timm's attention runs F.scaled_dot_product_attention (fused), mindcv's two BatchMatMuls",
    "swin_tiny": "three Dense q, k, v against one fused qkv Linear; mindcv holds relative_bias.index (one-hot) and "
                 "attn_mask as Parameters (requires_grad=False) where timm has non-persistent buffers; timm keeps "
                 "NHWC between blocks, mindcv (B, L, C); mindcv's patch merging closes stage i (reduction created "
                 "before norm), timm's opens stage i+1 (norm first); mindcv's CellList names parameters without "
                 "the `layers.` prefix",
}

#: checked in both sources and found equal (so the aligned variant leaves them)
EQUAL = {
    "densenet121": "BatchNorm defaults, drop_rate 0, conv biases off, transition AvgPool2d(2, 2)",
    "mobilenet_v2_100": "explicit padding everywhere (pad_mode='pad'), BatchNorm defaults, Dropout(0.2), ReLU6",
    "regnet_x_200mf": "BatchNorm eps 1e-5 momentum 0.1 (mindcv regnet.py:91; timm regnet.py:168 nn.BatchNorm2d), "
                      "padding (k-1)//2 explicit (mindcv regnet.py:86; timm layers/padding.py:19 gives 1 for a 3x3 "
                      "and 0 for a 1x1 at stride 2), head avg pool + fc with bias",
    "efficientnet_b0": "BatchNorm defaults (width 1.0: mindcv efficientnet.py:315), SE squeeze channels "
                       "input_channels // 4, dropout 0.2 before the classifier",
    "convnext_tiny": "LayerNorm eps 1e-6, layer scale 1e-6, drop path 0 (timm's default drop_path_rate=0.)",
}
