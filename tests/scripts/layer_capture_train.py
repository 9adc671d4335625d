"""Train the migration example's LeNet-BN port for a few steps from PyTorch weights and capture one step's layers.

``python layer_capture_train.py MODE WEIGHTS.pth OUT_DIR [STEPS] [CAPTURE_STEP]``: MODE is ``graph`` or
``pynative``. Writes three captures: ``OUT_DIR/model`` (``Model.train`` with the recorder as a callback, with
parameters), ``OUT_DIR/model_grads`` (``Model.train`` over ``TrainOneStepCell(return_grad=True)``) and
``OUT_DIR/loop`` (a custom loop passing ``value_and_grad``'s gradients to ``record_gradients``, with parameters).
Prints each capture's record count, and ``GRADIENT-WARNING`` if the recorder warned that it cannot record
gradients.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import mindspore as ms
from mindspore import nn
from mindspore.train import Model

from lenet import make_dataset, synthetic_batches
from lenet_bn_mindspore import make_lenet_bn
from msdebug_hooks.compare.mindspore_layers import LayerRecorder
from msdebug_hooks.compare.naming import convert_torch_state
from msdebug_hooks.compare.torch import load_state_dict

mode, weights, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 2
capture_step = int(sys.argv[5]) if len(sys.argv) > 5 else steps
ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
LEARNING_RATE = 0.1


def network():
    net = make_lenet_bn()
    state = convert_torch_state(load_state_dict(weights), [p.name for p in net.get_parameters()])
    ms.load_param_into_net(net, {n: ms.Parameter(ms.Tensor(v), name=n) for n, v in state.items()}, strict_load=True)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return net, loss_fn, nn.Momentum(net.trainable_params(), LEARNING_RATE, 0.9)


net, loss_fn, optimizer = network()
recorder = LayerRecorder(net, out / "model", steps=[capture_step], record_parameters=True)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    Model(net, loss_fn, optimizer).train(1, make_dataset(steps, 32), callbacks=[recorder])
if any("gradients are not recorded" in str(w.message) for w in caught):
    print("GRADIENT-WARNING")
print("model records", len(recorder.session.writer.records))

net, loss_fn, optimizer = network()  # Model.train over a train cell that returns its gradients: any mode
recorder = LayerRecorder(net, out / "model_grads", steps=[capture_step])
train_cell = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), optimizer, return_grad=True)
Model(train_cell).train(1, make_dataset(steps, 32), callbacks=[recorder])
print("model_grads records", len(recorder.session.writer.records))

net, loss_fn, optimizer = network()
recorder = LayerRecorder(net, out / "loop", steps=[capture_step], record_parameters=True)


def forward(x, y):
    return loss_fn(net(x), y)


grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)


def train_step(x, y):
    loss, grads = grad_fn(x, y)
    optimizer(grads)
    return loss, grads


if mode == "graph":
    train_step = ms.jit(train_step)
net.set_train()
for step, (x, y) in enumerate(synthetic_batches(steps, 32), start=1):
    with recorder.step(step):
        loss, grads = train_step(ms.Tensor(x), ms.Tensor(y))
        recorder.record_gradients(grads)
print("loop records", len(recorder.session.writer.records))
