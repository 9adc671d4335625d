"""Deterministic batches shared by the corpus's architectures: float features and integer class labels."""
from __future__ import annotations

import numpy as np


def labelled_batches(shape: tuple, classes: int, num_steps: int, batch_size: int, seed: int = 0) -> list:
    """``num_steps`` batches ``(x [batch_size, *shape] float32, y [batch_size] int32)`` drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((batch_size,) + tuple(shape)).astype(np.float32),
             rng.integers(0, classes, size=(batch_size,)).astype(np.int32)) for _ in range(num_steps)]


def torch_batch(x: np.ndarray, y: np.ndarray, dtype):
    """Float features in ``dtype``, labels as int64 (what PyTorch's losses take)."""
    import torch
    return torch.from_numpy(x).to(dtype), torch.from_numpy(y).long()


def mindspore_batch(x: np.ndarray, y: np.ndarray):
    import mindspore as ms
    return ms.Tensor(x), ms.Tensor(y)
