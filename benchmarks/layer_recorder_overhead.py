"""What a layer recorder costs per training step, against plain training of the same network in the same process:
``TorchLayerRecorder`` (PyTorch) and ``LayerRecorder`` (MindSpore, GRAPH_MODE and PyNative).

Networks: the comparison corpus's ResNet-style CNN and transformer encoder (``tests/corpus/``, written in both
frameworks; :mod:`bench_nets`), batch ``--batch``, plain SGD. Three variants per network, each its own network
instance with the same initial weights and batches:

* plain: no recorder;
* attached, not capturing: a recorder attached with ``steps=[1]``, each step inside its step block as in the docs;
  step 1 (warm-up) is captured, the timed steps are not. PyTorch and PyNative: every hooked layer call still reaches
  the hook, which returns at once. GRAPH_MODE: the hooks are on during step 1 only, so the timed steps run the
  hookless graph, compiled at step 2 and taken from MindSpore's cache after (``LayerRecorder``'s docstring);
* plain, a second instance: plain training of a second network instance, the control: its ratio to the first is
  what instance and load alone make of "x plain" in this run (the floor a recorder's ratio is read against);
* capturing every step: each layer's output copied to the host and written, the manifest rewritten; gradients too
  (PyTorch reads ``.grad``; MindSpore PyNative ``record_gradients``; GRAPH_MODE's ``TrainOneStepCell`` returns none).
  It runs a quarter of the steps per round, at most half of ``--steps`` (it writes every step, and the manifest,
  rewritten after each, grows with them).

One process per framework and mode (``--worker``), so PyTorch and MindSpore never share one. Each variant is warmed
up (compiled) first; the variants then train in interleaved rounds, rotating their order, so other work on a shared
machine slows them alike (a round is at least ``--steps`` steps, more when steps are quick, so that it lasts
``--round-seconds``). Printed: the median step per variant, its ratio to plain training's, the hooked calls a
step makes (the forward records of a captured step) and the cost per hooked call; the 1-minute load average with each.

Run: ``.venv/bin/python benchmarks/layer_recorder_overhead.py [--quick] [--rounds 5] [--steps 10] [--batch 16]
[--round-seconds 1] [--threads 1] [--nets cnn transformer] [--workers pytorch graph pynative] [--no-doc]``. Full
runs rewrite the section "Layer recorder overhead" of ``docs/performance.md``; ``--quick`` (1 round of 4 steps, the
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

WORKERS = {"pytorch": "PyTorch", "graph": "MindSpore GRAPH_MODE", "pynative": "MindSpore PyNative"}
VARIANTS = ("plain", "attached, not capturing", "capturing every step", "plain, a second instance")


def _recorder_factory(worker: str, threads: int):
    """(trainer class, recorder class, versions) for a worker, its framework imported, its mode and threads set."""
    from bench_nets import MindSporeTrainer, TorchTrainer

    if worker == "pytorch":
        import torch

        from msdebug_hooks.compare.torch import TorchLayerRecorder
        if threads:
            torch.set_num_threads(threads)
        return TorchTrainer, TorchLayerRecorder, {"torch": torch.__version__, "torch threads": torch.get_num_threads()}
    os.environ.setdefault("GLOG_v", "3")
    import mindspore as ms

    from msdebug_hooks.compare.mindspore_layers import LayerRecorder
    ms.set_context(mode=ms.GRAPH_MODE if worker == "graph" else ms.PYNATIVE_MODE)
    if threads:
        ms.set_context(runtime_num_threads=threads)
    return MindSporeTrainer, LayerRecorder, {"mindspore": ms.__version__}


def measure_net(worker: str, net: str, args, workdir: Path) -> dict:
    from msdebug_hooks.compare.layer_capture import FORWARD_OUTPUT, read_capture

    trainer_class, recorder_class, _ = _recorder_factory(worker, args.threads)
    variants = {}
    for name, capture in zip(VARIANTS, (None, False, True, None)):
        trainer = trainer_class(net, args.batch)
        recorder = None
        if capture is not None:
            recorder = recorder_class(trainer.network, workdir / f"{net}_{len(variants)}",
                                      steps=None if capture else [1])   # warm-up step 1 only: see the docstring
            if worker == "pynative":
                trainer.recorder = recorder
        variants[name] = (trainer, recorder)
    times: dict = {name: [] for name in VARIANTS}
    step_numbers = {name: 0 for name in VARIANTS}

    def run(name: str, steps: int, record: bool) -> None:
        trainer, recorder = variants[name]
        if record:
            times[name].append([])
        for _ in range(steps):
            step_numbers[name] += 1
            start = time.perf_counter()
            if recorder is not None:
                recorder.begin_step(step_numbers[name])
            result = trainer.forward_backward(step_numbers[name])
            if recorder is not None:
                recorder.end_step()
            trainer.update(result)
            if record:
                times[name][-1].append(time.perf_counter() - start)

    for name in VARIANTS:   # compile and warm up
        run(name, 3, record=False)
    probe = time.perf_counter()
    run(VARIANTS[0], 3, record=False)
    step_s = (time.perf_counter() - probe) / 3   # quick steps get more per round: each round lasts >= --round-seconds
    steps = max(args.steps, min(20 * args.steps, int(args.round_seconds / step_s)))
    loads = []
    for round_index in range(args.rounds):
        shift = round_index % len(VARIANTS)
        for name in VARIANTS[shift:] + VARIANTS[:shift]:
            run(name, steps if name != VARIANTS[2] else max(2, min(steps // 4, args.steps // 2)), record=True)
        loads.append(perf_doc.load_1m())
    capture = read_capture(variants[VARIANTS[2]][1].directory)
    calls = len(capture.step_records(capture.steps[0], (FORWARD_OUTPUT,)))
    for _, recorder in variants.values():
        if recorder is not None:
            recorder.remove()
    medians = {name: statistics.median(t for one_round in rounds for t in one_round) for name, rounds in times.items()}
    plain_rounds = [statistics.median(one_round) for one_round in times[VARIANTS[0]]]
    round_ratios = {name: [statistics.median(one_round) / plain for one_round, plain in zip(rounds, plain_rounds)]
                    for name, rounds in times.items()}
    return {"net": net, "batch": args.batch, "medians_ms": {k: 1e3 * v for k, v in medians.items()},
            "round_ratios": round_ratios, "steps": {k: sum(map(len, v)) for k, v in times.items()}, "calls": calls,
            "loads": loads}


def worker_main(args) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="recorder_bench_"))
    try:
        _, _, versions = _recorder_factory(args.worker, args.threads)
        results = [measure_net(args.worker, net, args, workdir) for net in args.nets]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    Path(args.out).write_text(json.dumps({"worker": args.worker, "versions": versions, "nets": results}))
    return 0


def describe(result: dict) -> list:
    """Table rows (and print lines) of one worker's result."""
    rows = []
    for net in result["nets"]:
        plain = net["medians_ms"][VARIANTS[0]]
        attached = net["medians_ms"][VARIANTS[1]]
        capturing = net["medians_ms"][VARIANTS[2]]
        twin = net["medians_ms"].get(VARIANTS[3], float("nan"))
        per_call = 1e3 * (attached - plain) / net["calls"] if net["calls"] else float("nan")
        spread = net["round_ratios"][VARIANTS[1]]
        rows.append((WORKERS[result["worker"]], f"{net['net']}, batch {net['batch']}", f"{plain:.2f} ms",
                     f"{attached:.2f} ms", f"**x{attached / plain:.2f}**", f"x{min(spread):.2f}-{max(spread):.2f}",
                     f"x{twin / plain:.2f}", f"{per_call:.0f} us", net["calls"], f"{capturing:.2f} ms",
                     f"x{capturing / plain:.2f}",
                     f"{net['steps'][VARIANTS[0]]}/{net['steps'][VARIANTS[1]]}/{net['steps'][VARIANTS[2]]}",
                     " ".join(net["loads"])))
    return rows


