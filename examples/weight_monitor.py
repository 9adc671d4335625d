"""Find the layer that is not learning: LeNet-5 trained with a learning rate of 0 for ``fc3`` by mistake.

Run: ``python examples/weight_monitor.py``. ``WeightMonitor`` logs one line per stuck parameter (not one per step)
and keeps every finding in ``monitor.problems``; ``fc2`` is frozen on purpose (``requires_grad=False``) and is
named once as frozen, not reported as a problem. Then the same check on checkpoint files: ``msdebug ckpt-diff``.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lenet import make_dataset, make_lenet  # noqa: E402


def main() -> int:
    import mindspore as ms
    from mindspore import nn
    from mindspore.train import Model

    from msdebug_hooks import WeightMonitor
    from msdebug_hooks.ckpt import compare_checkpoints

    ms.set_seed(1)
    network = make_lenet()
    for param in network.fc2.trainable_params():
        param.requires_grad = False                      # frozen on purpose
    fc3 = network.fc3.trainable_params()
    fc3_names = {p.name for p in fc3}
    rest = [p for p in network.trainable_params() if p.name not in fc3_names]
    optimizer = nn.Momentum([{"params": fc3, "lr": 0.0}, {"params": rest}], learning_rate=0.05, momentum=0.9)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = Model(network, loss_fn, optimizer)

    workdir = Path(tempfile.mkdtemp(prefix="msdebug-weights-"))
    ms.save_checkpoint(network, str(workdir / "before.ckpt"))
    monitor = WeightMonitor(every_n_steps=1, max_update_ratio=0.5, on_problem="warn")
    model.train(1, make_dataset(6), callbacks=[monitor], dataset_sink_mode=False)
    ms.save_checkpoint(network, str(workdir / "after.ckpt"))

    print(f"checked {len(monitor.checked)} parameters, frozen: {monitor.frozen}")
    for (name, kind), count in sorted(monitor.counts.items()):
        print(f"{name}: {kind} at {count} of 6 steps")
    report = compare_checkpoints(workdir / "before.ckpt", workdir / "after.ckpt")
    print(f"checkpoint diff: unchanged {report.unchanged}")
    print(f"same from the shell: msdebug ckpt-diff {workdir / 'before.ckpt'} {workdir / 'after.ckpt'}")
    print(f"(both checkpoints stay in {workdir}; delete that directory when done)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
