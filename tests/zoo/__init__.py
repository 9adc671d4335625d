"""Ports nobody here wrote: MindSpore's model zoo (mindcv 0.3.0) against the same architectures in timm 1.0.31 and
torchvision 0.28.0, random weights, fixed seeds. No pretrained weights are fetched (this machine cannot)."""
