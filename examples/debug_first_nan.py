"""Debug a training from a script, no MindInsight and no browser: run it until the first operator whose output holds a
NaN or Inf, print the line of Python behind that operator, pull its inputs into numpy (and save them), stop it.

The training is ``find_first_nan.py``'s LeNet behind ``sqrt(x + 1)``, with one bad pixel in batch 2. It runs in a
child process started by ``msdebug run`` with the debugger's dump source (``MS_DEBUGGER_SOURCE=dump``: every operator's
outputs, each step) and connects to the ``DebuggerServer`` this script holds. The same lines work in a notebook.

Run it::

    python examples/debug_first_nan.py [--save DIR]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEPS, BAD_STEP = 6, 2        # batch 2 (0-based) holds the bad pixel: training step 3


def train() -> None:
    """The child: a plain GRAPH_MODE training; the debugger is attached by ``msdebug run``."""
    sys.path.insert(0, str(HERE))
    import find_first_nan

    find_first_nan._train(STEPS, BAD_STEP)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", metavar="DIR", help="save the operator's inputs and output here as .npy files")
    parser.add_argument("--train", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.train:
        train()
        return 0

    import numpy as np

    from msdebug_hooks.server import DebuggerServer

    env = dict(os.environ, MS_DEBUGGER_SOURCE="dump", GLOG_v="3")
    env.pop("ENABLE_MS_DEBUGGER", None)                  # msdebug run attaches the debugger itself
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent), env.get("PYTHONPATH", "")])
    with DebuggerServer(port=0) as server:
        training = subprocess.Popen([sys.executable, "-m", "msdebug_hooks", "run", "--host", "127.0.0.1", "--port",
                                     str(server.port), __file__, "--train"], env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
        try:
            job = server.wait_for_training(timeout=300, process=training)
            print(f"training connected: {len(job.graph)} nodes, waiting at step {job.step}")
            job.watch("tensor_overflow", "*")               # every operator and parameter
            hits = job.run_until_hit(timeout=300)
            operators = sorted((h for h in hits if not h.node.is_parameter), key=lambda h: h.node.index)
            if not operators:
                print(f"no operator produced NaN/Inf ({job.state} at step {job.step})")
                return 1
            first = operators[0].node                       # hits of one step, in execution order
            print(f"first NaN/Inf at step {job.step}: output of {first.name} ({first.type}), "
                  f"{len(operators)} operator(s) hit in that step")
            print(f"source line: {first.source}")
            arrays = {f"output_{first.short_name}": job.tensor(first)}
            for name in first.inputs:
                arrays[f"input_{job.node(name).short_name}"] = job.tensor(name)
            for label, value in arrays.items():
                print(f"  {label}: {value.dtype} {list(value.shape)}, min {np.nanmin(value):.4g}, "
                      f"NaN {int(np.isnan(value).sum())}, < 0: {int((value < 0).sum())}")
            if args.save:
                Path(args.save).mkdir(parents=True, exist_ok=True)
                for label, value in arrays.items():
                    np.save(Path(args.save) / f"{label}.npy", value)
                print(f"saved {len(arrays)} arrays to {args.save}")
            job.terminate()
            print(f"training terminated at step {job.step}, exit code {training.wait(120)}")
        finally:
            if training.poll() is None:
                training.kill()
                training.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
