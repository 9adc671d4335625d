"""The same small training on any MindSpore version, with a sync dump of every step: compare-dumps across versions.

    python tests/scripts/version_dump_train.py DUMP_DIR [--steps 2]

A conv layer, two dense layers and an MSELoss (whose gradient operators are named differently by 2.7 and 2.8+),
trained with Momentum in GRAPH_MODE on the CPU. Weights and data come from numpy with fixed seeds, not from
MindSpore's initialisers, so two versions start from the very same values and any difference between their dumps is
the versions' arithmetic. Runs in a fresh process (MindSpore reads the dump setting once, at the first compile).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dump_dir")
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    dump_dir = Path(args.dump_dir).resolve()

    from msdebug_hooks import DumpConfig

    config = DumpConfig(path=str(dump_dir), net_name="Net", iteration="all", saved_data="tensor", trans_flag=True)
    os.environ["MINDSPORE_DUMP_CONFIG"] = str(config.write(dump_dir.parent / f"{dump_dir.name}_config.json"))

    import numpy as np
    import mindspore as ms
    from mindspore import nn

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    rng = np.random.RandomState(7)

    def weight(*shape: int) -> ms.Parameter:
        return ms.Parameter(ms.Tensor((rng.standard_normal(shape) * 0.2).astype(np.float32)))

    class Net(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3, pad_mode="valid", has_bias=True,
                                  weight_init=weight(4, 1, 3, 3).value(), bias_init=weight(4).value())
            self.relu = nn.ReLU()
            self.flatten = nn.Flatten()
            self.fc1 = nn.Dense(4 * 6 * 6, 16, weight_init=weight(16, 144).value(), bias_init=weight(16).value())
            self.fc2 = nn.Dense(16, 3, weight_init=weight(3, 16).value(), bias_init=weight(3).value())

        def construct(self, x):
            x = self.flatten(self.relu(self.conv(x)))
            return self.fc2(self.relu(self.fc1(x)))

    images = rng.standard_normal((args.steps, 8, 1, 8, 8)).astype(np.float32)
    targets = rng.standard_normal((args.steps, 8, 3)).astype(np.float32)
    network = Net()
    step = nn.TrainOneStepCell(nn.WithLossCell(network, nn.MSELoss()),
                               nn.Momentum(network.trainable_params(), learning_rate=0.05, momentum=0.9))
    step.set_train()
    for index in range(args.steps):
        loss = step(ms.Tensor(images[index]), ms.Tensor(targets[index]))
        print(f"step {index + 1} loss {float(loss.asnumpy()):.9g}")
    print(f"mindspore {ms.__version__} dumped to {dump_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
