"""What the MindSpore ``LayerRecorder`` costs per training step in GRAPH_MODE, against plain training.

The network is the migration example's LeNet-5 with BatchNorm (14 recorded layer calls), batch 32, trained by a
compiled ``TrainOneStepCell`` in a plain loop. Three variants, each its own compiled network, all measured in this
one run:

* plain: no recorder;
* not capturing: a recorder attached (its hooks compiled into the graph) on a step it does not capture -- every
  hooked layer still calls into Python once, which returns at once;
* capturing: a recorder capturing every step -- each layer's output copied to the host and written as ``.npy``
  (atomically), plus the manifest.

Each variant is warmed up (compiled) first; the variants then train in interleaved rounds (rotating order) so the
other processes on a shared machine slow all of them alike. Printed: median step time per variant and its ratio to
plain training's.

Run: ``python benchmarks/layer_recorder_overhead.py [--rounds 5] [--steps 30]``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "examples"), str(ROOT / "examples" / "migration"), str(ROOT)]

from lenet import synthetic_batches  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per variant (default 5)")
    parser.add_argument("--steps", type=int, default=30, help="steps per round (default 30)")
    args = parser.parse_args(argv)
    os.environ.setdefault("GLOG_v", "3")
    import mindspore as ms
    from mindspore import nn

    from lenet_bn_mindspore import make_lenet_bn
    from msdebug_hooks.compare.mindspore_layers import LayerRecorder

    ms.set_context(mode=ms.GRAPH_MODE)
    workdir = Path(tempfile.mkdtemp(prefix="layer_recorder_bench_"))
    batches = [(ms.Tensor(x), ms.Tensor(y)) for x, y in synthetic_batches(8, 32)]

    def build(capture):
        ms.set_seed(1)
        net = make_lenet_bn()
        recorder = None
        if capture is not None:
            recorder = LayerRecorder(net, workdir / f"capture_{capture}", steps=None if capture else [])
        loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        cell = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), nn.Momentum(net.trainable_params(), 0.01, 0.9))
        cell.set_train()
        return cell, recorder

    variants = {"plain": build(None), "not capturing": build(False), "capturing": build(True)}
    times: dict[str, list[float]] = {name: [] for name in variants}
    step_numbers = {name: 0 for name in variants}

    def run(name, steps, record):
        cell, recorder = variants[name]
        for index in range(steps):
            x, y = batches[index % len(batches)]
            step_numbers[name] += 1
            start = time.perf_counter()
            if recorder is not None:
                recorder.begin_step(step_numbers[name])
            cell(x, y).asnumpy()
            if recorder is not None:
                recorder.end_step()
            if record:
                times[name].append(time.perf_counter() - start)

    for name in variants:  # compile and warm up
        run(name, 3, record=False)
    order = list(variants)
    for round_index in range(args.rounds):
        for name in order[round_index % len(order):] + order[:round_index % len(order)]:
            run(name, args.steps, record=True)
    plain = statistics.median(times["plain"])
    print(f"LayerRecorder overhead, GRAPH_MODE, LeNet-BN batch 32, {args.rounds} rounds x {args.steps} steps "
          f"per variant ({os.cpu_count()} CPUs; medians)")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:14s} {1000 * median:8.2f} ms/step   x{median / plain:5.2f} of plain")
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
