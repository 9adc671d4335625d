"""A LeNet training that ends badly after a given step, written as a user writes it: no msdebug import. The tests of
how a training ended (tests/server/test_training_ends.py) start it under every launcher.

Usage: ending_train.py --style {model,functional,jit,graph} --end {raise,sigint,sigterm,sigkill,none} --at N
[--steps S] [--exit CODE]

* ``model``: ``Model.train`` with a callback of the script's own; ``functional``: the tutorial's ``value_and_grad``
  loop in PyNative mode; ``jit``: the same ``train_step`` under ``@mindspore.jit``; ``graph``: the ``@jit`` loop with
  ``set_context(mode=GRAPH_MODE)``.
* after step ``--at`` (1-based) the script raises ``RuntimeError`` (``raise``), or gets the signal as if it came
  from outside (``os.kill`` of its own pid: Ctrl-C, ``kill``, ``kill -9``); ``none`` trains to the end.
* ``--exit CODE``: after training, ``sys.exit(CODE)`` (a script that reports its own failure by its exit status).

Prints ``step N`` after every step and ``done`` at its end, flushed.
"""
import argparse
import os
import signal
import sys

import mindspore
from mindspore import nn
from mindspore.train import Callback, Model

from lenet import make_dataset, make_lenet

SIGNALS = {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM, "sigkill": signal.SIGKILL}


def end_badly(how: str, step: int, at: int) -> None:
    print(f"step {step}", flush=True)
    if step != at or how == "none":
        return
    if how == "raise":
        raise RuntimeError(f"the data of step {step + 1} is corrupt")
    os.kill(os.getpid(), SIGNALS[how])


class EndBadly(Callback):
    def __init__(self, how: str, at: int):
        super().__init__()
        self.how, self.at = how, at

    def on_train_step_end(self, run_context):
        end_badly(self.how, run_context.original_args().cur_step_num, self.at)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--style", choices=("model", "functional", "jit", "graph"), required=True)
    parser.add_argument("--end", choices=("raise", "sigint", "sigterm", "sigkill", "none"), required=True)
    parser.add_argument("--at", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--exit", type=int, default=0)
    args = parser.parse_args()

    if args.style == "graph":
        mindspore.set_context(mode=mindspore.GRAPH_MODE)
    mindspore.set_seed(1)
    dataset = make_dataset(args.steps, batch_size=8)
    model = make_lenet()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(model.trainable_params(), learning_rate=0.01, momentum=0.9)

    if args.style == "model":
        Model(model, loss_fn, optimizer).train(1, dataset, callbacks=[EndBadly(args.end, args.at)],
                                               dataset_sink_mode=False)
    else:
        def forward_fn(data, label):
            return loss_fn(model(data), label)

        grad_fn = mindspore.value_and_grad(forward_fn, None, optimizer.parameters)

        def train_step(data, label):
            loss, grads = grad_fn(data, label)
            optimizer(grads)
            return loss

        if args.style != "functional":
            train_step = mindspore.jit(train_step)
        model.set_train()
        for batch, (data, label) in enumerate(dataset.create_tuple_iterator()):
            train_step(data, label)
            end_badly(args.end, batch + 1, args.at)
    print("done", flush=True)
    return args.exit


if __name__ == "__main__":
    sys.exit(main())
