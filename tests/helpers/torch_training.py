"""The PyTorch side of the comparison tests: the migration example's LeNet-BN trained as the MindSpore scripts train
it (SGD, lr 0.1, momentum 0.9, the examples' synthetic batches), with a ``TorchLayerRecorder`` on chosen steps."""
from __future__ import annotations

import sys

import torch

from project import EXAMPLES
from lenet import synthetic_batches

sys.path.insert(0, str(EXAMPLES / "migration"))
from lenet_bn_torch import make_lenet_bn_torch  # noqa: E402

from msdebug_hooks.compare.torch import TorchLayerRecorder  # noqa: E402


def train_and_capture(directory, *, steps=(1, 2), num_steps=3, batch_size=16, model=None, record_parameters=False,
                      record_gradients=True, before=None):
    """Train ``model`` (default: LeNet-BN, seed 0) for ``num_steps`` steps, capturing ``steps`` into ``directory``.
    ``before(model)`` runs first (to save the initial weights or inject a difference). Returns ``directory``."""
    model = model or make_lenet_bn_torch(seed=0)
    if before is not None:
        before(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    recorder = TorchLayerRecorder(model, directory, steps=steps, record_parameters=record_parameters,
                                  record_gradients=record_gradients)
    model.train()
    for step, (x, y) in enumerate(synthetic_batches(num_steps, batch_size), start=1):
        optimizer.zero_grad()
        with recorder.step(step):
            loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y).long())
            loss.backward()
        optimizer.step()
    return directory
