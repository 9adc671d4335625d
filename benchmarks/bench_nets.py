"""The networks the recorder and replay benchmarks train: the comparison corpus's ResNet-style CNN and transformer
encoder (``tests/corpus/``), each written in PyTorch and in MindSpore, on their deterministic batches.

A trainer holds one network, its optimizer (plain SGD) and a few batches made up front, and splits a step in two so
a recorder's step block can sit where users put it: :meth:`forward_backward` (loss and gradients; inside
``recorder.step(n)``) and :meth:`update` (the optimizer step). ``network`` is what a recorder attaches to.

* :class:`TorchTrainer`: ``F.cross_entropy``, ``loss.backward()``, ``optimizer.step()``.
* :class:`MindSporeTrainer` in PyNative: ``value_and_grad`` of the loss, then ``optimizer(grads)``.
* :class:`MindSporeTrainer` in GRAPH_MODE: one compiled ``TrainOneStepCell`` (forward, backward and update in one
  graph, as ``Model.train`` runs it); :meth:`update` does nothing.

Every step ends by reading the loss on the host, so the timed work has finished. Nothing here imports PyTorch or
MindSpore until a trainer is built.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NETS = ("cnn", "transformer")


def corpus_architecture(name: str) -> Any:
    """The corpus module of architecture ``name`` (``tests/corpus/``)."""
    if str(ROOT / "tests") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests"))
    from corpus.architectures import architecture

    return architecture(name)


class TorchTrainer:
    """A corpus network in PyTorch, trained with SGD."""

    def __init__(self, net: str, batch: int, seed: int = 0) -> None:
        import torch

        arch = corpus_architecture(net)
        self.network = arch.build_torch(seed=seed)
        self.network.train()
        self.optimizer = torch.optim.SGD(self.network.parameters(), lr=0.01)
        self.batches = [arch.torch_batch(x, y, torch.float32) for x, y in arch.make_batches(4, batch)]

    def forward_backward(self, index: int) -> Any:
        import torch.nn.functional as F

        x, y = self.batches[index % len(self.batches)]
        self.optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.network(x), y)
        loss.backward()
        return loss

    def update(self, loss: Any) -> float:
        self.optimizer.step()
        return float(loss.item())


class MindSporeTrainer:
    """A corpus network's MindSpore port, trained with SGD in the current execution mode (set it first)."""

    def __init__(self, net: str, batch: int) -> None:
        import mindspore as ms
        from mindspore import nn

        arch = corpus_architecture(net)
        from corpus.plants import PortPlants

        ms.set_seed(0)
        self.network = arch.build_mindspore(PortPlants({}))
        self.network.set_train(True)
        self.graph = ms.get_context("mode") == ms.GRAPH_MODE
        loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        self.optimizer = nn.SGD(self.network.trainable_params(), learning_rate=0.01)
        self.batches = [arch.mindspore_batch(x, y) for x, y in arch.make_batches(4, batch)]
        if self.graph:
            self.cell = nn.TrainOneStepCell(nn.WithLossCell(self.network, loss_fn), self.optimizer)
            self.cell.set_train()
        else:
            self.grad_fn = ms.value_and_grad(lambda x, y: loss_fn(self.network(x), y), None,
                                             self.optimizer.parameters)
        self.recorder: Any = None   # a LayerRecorder given the gradients of captured steps (PyNative)

    def forward_backward(self, index: int) -> Any:
        x, y = self.batches[index % len(self.batches)]
        if self.graph:
            return self.cell(x, y)
        loss, grads = self.grad_fn(x, y)
        if self.recorder is not None:
            self.recorder.record_gradients(grads, self.optimizer.parameters)   # a no-op when not capturing
        return loss, grads

    def update(self, result: Any) -> float:
        if self.graph:
            return float(result.asnumpy())
        loss, grads = result
        self.optimizer(grads)
        return float(loss.asnumpy())
