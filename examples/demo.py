"""The README demo: a training run diverges, LossGuard catches it at the exact step, and a rerun dumps just that moment.

1. LeNet-5 trains on synthetic data in which one batch is poisoned. ``LossGuard`` stops the run cleanly at the step
   whose loss is not finite, keeps the parameters from before the failing update, and prints the rerun recipe.
2. A fresh process (MindSpore reads its dump setting once per process) applies ``guard.dump_config(...)`` (the
   failing iteration and the one before) and trains again with ``guard.stop_at_step()``, so it stops right after the
   failing step instead of running on.
3. The dump is on disk: the demo lists its iteration directories, counts the non-finite tensors in each, and lets
   ``DumpAnalyzer`` name the operator that produced the first NaN/Inf and the source line behind it (the same check
   as ``msdebug check-dump DUMP --watch tensor_overflow``).

Run it::

    .venv/bin/python examples/demo.py                 # work in a new temporary directory (kept, path printed)
    .venv/bin/python examples/demo.py --workdir /tmp/demo
    .venv/bin/python examples/demo.py --clean         # remove the work directory at the end
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

EPOCHS = 3
BATCHES = 8           # steps per epoch
POISONED = {4}        # 0-based batch index: global step 5 of the first epoch


def say(text: str = "") -> None:
    print(text, flush=True)


def train(callbacks) -> None:
    """The same deterministic LeNet training for the first run and the rerun.

    Graph mode, so that the rerun's dump holds every operator of the network (PyNative dumps only the optimizer).
    """
    import mindspore as ms
    from mindspore.train import Callback

    ms.set_context(mode=ms.GRAPH_MODE)

    from lenet import make_dataset, make_model

    class PrintLoss(Callback):
        def on_train_step_end(self, run_context):
            args = run_context.original_args()
            say(f"    epoch {args.cur_epoch_num} step {args.cur_step_num:2d}  loss {args.net_outputs.item():.4f}")

    model, _ = make_model(learning_rate=0.01)
    model.train(EPOCHS, make_dataset(num_batches=BATCHES, nan_batches=POISONED), callbacks=[PrintLoss(), *callbacks])


def first_run(workdir: Path):
    from msdebug_hooks import LossGuard

    say(f"== 1. Train LeNet-5 for {EPOCHS} epochs x {BATCHES} steps; one batch of the data is poisoned")
    guard = LossGuard(save_last_good=workdir / "last_good", keep_previous=True, dump_path=workdir / "dump")
    train([guard])
    if guard.failed_step is None:
        raise SystemExit("demo: the guard did not fire; the poisoned batch should have made the loss non-finite")
    say(f"\n   LossGuard caught it: {guard.reason} at epoch {guard.failed_epoch}, step {guard.failed_step}; "
        f"training stopped there instead of running {EPOCHS * BATCHES} steps.")
    say(f"   Parameters from before the failing update: {guard.last_good_checkpoint}")
    return guard


def rerun(workdir: Path, guard) -> Path:
    step = guard.failed_step
    config = guard.dump_config()                       # DumpConfig.around_step(step, path=workdir / "dump")
    config_file = config.write(workdir / "dump.json")
    say(f"\n== 2. Rerun in a fresh process with the dump config for steps {max(1, step - 1)}-{step} "
        f"and StopAtStep({step})")
    say("   " + json.dumps(config.to_dict()["common_dump_settings"]))
    child = subprocess.run([sys.executable, __file__, "--rerun", str(config_file), str(step)], text=True)
    if child.returncode != 0:
        raise SystemExit(f"demo: the rerun failed with exit code {child.returncode}")
    return Path(config.path)


def rerun_child(config_file: str, step: int) -> None:
    """Runs in the fresh process: apply the dump config before MindSpore compiles anything, then train to ``step``."""
    from msdebug_hooks import DumpConfig, StopAtStep

    DumpConfig.load(config_file).apply(config_file)
    train([StopAtStep(step)])


def show_dump(dump_dir: Path) -> None:
    import numpy as np

    say(f"\n== 3. The dump holds just the failing moment: {dump_dir}")
    iterations = sorted((p for p in dump_dir.glob("rank_*/*/*/*") if p.is_dir() and p.name.isdigit()),
                        key=lambda p: int(p.name))
    for directory in iterations:
        files = sorted(directory.glob("*.npy"))
        bad = sum(1 for f in files if np.load(f).dtype.kind == "f" and not np.isfinite(np.load(f)).all())
        say(f"   {directory.relative_to(dump_dir)}/  {len(files)} tensors, {bad} holding NaN/Inf"
            f"   (dump iteration {directory.name} = step {int(directory.name) + 1})")
    if not iterations:
        raise SystemExit("demo: the rerun wrote no dump iterations")
    first_bad_operator(dump_dir)
    first, last = iterations[0].name, iterations[-1].name
    say("\n   The same check from the shell, every hit in execution order:")
    say(f"   msdebug check-dump {dump_dir} --watch tensor_overflow --iterations {first}-{last}")


def first_bad_operator(dump_dir: Path) -> None:
    """The first operator output holding NaN/Inf, in execution order, with the training-script line behind it."""
    from msdebug_hooks import DumpAnalyzer, TensorOverflowCondition, Watchpoint

    analyzer = DumpAnalyzer(dump_dir)
    hits = analyzer.check_watchpoints([Watchpoint(analyzer.select_tensors(""), TensorOverflowCondition())])
    if not hits:
        raise SystemExit("demo: no NaN/Inf found in the dump")
    first = hits[0].tensor
    say(f"\n   First NaN/Inf: output {first.slot} of {first.node.name} (dump iteration {first.iteration})")
    if first.node.node_type != "operator":
        say("   (a graph input: the bad value came in with the data batch)")
    operator = next((h.tensor for h in hits if h.tensor.node.node_type == "operator"), None)
    if operator is None:
        return
    say(f"   First operator it reached: {operator.node.name}")
    frames = operator.node.source_lines()
    if frames:
        frame = frames[-1]
        say(f"   source line: {frame['file_path']}:{frame['line_no']}: {frame['code_line'].strip()}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", metavar="DIR", help="work in DIR (default: a new temporary directory)")
    parser.add_argument("--clean", action="store_true", help="remove the work directory at the end")
    parser.add_argument("--rerun", nargs=2, metavar=("CONFIG", "STEP"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rerun:
        rerun_child(args.rerun[0], int(args.rerun[1]))
        return 0
    workdir = Path(args.workdir).resolve() if args.workdir else Path(tempfile.mkdtemp(prefix="msdebug-demo-"))
    for stale in ("dump", "last_good"):      # a previous demo run in the same directory
        shutil.rmtree(workdir / stale, ignore_errors=True)
    say(f"The demo's outputs (checkpoints, dump config, dump) go to {workdir}"
        f"{'; removed at the end (--clean)' if args.clean else ''}\n")
    try:
        guard = first_run(workdir)
        dump_dir = rerun(workdir, guard)
        show_dump(dump_dir)
    finally:
        if args.clean:
            shutil.rmtree(workdir, ignore_errors=True)
            say(f"\n   (removed {workdir})")
        else:
            size = sum(f.stat().st_size for f in workdir.rglob("*") if f.is_file()) / 2**20
            say(f"\nThe demo's outputs are kept in {workdir} ({size:.1f} MB): remove it with rm -r {workdir}, or run "
                "the demo with --clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
