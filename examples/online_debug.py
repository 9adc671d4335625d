"""A plain LeNet-5 training script to try MindInsight's online debugger on. Nothing in it mentions the debugger.

The three commands (MindInsight 2.3.1 lives in its own venv: it needs protobuf 3.20 and NumPy < 2)::

    python3 -m venv ~/mindinsight-venv && ~/mindinsight-venv/bin/pip install mindinsight==2.3.1 "numpy<2"
    PATH=~/mindinsight-venv/bin:$PATH mindinsight start --port 8080 --enable-debugger True --debugger-port 50051

    ENABLE_MS_DEBUGGER=1 MS_DEBUGGER_HOST=127.0.0.1 MS_DEBUGGER_PORT=50051 python examples/online_debug.py
    # or, from a source checkout / editable install (no .pth there):
    msdebug run --host 127.0.0.1 --port 50051 examples/online_debug.py

    open http://127.0.0.1:8080 -> Debugger -> online session

Training stops at step 0 until you press CONTINUE (or OK with a number of steps) in the UI; set watchpoints first.
``--frozen fc3`` freezes a layer (try "weight not changed"), ``--nan-batch 20`` poisons a batch (try "weight
overflow"; LossMonitor then ends the script at the step whose loss is NaN/Inf, after the debugger paused there).
Without a debugger server the script trains to the end after one warning.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    import mindspore as ms
    from mindspore import nn
    from mindspore.train import LossMonitor, Model

    from lenet import make_dataset, make_lenet

    parser = argparse.ArgumentParser(description="LeNet-5 on synthetic data")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batches", type=int, default=200, help="batches (steps) per epoch")
    parser.add_argument("--frozen", nargs="*", default=[], help="layers to freeze, e.g. fc3")
    parser.add_argument("--nan-batch", type=int, default=None, help="0-based batch that gets a NaN/Inf input")
    parser.add_argument("--seed", type=int, default=1, help="MindSpore's seed for the initial weights")
    args = parser.parse_args()

    ms.set_seed(args.seed)   # the same run every time: on the CPU, ReLU turns NaN into 0, so whether a poisoned
    network = make_lenet()   # batch makes later losses NaN too depends on the initial weights
    for layer in args.frozen:
        for param in getattr(network, layer).get_parameters():
            param.requires_grad = False
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(network.trainable_params(), learning_rate=0.01, momentum=0.9)
    model = Model(network, loss_fn, optimizer)
    dataset = make_dataset(args.batches, nan_batches={args.nan_batch} if args.nan_batch is not None else None)
    # dataset_sink_mode=False: the debugger suspends training after every step (sink mode runs many per call)
    model.train(args.epochs, dataset, callbacks=[LossMonitor(50)], dataset_sink_mode=False)
    print("training finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