HEADER = ("framework", "network", "plain step", "attached, not capturing", "x plain", "x plain, per round",
          "second plain instance, x plain", "per hooked call",
          "hooked calls a step", "capturing every step", "x plain", "steps timed", "load (1 min), per round")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 round of 4 steps, the CNN, no doc")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per variant (default 5)")
    parser.add_argument("--steps", type=int, default=10, help="steps per round, at least (default 10)")
    parser.add_argument("--round-seconds", type=float, default=1.0,
                        help="more steps per round (up to 20x --steps) for quick steps, so a round lasts this long")
    parser.add_argument("--batch", type=int, default=16, help="batch size (default 16)")
    perf_doc.add_worker_arguments(parser, NETS, WORKERS)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.round_seconds, args.nets = 1, 4, 0.0, ["cnn"]
    if args.worker:
        return worker_main(args)
    section = perf_doc.Section("layer-recorder-overhead", "Layer recorder overhead", argv)
    rows, versions = perf_doc.run_workers(__file__, args, WORKERS, [
        "--rounds", str(args.rounds), "--steps", str(args.steps), "--round-seconds", str(args.round_seconds),
        "--batch", str(args.batch)], describe, HEADER, doing="training ")
    if args.quick or args.no_doc:
        return 0
    section.add(f"Batch {args.batch}, {args.threads or 'the default number of'} intra-op thread(s) per framework "
                "(on a shared 2-core machine a second thread makes step times swing tenfold with the load). "
                "Medians of the steps timed; ratios against plain training of the same network, measured in the same "
                f"process in interleaved rounds (a round: at least {args.steps} steps, more for quick steps so that "
                f"it lasts {args.round_seconds:g} s; capturing runs a quarter of that, at most {args.steps // 2}). "
                "A step is the whole training step (forward, backward, update, the loss read on the host). "
                "\"Per hooked call\" is the attached recorder's extra time divided by the layer calls it hooks a "
                "step: a fixed cost per call, so a network whose layers compute more per call pays a smaller share. "
                "\"Per round\" is the range of the ratio over the rounds (each round's median against plain's in "
                "the same round): where it straddles x1.00 the recorder's cost is below what this machine's load "
                "lets one see, and the per-call figure (even negative) is noise. \"Second plain instance\" is plain "
                "training of a second copy of the network in the same rounds: what \"x plain\" reads with no recorder. "
                "The attached recorder captures warm-up step 1 only (steps=[1]); in GRAPH_MODE its hooks are on "
                "during captured steps only, so its timed steps run the hookless graph.", "")
    section.table(HEADER, rows)
    print(f"wrote {section.write(versions)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
