"""A training whose loss tells its step: the randomised debugger-API test (tests/server/test_server_random_api.py)
checks every suspension against it. No msdebug import: the tests start it with only the debugger variables.

One Dense(1, 1) with weight 1 and no bias, L1 loss against 0, learning rate 0 (the weight never moves): the loss of
step ``s`` (1-based) is exactly the input of batch ``s - 1``, which is ``s - 1``, or ``HIT_BASE + s - 1`` on every
``--hit-every``-th step (a loss a ``tensor_too_large`` watchpoint with ``max_gt=HIT_BASE / 2`` catches). The script
trains ``--trainings`` times, one ``Model.train`` after the other, each from batch 0.
"""
import argparse
import time

import numpy as np
from mindspore import dataset as ds, nn
from mindspore.common.initializer import One
from mindspore.train import Callback, Model

HIT_BASE = 1_000_000.0


def inputs(batches: int, hit_every: int) -> np.ndarray:
    """Batch ``i`` holds ``i``, or ``HIT_BASE + i`` when step ``i + 1`` is a multiple of ``hit_every``."""
    values = np.arange(batches, dtype=np.float32)
    if hit_every:
        values[hit_every - 1::hit_every] += HIT_BASE
    return values.reshape(batches, 1, 1)


class StepLog(Callback):
    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_train_end(self, run_context):
        if self.path:
            with open(self.path, "a") as log:
                log.write(f"end {run_context.original_args().cur_step_num}\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=100_000)
    parser.add_argument("--hit-every", type=int, default=7)
    parser.add_argument("--trainings", type=int, default=1)
    parser.add_argument("--raise-at", type=int, default=None, help="raise ValueError at the end of this step")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds of work in every step")
    parser.add_argument("--log", default="")
    args = parser.parse_args()

    class Trouble(Callback):
        def on_train_step_end(self, run_context):
            if args.sleep:
                time.sleep(args.sleep)
            if run_context.original_args().cur_step_num == args.raise_at:
                raise ValueError(f"bad batch at step {args.raise_at}")

    net = nn.Dense(1, 1, weight_init=One(), has_bias=False)
    model = Model(net, nn.L1Loss(), nn.SGD(net.trainable_params(), learning_rate=0.0))
    data = inputs(args.batches, args.hit_every)
    for _ in range(args.trainings):
        dataset = ds.NumpySlicesDataset({"x": data, "y": np.zeros_like(data)}, shuffle=False)
        model.train(1, dataset, callbacks=[StepLog(args.log), Trouble()], dataset_sink_mode=False)


if __name__ == "__main__":
    main()
