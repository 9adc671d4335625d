"""An ordinary LeNet training script: no msdebug import anywhere. The debugger tests start it with only the
``ENABLE_MS_DEBUGGER`` / ``MS_DEBUGGER_*`` variables (or ``msdebug run``) and watch what it does.

Options shape the network the way real scripts do: a wider fc1 (a weight over 4 MiB), a frozen layer
(``requires_grad=False``, left out of the optimizer), a layer in a zero-learning-rate parameter group, a poisoned
batch, GRAPH_MODE. A user callback logs every step and, at the end of training, saves the weights; the tests read both.
"""
import argparse
import time

import numpy as np
from mindspore import nn
from mindspore.train import Callback, Model

from lenet import make_dataset, make_lenet


class StepLog(Callback):
    """Appends ``step N`` after every step and ``end`` (plus a weights file) when training ends."""

    def __init__(self, log_path, weights_path):
        super().__init__()
        self.log_path, self.weights_path = log_path, weights_path

    def _write(self, line):
        if self.log_path:
            with open(self.log_path, "a") as log:
                log.write(line + "\n")

    def on_train_step_end(self, run_context):
        self._write(f"step {run_context.original_args().cur_step_num}")

    def on_train_end(self, run_context):
        network = run_context.original_args().network
        if self.weights_path:
            np.savez(self.weights_path, **{p.name: p.asnumpy() for p in network.get_parameters()})
        self._write("end")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--width", type=int, default=120, help="fc1 width (2700 makes fc1.weight 4.3 MB)")
    parser.add_argument("--frozen", nargs="*", default=[], help="layers not trained (requires_grad=False)")
    parser.add_argument("--zero-lr", nargs="*", default=[], help="layers in a parameter group with lr 0")
    parser.add_argument("--nan-batch", type=int, default=None, help="0-based batch with a NaN/Inf input")
    parser.add_argument("--graph-mode", action="store_true", help="GRAPH_MODE instead of MindSpore's default PyNative")
    parser.add_argument("--trainings", type=int, default=1, help="Model.train calls, one after the other")
    parser.add_argument("--nan-training", type=int, default=None, help="1-based training with the NaN/Inf batch "
                        "(default: every one)")
    parser.add_argument("--retrain-small", action="store_true", help="trainings after the first train another "
                        "network (one Dense layer named head): other node names")
    parser.add_argument("--pause-between", type=float, default=0.0, help="seconds between trainings (an evaluation)")
    parser.add_argument("--log", default="")
    parser.add_argument("--save", default="")
    args = parser.parse_args()
    if args.graph_mode:
        import mindspore
        mindspore.set_context(mode=mindspore.GRAPH_MODE)

    net = make_lenet()
    if args.width != 120:
        net.fc1 = nn.Dense(16 * 5 * 5, args.width)
        net.fc2 = nn.Dense(args.width, 84)
    for layer in args.frozen:
        for param in getattr(net, layer).get_parameters():
            param.requires_grad = False
    trainable = net.trainable_params()
    zero = [p for p in trainable if p.name.split(".")[0] in args.zero_lr]
    zero_ids = {id(p) for p in zero}
    rest = [p for p in trainable if id(p) not in zero_ids]
    groups = [{"params": zero, "lr": 0.0}, {"params": rest}] if zero else trainable
    optimizer = nn.Momentum(groups, learning_rate=0.01, momentum=0.9)
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer)
    nan = {args.nan_batch} if args.nan_batch is not None else None
    for training in range(1, args.trainings + 1):
        poisoned = nan if args.nan_training in (None, training) else None
        if training == 2 and args.retrain_small:
            net = nn.SequentialCell([nn.Flatten(), nn.Dense(32 * 32, 10)])
            model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                          nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9))
        model.train(args.epochs, make_dataset(args.batches, nan_batches=poisoned),
                    callbacks=[StepLog(args.log, args.save)], dataset_sink_mode=False)
        print("training finished", flush=True)
        if training < args.trainings:
            time.sleep(args.pause_between)


if __name__ == "__main__":
    main()
