"""The zoo's architectures: a mindcv 0.3.0 model and the timm 1.0.31 / torchvision 0.28.0 model closest to it,
built by their public constructors with random weights (no pretrained weights), ten classes, fixed seeds.

Each entry names the builder on both sides and the image size the pair runs at (the smallest the two accept: the
windowed attention and the position embeddings of the transformers are built for 224). The reference side of each
pair is the zoo whose source is closest to mindcv's (the reasons are in ``tests/zoo/differences.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: batch size of every zoo case
BATCH = 2
CLASSES = 10


@dataclass(frozen=True)
class ZooArch:
    name: str                 # the mindcv model name (create_model)
    family: str               # what the corpus covers with it
    zoo: str                  # "timm" or "torchvision"
    torch_name: str           # the reference's model name
    image: int = 64           # input height and width
    mindspore_kwargs: dict = field(default_factory=dict)
    torch_kwargs: dict = field(default_factory=dict)

    def build_mindspore(self) -> Any:
        import mindspore as ms
        from mindcv.models import create_model

        ms.set_seed(0)
        net = create_model(self.name, pretrained=False, num_classes=CLASSES, **self.mindspore_kwargs)
        net.set_train(True)
        return net

    def build_torch(self) -> Any:
        import torch

        from zoo.torch_zoos import import_torch_zoos

        timm, torchvision = import_torch_zoos()
        torch.manual_seed(0)
        if self.zoo == "timm":
            model = timm.create_model(self.torch_name, pretrained=False, num_classes=CLASSES, **self.torch_kwargs)
        else:
            model = torchvision.models.get_model(self.torch_name, weights=None, num_classes=CLASSES,
                                                 **self.torch_kwargs)
        return model.train()

    def batch(self, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """One deterministic batch: images in [-1, 1)-ish normal draws and integer labels."""
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((BATCH, 3, self.image, self.image)).astype(np.float32)
        return x, rng.integers(0, CLASSES, size=(BATCH,)).astype(np.int32)


ARCHITECTURES = (
    ZooArch("resnet18", "CNN, BatchNorm, basic residual blocks", "torchvision", "resnet18"),
    ZooArch("resnet50", "CNN, BatchNorm, bottleneck residual blocks", "torchvision", "resnet50"),
    ZooArch("vgg11", "plain CNN, dropout head", "torchvision", "vgg11", image=224),
    ZooArch("densenet121", "dense blocks (concatenation)", "torchvision", "densenet121"),
    ZooArch("mobilenet_v2_100", "depthwise separable, inverted residuals, ReLU6", "torchvision", "mobilenet_v2"),
    ZooArch("mobilenet_v3_small_100", "depthwise, squeeze-excitation, hard-swish", "torchvision",
            "mobilenet_v3_small"),
    ZooArch("shufflenet_v2_x0_5", "grouped channels, channel shuffle", "torchvision", "shufflenet_v2_x0_5"),
    ZooArch("efficientnet_b0", "MBConv, SiLU, squeeze-excitation, stochastic depth", "torchvision",
            "efficientnet_b0"),
    # torchvision's regnet_x_400mf is not mindcv's: mindcv rounds the last stage's width half to even (392 / 16 =
    # 24.5 -> 24 groups, 384 channels; mindcv regnet.py:435), torchvision half up (400). timm's regnetx_002 and
    # mindcv's regnet_x_200mf agree in every width.
    ZooArch("regnet_x_200mf", "RegNet grouped bottlenecks", "timm", "regnetx_002"),
    ZooArch("convnext_tiny", "ConvNeXt: 7x7 depthwise, LayerNorm, GELU, layer scale", "timm", "convnext_tiny"),
    ZooArch("vit_b_32_224", "ViT: patch embedding, class token, attention", "timm", "vit_base_patch32_224",
            image=224),
    ZooArch("swin_tiny", "Swin: shifted-window attention, relative position bias", "timm",
            "swin_tiny_patch4_window7_224", image=224),
)
ARCHITECTURES_BY_NAME = {arch.name: arch for arch in ARCHITECTURES}
