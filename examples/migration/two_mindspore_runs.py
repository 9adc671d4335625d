"""Two MindSpore runs of LeNet that part ways, found in three steps: compare-loss, a dump of that step, compare-dumps.

Run B has one change in one layer: a hand-written "weight clipping" callback that, after step ``CHANGE_AFTER``,
rescales fc2's weight by 10 (think of a buggy weight-norm or a conversion that multiplies a layer once). Everything
else (data, initial weights, optimizer) is the same.

    python examples/migration/two_mindspore_runs.py [--workdir DIR] [--steps 6] [--change-after 2]

What it shows:
1. both runs record their per-step loss with ``LossRecorder``; ``msdebug compare-loss`` names the first step that
   parts and what that means (step 1: forward pass; later: backward pass or weight update);
2. both runs are repeated with ``DumpConfig.around_step(<that step>)``, which dumps that step and the one before;
3. ``msdebug compare-dumps`` names the first operator that parts, the source line behind it in both runs, and
   whether its inputs already differed (here: fc2's weight did, so the change came between the steps).

Each run is its own process: MindSpore reads a dump config once per process.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent
sys.path.insert(0, str(HERE))
from echo_msdebug import msdebug  # noqa: E402
SCALE = 10.0


def train(record_dir: str, steps: int, change_after: int) -> None:
    """One run (in this process): LeNet on the examples' synthetic data, graph mode, losses recorded.

    ``change_after``: -1 for the unchanged run A; 0 rescales fc2's weight before training; k > 0 after step k.
    """
    sys.path.insert(0, str(EXAMPLES))
    import mindspore as ms
    from mindspore.train import Callback

    from lenet import make_dataset, make_model
    from msdebug_hooks import LossRecorder

    ms.set_context(mode=ms.GRAPH_MODE)
    model, network = make_model(0.01)

    def rescale_fc2() -> None:
        weight = network.fc2.weight
        weight.set_data(ms.Tensor(weight.asnumpy() * SCALE))

    class WeightClipping(Callback):   # the bug: meant to clip, it rescales fc2 once
        def on_train_step_end(self, run_context):
            if run_context.original_args().cur_step_num == change_after:
                rescale_fc2()

    callbacks = [LossRecorder(record_dir)]
    if change_after == 0:
        rescale_fc2()
    elif change_after > 0:
        callbacks.append(WeightClipping())
    model.train(1, make_dataset(num_batches=steps), callbacks=callbacks, dataset_sink_mode=False)


def run_worker(name: str, workdir: Path, steps: int, change_after: int, dump_step: int | None = None) -> Path:
    """Run one training in a fresh process (optionally with a dump of ``dump_step``); return its loss record dir."""
    from msdebug_hooks import DumpConfig

    record_dir = workdir / name / ("losses" if dump_step is None else "losses_dumped")
    env = dict(os.environ, GLOG_v="3")
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLES), env.get("PYTHONPATH", "")])
    if dump_step is not None:
        config = DumpConfig.around_step(dump_step, path=str(workdir / name / "dump"), net_name="LeNet",
                                        saved_data="tensor", trans_flag=True)
        env["MINDSPORE_DUMP_CONFIG"] = str(config.write(workdir / name / "dump_config.json"))
    subprocess.run([sys.executable, __file__, "--worker", str(record_dir), "--steps", str(steps),
                    "--change-after", str(change_after)], env=env, check=True)
    return record_dir


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="where runs, records and dumps go (default: a temporary directory)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--change-after", type=int, default=2, help="run B rescales fc2 after this step (0: before)")
    parser.add_argument("--worker", metavar="RECORD_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        train(args.worker, args.steps, args.change_after)
        return 0
    if args.workdir:
        workdir = Path(args.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="two_runs_"))
    print(f"1. two runs of LeNet, {args.steps} steps; run B rescales fc2's weight after step {args.change_after}")
    losses_a = run_worker("a", workdir, args.steps, -1)
    losses_b = run_worker("b", workdir, args.steps, args.change_after)
    plot = ["--plot", str(workdir / "loss.png")] if importlib.util.find_spec("matplotlib") else []
    code = msdebug("compare-loss", str(losses_b), str(losses_a), "--rtol", "1e-3", *plot)
    if code != 1:
        print("the runs did not part: nothing to look for")
        return code

    from msdebug_hooks.compare import compare_losses, read_losses

    step = compare_losses(read_losses(losses_b), read_losses(losses_a)).first_parted.step
    print(f"\n2. the runs part at step {step}: dump that step (and the one before) in both runs")
    run_worker("a", workdir, args.steps, -1, dump_step=step)
    run_worker("b", workdir, args.steps, args.change_after, dump_step=step)

    print("\n3. compare the two dumps operator by operator")
    code = msdebug("compare-dumps", str(workdir / "b" / "dump"), str(workdir / "a" / "dump"),
                   "--csv", str(workdir / "pairs.csv"))
    print(f"\nevery tensor pair is in {workdir / 'pairs.csv'}")
    if code != 1:
        return 1   # the example succeeds when compare-dumps finds the change

    from msdebug_hooks.compare import DumpComparer

    first = DumpComparer(workdir / "b" / "dump", workdir / "a" / "dump").compare(progress=False).first_divergence
    print(f"\nthe story: the losses part at step {step}; in the dump of that step (iteration {first.iteration}) the "
          f"first operator whose output differs is {first.op_type} {first.node_a.rsplit('/', 2)[-2]}, from\n  "
          f"{first.source_a}")
    if first.inputs_differed:
        print(f"and {', '.join(first.differing_inputs)} already differed while its other inputs agreed: fc2's "
              f"weight changed between step {step - 1} and step {step}, outside the graph - the WeightClipping "
              f"callback of run B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
