"""What ``msdebug first-nan`` costs against the plain training: the check run, the rerun, the probe's time a step.

The training is ``tests/scripts/nan_origin_train.py`` (a small dense network, one planted ``ops.log`` of 0 whose batch
comes at ``--bad-step``), in three loop styles. For each: the plain script run to its end (wall time, one process),
then ``first_nan`` on the same command: the check run (the whole training with the probe, stopped at the first
non-finite step), the rerun (to that step, two steps dumped or traced), and the probe's own time inside the steps of
the check run (``probe_in_steps``) per step. Wall times include each process's start (importing MindSpore, compiling).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]
import perf_doc  # noqa: E402
SCRIPT = ROOT / "tests" / "scripts" / "nan_origin_train.py"
LOOPS = {"functional (PyNative)": ("functional", "pynative"), "@jit": ("jit", "pynative"),
         "Model.train (GRAPH_MODE)": ("model", "graph")}


def plain(loop: str, mode: str, steps: int, bad: int) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, str(SCRIPT), "--loop", loop, "--mode", mode, "--steps", str(steps),
                    "--bad-step", str(bad), "--source", "log"], capture_output=True, check=False, timeout=1800)
    return time.monotonic() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="steps of the training (default 40)")
    parser.add_argument("--bad-step", type=int, default=30, help="the step whose batch breaks ops.log (default 30)")
    perf_doc.add_doc_argument(parser)
    args = parser.parse_args(argv)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    from msdebug_hooks.nan.runner import first_nan

    section = perf_doc.Section("first-nan", "First-nan", argv)
    section.add(f"`tests/scripts/nan_origin_train.py --source log --steps {args.steps} --bad-step {args.bad_step}`: "
                "the plain script against `first_nan` on it (the check run to the first non-finite step, the rerun to "
                "it). Wall times include each process's start (importing MindSpore, compiling). 'probe a step' is the "
                "probe's own time at each step end of the check run, which includes waiting for the step's loss "
                "value (the same read LossGuard makes).", "")
    rows = []
    for label, (loop, mode) in LOOPS.items():
        base = plain(loop, mode, args.steps, args.bad_step)
        with tempfile.TemporaryDirectory(prefix="msdebug_firstnan_") as tmp:
            started = time.monotonic()
            result = first_nan([sys.executable, str(SCRIPT), "--loop", loop, "--mode", mode, "--steps",
                                str(args.steps), "--bad-step", str(args.bad_step), "--source", "log"],
                               Path(tmp) / "work")
            total = time.monotonic() - started
        checked = result.steps_checked or 1
        per_step = result.seconds.get("probe_in_steps", 0.0) / checked * 1e3
        found = result.origin.operator if result.origin else "none"
        rows.append((label, f"{base:.1f} s", f"{result.seconds.get('check', 0):.1f} s",
                     f"{result.seconds.get('rerun', 0):.1f} s", f"{total:.1f} s", f"x{total / base:.2f}",
                     f"{per_step:.3f} ms", f"step {result.origin.step if result.origin else '-'}: {found}",
                     perf_doc.load_1m()))
        print(rows[-1], flush=True)
    section.table(["loop", "plain script", "check run", "rerun", "first-nan total", "x plain", "probe a step",
                   "answer", "load (1 min)"], rows)
    section.publish(args.no_doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
