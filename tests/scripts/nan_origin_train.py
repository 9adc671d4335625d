"""A small training written the way MindSpore's tutorials write it, with one planted NaN/Inf source.

No msdebug import: ``msdebug first-nan`` must find the origin from outside. The network's first cell computes one
operation that is harmless on ordinary batches; batch ``--bad-step`` (1-based) carries the value that breaks it:

* ``log``: ``ops.log(x + 1)`` of a batch holding -1 (log of 0: -inf);
* ``sqrt``: ``ops.sqrt(x + 1)`` of a batch holding -3 (sqrt of a negative: NaN);
* ``div``: ``x / (x[:, :1] + 1)`` of a batch whose first column holds -1 (a zero denominator);
* ``exp``: ``ops.exp(x)`` of a batch holding 100 (above 88.7: inf in float32);
* ``scale``: ``ops.sqrt(x)`` under a static loss scale of 2**100 (``StaticLossScaler`` in the functional loops, the
  optimizer's ``loss_scale`` with ``FixedLossScaleManager(drop_overflow_update=False)`` or ``TrainOneStepCell``'s
  ``sens`` otherwise) and a batch holding 1e-30: the forward pass and the loss stay finite, sqrt's gradient
  1 / (2 sqrt(x)) times the scaled gradient overflows float32 in the backward pass (it would not without the scale);
* ``data``: the batch itself holds a NaN;
* ``none``: nothing planted (a clean training).

Loops (``--loop``): ``functional`` (``value_and_grad`` + optimizer in a ``train_step``), ``jit`` (the same under
``@mindspore.jit``), ``onestep`` (a ``TrainOneStepCell`` called by hand), ``model`` (``Model.train``); ``--mode``
``pynative`` (default) or ``graph``.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import mindspore
from mindspore import nn, ops

SCALE = 2.0 ** 100


class Planted(nn.Cell):
    """The first layer: one operation that may produce NaN/Inf (behind a trained gain in the loss-scale case, so
    that its backward pass runs)."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source
        self.gain = mindspore.Parameter(mindspore.Tensor(np.ones(8, np.float32)), name="gain")

    def construct(self, x):
        if self.source == "scale":
            return ops.sqrt(x * self.gain)      # finite forward; its backward 1 / (2 sqrt(x)) is huge at a tiny x
        if self.source == "log":
            return ops.log(x + 1.0)
        if self.source == "sqrt":
            return ops.sqrt(x + 1.0)
        if self.source == "div":
            return x / (x[:, :1] + 1.0)
        if self.source == "exp":
            return ops.exp(x)
        return x * 1.0


class Net(nn.Cell):
    """Planted -> Dense -> Tanh -> Dense."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.planted = Planted(source)
        self.fc1 = nn.Dense(8, 16)
        self.act = nn.Tanh()
        self.fc2 = nn.Dense(16, 4)

    def construct(self, x):
        return self.fc2(self.act(self.fc1(self.planted(x)))).astype(mindspore.float32)


def batches(steps: int, source: str, bad_step: int):
    rng = np.random.default_rng(0)
    for step in range(1, steps + 1):
        x = rng.uniform(0.0, 1.0, (4, 8)).astype(np.float32)
        y = rng.integers(0, 4, (4,)).astype(np.int32)
        if step == bad_step:
            if source == "log":
                x[1, 2] = -1.0
            elif source == "sqrt":
                x[1, 2] = -3.0
            elif source == "div":
                x[2, 0] = -1.0
            elif source == "exp":
                x[1, 2] = 100.0
            elif source == "scale":
                x[1, 2] = 1e-30
            elif source == "data":
                x[3, 5] = np.nan
        yield x, y


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", default="log", choices=["log", "sqrt", "div", "exp", "scale", "data", "none"])
    parser.add_argument("--loop", default="functional", choices=["functional", "jit", "onestep", "model"])
    parser.add_argument("--mode", default="pynative", choices=["pynative", "graph"])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--bad-step", type=int, default=3)
    args = parser.parse_args()

    mindspore.set_context(mode=mindspore.GRAPH_MODE if args.mode == "graph" else mindspore.PYNATIVE_MODE)
    mindspore.set_seed(1)
    dataset = mindspore.dataset.GeneratorDataset(lambda: batches(args.steps, args.source, args.bad_step),
                                                 column_names=["data", "label"], shuffle=False)
    net = Net(args.source)
    loss_fn = nn.CrossEntropyLoss()
    # the loss scale: by hand in the functional loops, the optimizer's loss_scale (and the cell's sens) otherwise
    scaled = args.source == "scale" and args.loop in ("model", "onestep")
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.05, loss_scale=SCALE if scaled else 1.0)

    if args.loop == "model":
        from mindspore.train import FixedLossScaleManager, LossMonitor, Model

        manager = FixedLossScaleManager(SCALE, drop_overflow_update=False) if scaled else None
        model = Model(net, loss_fn, optimizer, loss_scale_manager=manager)
        model.train(1, dataset, callbacks=[LossMonitor()], dataset_sink_mode=False)
        return 0

    if args.loop == "onestep":
        train_net = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), optimizer, sens=SCALE if scaled else 1.0)
        for data, label in dataset.create_tuple_iterator():
            loss = train_net(data, label)
            print("loss", loss)
        return 0

    loss_scaler = mindspore.amp.StaticLossScaler(SCALE) if args.source == "scale" else None

    def forward_fn(data, label):
        logits = net(data)
        loss = loss_fn(logits, label)
        if loss_scaler is not None:
            loss = loss_scaler.scale(loss)
        return loss, logits

    grad_fn = mindspore.value_and_grad(forward_fn, None, optimizer.parameters, has_aux=True)

    def train_step(data, label):
        (loss, _), grads = grad_fn(data, label)
        if loss_scaler is not None:
            loss = loss_scaler.unscale(loss)
            grads = loss_scaler.unscale(grads)
        optimizer(grads)
        return loss

    if args.loop == "jit":
        train_step = mindspore.jit(train_step)

    net.set_train()
    for step, (data, label) in enumerate(dataset.create_tuple_iterator(), start=1):
        loss = train_step(data, label)
        print(f"step {step} loss {loss}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
