"""What replaying one layer on captured inputs costs, as a multiple of one forward of that layer: PyTorch, and
MindSpore in PyNative (where ``replay_layer`` runs a MindSpore cell).

For each network (the corpus's CNN and transformer, :mod:`bench_nets`) one training step is captured with
``record_inputs=True``; then, for a few layers of different kinds and sizes, in the same process and in interleaved
rounds (at least ``--rounds``, more for quick layers until ``--seconds``; times: medians; ratios and differences:
medians of each round's pair):

* **forward** (the floor): the layer called on its inputs already in the framework, its output read as numpy
  (PyTorch under ``torch.no_grad()``, as the replay runs; MindSpore ``cell(*tensors).asnumpy()``, which also waits
  for the result);
* **replay**: ``replay_layer(model, name, inputs)`` with the inputs as numpy arrays in memory: it finds the layer by
  name, converts the inputs to the layer's dtype and framework, runs the layer once, converts the outputs;
* **read + replay**: ``layer_inputs(capture, step, name)`` (the inputs read from the capture's ``.npy`` files, the
  manifest already read) then the replay, which is what ``compare_layers(..., replay_a=model)`` does for the layer
  it names.

The inputs come from the framework's own capture; where they come from does not change the cost (the same shapes and
dtypes). The layer keeps its training state, as a replay does. One process per framework.

Run: ``.venv/bin/python benchmarks/replay_cost.py [--quick] [--rounds 30] [--seconds 3] [--batch 32]
[--no-doc]``. Full runs rewrite the section "Replay cost" of ``docs/performance.md``; ``--quick`` (5 rounds, the
CNN) writes nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import perf_doc  # noqa: E402
from bench_nets import NETS  # noqa: E402

WORKERS = {"pytorch": "PyTorch", "pynative": "MindSpore PyNative"}
LAYERS = {"cnn": ("conv1", "layer1.0.conv1", "layer1.0.bn1", "layer1.0.relu1", "layer2.0.conv1", "fc"),
          "transformer": ("blocks.0.norm1", "blocks.0.attn.q_proj", "blocks.0.attn.softmax", "blocks.0.ffn.fc1",
                          "blocks.0.ffn.act", "head")}


def _framework(worker: str, threads: int):
    """(trainer class, recorder class, forward(layer, arrays) -> callable, find(model, name), versions)."""
    from bench_nets import MindSporeTrainer, TorchTrainer

    if worker == "pytorch":
        import torch

        from msdebug_hooks.compare.torch import TorchLayerRecorder
        if threads:
            torch.set_num_threads(threads)

        def forward(layer, arrays):
            tensors = [torch.from_numpy(a) for a in arrays]

            def run():
                with torch.no_grad():
                    return layer(*tensors).numpy()
            return run
        return (TorchTrainer, TorchLayerRecorder, forward, lambda model, name: dict(model.named_modules())[name],
                {"torch": torch.__version__, "torch threads": torch.get_num_threads()})
    os.environ.setdefault("GLOG_v", "3")
    import mindspore as ms

    from msdebug_hooks.compare.mindspore_layers import LayerRecorder
    ms.set_context(mode=ms.PYNATIVE_MODE)
    if threads:
        ms.set_context(runtime_num_threads=threads)

    def forward(cell, arrays):
        tensors = [ms.Tensor(a) for a in arrays]
        return lambda: cell(*tensors).asnumpy()
    return (MindSporeTrainer, LayerRecorder, forward, lambda model, name: dict(model.cells_and_names())[name],
            {"mindspore": ms.__version__})


def measure_net(worker: str, net: str, args, workdir: Path) -> list:
    from msdebug_hooks.compare.layer_capture import read_capture
    from msdebug_hooks.compare.replay import layer_inputs, replay_layer

    trainer_class, recorder_class, forward, find, _ = _framework(worker, args.threads)
    trainer = trainer_class(net, args.batch)
    recorder = recorder_class(trainer.network, workdir / net, steps=[1], record_inputs=True)
    for step in (1, 2):   # step 1 captured; step 2 leaves the recorder idle for the timings
        with recorder.step(step):
            result = trainer.forward_backward(step)
        trainer.update(result)
    recorder.remove()
    capture = read_capture(workdir / net)
    rows = []
    for name in LAYERS[net]:
        inputs = layer_inputs(capture, 1, name)
        calls = {"forward": forward(find(trainer.network, name), inputs),
                 "replay": lambda name=name, inputs=inputs: replay_layer(trainer.network, name, inputs),
                 "read + replay": lambda name=name: replay_layer(trainer.network, name,
                                                                 layer_inputs(capture, 1, name))}
        times: dict = {key: [] for key in calls}
        for call in calls.values():   # warm up
            call()
        began, rounds = time.perf_counter(), 0
        while rounds < args.rounds or (time.perf_counter() - began < args.seconds and rounds < 20 * args.rounds):
            rounds += 1
            for key, call in calls.items():
                start = time.perf_counter()
                call()
                times[key].append(time.perf_counter() - start)
        paired = {key: [t / f for t, f in zip(values, times["forward"])] for key, values in times.items()}
        rows.append({"net": net, "layer": name, "input_kb": sum(a.nbytes for a in inputs) / 1024, "rounds": rounds,
                     "us": {key: 1e6 * statistics.median(values) for key, values in times.items()},
                     "x": {key: statistics.median(values) for key, values in paired.items()},
                     "extra_us": 1e6 * statistics.median(r - f for r, f in zip(times["replay"], times["forward"])),
                     "load": perf_doc.load_1m()})
    return rows


def worker_main(args) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="replay_bench_"))
    try:
        versions = _framework(args.worker, args.threads)[4]
        rows = [row for net in args.nets for row in measure_net(args.worker, net, args, workdir)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    Path(args.out).write_text(json.dumps({"worker": args.worker, "versions": versions, "rows": rows}))
    return 0


HEADER = ("framework", "network", "layer", "inputs", "rounds", "forward", "replay", "x forward", "replay - forward",
          "read + replay", "x forward", "load (1 min)")


def describe(result: dict) -> list:
    out = []
    for row in result["rows"]:
        us, x = row["us"], row["x"]
        out.append((WORKERS[result["worker"]], row["net"], f"`{row['layer']}`", f"{row['input_kb']:.0f} KB",
                    row["rounds"],
                    f"{us['forward']:.0f} us", f"{us['replay']:.0f} us", f"**x{x['replay']:.2f}**",
                    f"{row['extra_us']:.0f} us", f"{us['read + replay']:.0f} us", f"x{x['read + replay']:.2f}",
                    row["load"]))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 5 rounds, the CNN, no doc")
    parser.add_argument("--rounds", type=int, default=30, help="interleaved rounds per layer, at least (default 30)")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="more rounds (up to 20x --rounds) until a layer has run this long (default 3)")
    parser.add_argument("--batch", type=int, default=32, help="batch size of the captured step (default 32)")
    perf_doc.add_worker_arguments(parser, NETS, WORKERS)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds, args.nets = 5, 0.0, ["cnn"]
    if args.worker:
        return worker_main(args)
    section = perf_doc.Section("replay-cost", "Replay cost", argv)
    rows, versions = perf_doc.run_workers(__file__, args, WORKERS, [
        "--rounds", str(args.rounds), "--seconds", str(args.seconds), "--batch", str(args.batch)], describe, HEADER)
    if args.quick or args.no_doc:
        return 0
    section.add(f"Medians of at least {args.rounds} interleaved rounds per layer (more for quick layers, up to "
                f"{args.seconds:g} s each; times; ratios and differences are the "
                f"medians of each round's replay against the forward right before it), batch {args.batch}, "
                f"{args.threads or 'the default number of'} intra-op thread(s) per framework. \"forward\" is the "
                "floor: the layer called on inputs already in its framework, output read as numpy. \"replay\" is "
                "`replay_layer` on in-memory numpy inputs; \"read + replay\" adds reading the inputs from the "
                "capture (`layer_inputs`), as `compare_layers(..., replay_a=model)` does for the layer it names. "
                "The difference from the floor is a fixed cost per replay (finding the layer, converting inputs "
                "and outputs), so the ratio falls as the layer's work grows.", "")
    section.table(HEADER, rows)
    print(f"wrote {section.write(versions)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
