"""A plain GRAPH_MODE training script for the dump-source debugger tests: no msdebug import.

The network is ``examples/find_first_nan.py``'s LeNet behind ``SqrtScale`` (``sqrt(x + 1)``); batch ``--bad-step``
(0-based) carries one pixel of -4, so the NaN is born in the ``Sqrt`` kernel at training step ``bad_step + 1``.
A user callback records, after every step, how much the debugger's scratch dump directory holds (the debugger deletes
a step's files when the next step begins), and copies one activation file (``--keep-op``) of step ``--keep-step`` so
the test can compare it with what MindInsight shows. ``--loss-monitor`` puts MindSpore's ``LossMonitor`` first in
the callbacks, and ``--inf-batch`` trains the plain LeNet instead, with that batch poisoned so that its loss is Inf
(``lenet.synthetic_batches``).
"""
import argparse
import json
import os
import shutil
from pathlib import Path

import mindspore as ms
import numpy as np
import mindspore.dataset as ds
from mindspore import nn
from mindspore.train import Callback, LossMonitor, Model

from find_first_nan import bad_batches, make_nan_net


def _dump_root():
    config = os.environ.get("MINDSPORE_DUMP_CONFIG")
    if not config:
        return None
    return Path(json.loads(Path(config).read_text())["common_dump_settings"]["path"]).parent


def _usage(root):
    """(bytes under the scratch root, iteration directories present, bytes in them)."""
    total = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    iterations = [d for d in root.glob("dump/rank_*/Net/*/*") if d.is_dir()]
    step = sum(p.stat().st_size for d in iterations for p in d.rglob("*") if p.is_file())
    return total, len(iterations), step


class DiskLog(Callback):
    def __init__(self, log, keep_op, keep_step, keep_to):
        super().__init__()
        self.log, self.keep_op, self.keep_step, self.keep_to = log, keep_op, keep_step, keep_to

    def on_train_step_end(self, run_context):
        step = run_context.original_args().cur_step_num
        root = _dump_root()
        used, iterations, step_bytes = _usage(root) if root else (0, 0, 0)
        with open(self.log, "a") as out:
            out.write(f"step {step} bytes {used} iterations {iterations} step_bytes {step_bytes}\n")
        if root and step == self.keep_step and self.keep_op:
            for path in root.rglob(f"*.{self.keep_op}.*.output.0.*.npy"):
                shutil.copy(path, self.keep_to)

    def on_train_end(self, run_context):
        root = _dump_root()
        with open(self.log, "a") as out:
            out.write(f"end root {root}\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--bad-step", type=int, default=None)
    parser.add_argument("--log", required=True)
    parser.add_argument("--keep-op", default="")
    parser.add_argument("--keep-step", type=int, default=0)
    parser.add_argument("--keep-to", default="")
    parser.add_argument("--warmup", action="store_true", help="run the network once (predict) before training")
    parser.add_argument("--loss-monitor", action="store_true", help="MindSpore's LossMonitor first in the callbacks")
    parser.add_argument("--inf-batch", type=int, default=None, help="0-based batch whose loss is Inf (lenet.py)")
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_seed(1)
    if args.inf_batch is not None:
        from lenet import make_lenet
        net = make_lenet()
    else:
        net = make_nan_net()
    if args.inf_batch is not None:
        from lenet import synthetic_batches
        batches = lambda: synthetic_batches(args.steps, nan_batches={args.inf_batch})   # noqa: E731
    else:
        batches = lambda: bad_batches(args.steps, args.bad_step)   # noqa: E731
    data = ds.GeneratorDataset(batches, column_names=["image", "label"], shuffle=False)
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9))
    if args.warmup:   # a graph compiled (and run) before training
        model.predict(ms.Tensor(np.zeros((32, 1, 32, 32), np.float32)))
    callbacks = [DiskLog(args.log, args.keep_op, args.keep_step, args.keep_to)]
    if args.loss_monitor:
        callbacks.insert(0, LossMonitor(1))
    model.train(1, data, callbacks=callbacks, dataset_sink_mode=False)
    print("training finished", flush=True)


if __name__ == "__main__":
    main()
