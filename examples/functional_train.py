"""A training loop written the way MindSpore 2.x's tutorials write it, with no msdebug import anywhere.

``mindspore.value_and_grad`` over a forward function, a ``train_step`` that applies the optimizer, ``@mindspore.jit``
on it, and a loop over ``dataset.create_tuple_iterator()``. One batch is poisoned (``--nan-step``, 1-based: the
tutorial's ``batch`` index ``nan_step - 1``): its loss is Inf and its update turns the weights into NaN, the way a
real divergence looks. The debugger reaches the loop unmodified::

    msdebug debug -c "watch weight_overflow; continue" examples/functional_train.py --nan-step 5   # pauses at step 5
    msdebug debug -c "watch weight_overflow; continue" examples/functional_train.py --nan-step 5 --no-jit
    ENABLE_MS_DEBUGGER=1 MS_DEBUGGER_PORT=50051 python examples/functional_train.py  # `msdebug serve --port 50051`

Other shapes of the same loop: ``--grad`` (``mindspore.grad``; the step function returns no loss), and
``--train-one-step`` (a ``TrainOneStepCell`` called by hand). Without a debugger it trains and evaluates as usual.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import mindspore
from mindspore import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lenet import make_dataset, make_lenet  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12, help="batches per epoch")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--nan-step", type=int, default=None, help="1-based step whose batch is poisoned (epoch 1)")
    parser.add_argument("--no-jit", action="store_true", help="train_step without @mindspore.jit (PyNative)")
    parser.add_argument("--grad", action="store_true", help="mindspore.grad instead of value_and_grad")
    parser.add_argument("--train-one-step", action="store_true", help="a TrainOneStepCell called by hand")
    parser.add_argument("--log", default="", help="append 'step N loss L' per step and 'end' to this file")
    args = parser.parse_args()

    mindspore.set_seed(1)
    train_dataset = make_dataset(args.steps, nan_batches={args.nan_step - 1} if args.nan_step else None)
    test_dataset = make_dataset(2, seed=7)

    model = make_lenet()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = nn.SGD(model.trainable_params(), learning_rate=1e-2, momentum=0.9)

    def forward_fn(data, label):
        logits = model(data)
        loss = loss_fn(logits, label)
        return loss, logits

    if args.train_one_step:
        train_net = nn.TrainOneStepCell(nn.WithLossCell(model, loss_fn), optimizer)

        def train_step(data, label):
            return train_net(data, label)
    elif args.grad:
        grad_fn = mindspore.grad(forward_fn, None, optimizer.parameters, has_aux=True)

        def train_step(data, label):
            grads, _ = grad_fn(data, label)
            optimizer(grads)
    else:
        grad_fn = mindspore.value_and_grad(forward_fn, None, optimizer.parameters, has_aux=True)

        def train_step(data, label):
            (loss, _), grads = grad_fn(data, label)
            optimizer(grads)
            return loss

    if not args.no_jit and not args.train_one_step:
        train_step = mindspore.jit(train_step)      # what @mindspore.jit on the def does

    def log(line: str) -> None:
        if args.log:
            with open(args.log, "a") as out:
                out.write(line + "\n")

    def train_loop(epoch: int) -> None:
        model.set_train()
        for batch, (data, label) in enumerate(train_dataset.create_tuple_iterator()):
            loss = train_step(data, label)
            step = epoch * args.steps + batch + 1
            log(f"step {step} loss {'n/a' if loss is None else f'{float(loss.asnumpy()):.4f}'}")

    def test_loop() -> float:
        model.set_train(False)
        total, correct = 0, 0
        for data, label in test_dataset.create_tuple_iterator():
            pred = model(data).argmax(1)
            correct += int((pred == label).asnumpy().sum())
            total += len(data)
        return correct / total

    for epoch in range(args.epochs):
        train_loop(epoch)
        print(f"epoch {epoch + 1}: test accuracy {test_loop():.3f}", flush=True)
    log("end")
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
