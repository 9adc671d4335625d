"""What agreed stop decisions cost per step in a real two-rank data-parallel job started by ``msrun`` (CPU, LeNet-5,
batch 32 per rank).

Each rank trains three variants in interleaved rounds (rotating order), each with its own compiled model, warmed up
first:

* ``plain``: no callbacks;
* ``guards, agreed``: ``StopAtTime + StopAtStep + LossGuard`` (never firing) as shipped: one all-reduce of one
  float32 per step for the three together (``stop_agreement.py``);
* ``guards, local``: the same callbacks with the agreement switched off in this benchmark process (each rank decides
  alone, as before the agreement existed; a real job must not run like this).

Per variant: the median step time (between consecutive ``on_train_step_begin``; first step of each round dropped)
and its ratio to plain; and the median wall time and thread CPU time spent inside the three callbacks per step
(marker callbacks right before and after them). For the agreed variant the wall time is essentially the all-reduce,
including the wait for the slower rank (time that rank would otherwise wait in the next gradient all-reduce); the CPU
time is the work it adds. Also the bare cost of the
all-reduce itself (200 back-to-back calls). Both ranks report; the table shows each rank's numbers.

Run: ``python benchmarks/distributed_overhead.py [--rounds 6] [--steps 40] [--no-doc]`` (starts msrun itself; needs
``msrun`` beside this python, as in the project venv); a run rewrites the section "Agreed stop decisions (msrun)" of
``docs/performance.md``. ``benchmarks/callback_overhead.py --msrun`` runs it too.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parent.parent / "examples"), str(HERE.parent)]

import perf_doc  # noqa: E402

TAG = "MSDEBUG_BENCH "
VARIANTS = ("plain", "guards, agreed", "guards, local")


def worker(rounds: int, steps: int) -> int:
    """One rank's part (run by msrun)."""
    import mindspore as ms
    from mindspore import ParallelMode
    from mindspore.communication import init
    from mindspore.train import Callback

    from lenet import make_dataset, make_model
    from msdebug_hooks import LossGuard, StopAtStep, StopAtTime
    from msdebug_hooks import stop_agreement as _agreement
    from msdebug_hooks.rank import rank_id, world_size

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    init()
    ms.set_auto_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL, gradients_mean=True)
    rank = rank_id()
    class Marker(Callback):
        def __init__(self) -> None:
            super().__init__()
            self.begins: list[float] = []
            self.ends: list[float] = []
            self.ends_cpu: list[float] = []

        def on_train_step_begin(self, run_context) -> None:
            self.begins.append(time.perf_counter())

        def on_train_step_end(self, run_context) -> None:
            self.ends.append(time.perf_counter())
            self.ends_cpu.append(time.thread_time())

    def guards():
        return [StopAtTime(10_000, unit="minutes"), StopAtStep(10 ** 9), LossGuard()]

    factories = {"plain": list, "guards, agreed": guards, "guards, local": guards}
    agreed = _agreement.collective_needed

    def set_agreement(name: str) -> None:
        _agreement.collective_needed = (lambda: False) if name == "guards, local" else agreed

    models = {name: make_model(0.01)[0] for name in VARIANTS}
    data = {name: make_dataset(steps, seed=rank, prebuilt=True) for name in VARIANTS}
    for name in VARIANTS:                                   # compile and warm up
        set_agreement(name)
        models[name].train(1, data[name], callbacks=factories[name](), dataset_sink_mode=False)
    steps_s = {name: [] for name in VARIANTS}
    hooks_s = {name: [] for name in VARIANTS}
    hooks_cpu = {name: [] for name in VARIANTS}
    for index in range(rounds):
        for name in VARIANTS[index % 3:] + VARIANTS[:index % 3]:     # same order on every rank
            set_agreement(name)
            outer, before, after = Marker(), Marker(), Marker()
            models[name].train(1, data[name], callbacks=[outer, before, *factories[name](), after],
                               dataset_sink_mode=False)
            steps_s[name] += [b - a for a, b in zip(outer.begins[1:-1], outer.begins[2:])]
            hooks_s[name] += [a - b for b, a in zip(before.ends[1:], after.ends[1:])]
            hooks_cpu[name] += [a - b for b, a in zip(before.ends_cpu[1:], after.ends_cpu[1:])]
    set_agreement("guards, agreed")
    import numpy as np

    one = np.zeros(1, dtype=np.float32)
    _agreement._allreduce_sum(one)
    started = time.perf_counter()
    for _ in range(200):
        _agreement._allreduce_sum(one)
    allreduce = (time.perf_counter() - started) / 200
    result = {"rank": rank, "world": world_size(), "allreduce_ms": allreduce * 1e3,
              "steps": {n: len(v) for n, v in steps_s.items()},
              "step_ms": {n: statistics.median(v) * 1e3 for n, v in steps_s.items()},
              "hooks_ms": {n: statistics.median(v) * 1e3 for n, v in hooks_s.items()},
              "hooks_cpu_ms": {n: statistics.median(v) * 1e3 for n, v in hooks_cpu.items()},
              "version": ms.__version__}
    print(TAG + json.dumps(result), flush=True)
    return 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _kill_tree(pid: int) -> None:
    """msrun's workers run in sessions of their own: kill each descendant's process group, then msrun's."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    todo, found = [pid], []
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    for target in [*found, pid]:
        try:
            os.killpg(os.getpgid(target), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds per variant (default 6)")
    parser.add_argument("--steps", type=int, default=40, help="steps per round (default 40)")
    parser.add_argument("--timeout", type=float, default=600, help="kill the job after this many seconds")
    parser.add_argument("--bench-worker", action="store_true", help=argparse.SUPPRESS)
    perf_doc.add_doc_argument(parser)
    args = parser.parse_args(argv)
    if args.bench_worker:
        return worker(args.rounds, args.steps)
    section = perf_doc.Section("distributed-overhead", "Agreed stop decisions (msrun)", argv, script=str(HERE))

    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    with tempfile.TemporaryDirectory(prefix="msdebug-bench-") as tmp:
        command = [str(bin_dir / "msrun"), "--worker_num=2", "--local_worker_num=2", f"--master_port={_free_port()}",
                   "--join=True", f"--log_dir={tmp}", str(HERE), "--bench-worker", f"--rounds={args.rounds}",
                   f"--steps={args.steps}"]
        started = time.monotonic()
        proc = subprocess.Popen(command, env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"the two-rank job did not finish within {args.timeout:.0f} s; killed", file=sys.stderr)
            return 1
        finally:
            _kill_tree(proc.pid)
        results = []
        for rank in (0, 1):
            log = Path(tmp, f"worker_{rank}.log").read_text(errors="replace")
            lines = [line for line in log.splitlines() if line.startswith(TAG)]
            if proc.returncode != 0 or not lines:
                print(f"msrun exit {proc.returncode}; worker_{rank}.log tail:\n{log[-3000:]}", file=sys.stderr)
                return 1
            results.append(json.loads(lines[-1][len(TAG):]))
    elapsed = time.monotonic() - started
    first = results[0]
    print(f"MindSpore {first['version']} CPU, msrun 2 ranks data-parallel, LeNet-5 batch 32 per rank, "
          f"{args.rounds} interleaved rounds x {args.steps} steps per variant ({first['steps']['plain']} timed steps "
          f"each); job {elapsed:.0f} s incl. startup; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    section.add(f"MindSpore CPU, `msrun` 2 ranks data-parallel, LeNet-5 batch 32 per rank, {args.rounds} "
                f"interleaved rounds x {args.steps} steps per variant ({first['steps']['plain']} timed steps each); "
                "\"guards\" is `StopAtTime + StopAtStep + LossGuard` (never firing), \"agreed\" as shipped (one "
                "all-reduce of one float32 per step for the three), \"local\" with the agreement switched off in the "
                "benchmark (each rank decides alone; a real job must not run like this). \"In our hooks\": median "
                "wall and thread CPU time inside the three callbacks per step.", "")
    section.say(f"bare all-reduce of 1 float32: rank 0 {results[0]['allreduce_ms']:.3f} ms, "
                f"rank 1 {results[1]['allreduce_ms']:.3f} ms")
    print(f"{'variant':<16} {'rank':>4} {'median step':>12} {'vs plain':>9} {'in our hooks':>13} {'of step':>8} "
          f"{'hooks CPU':>10}")
    rows = []
    for name in VARIANTS:
        for result in results:
            step, plain, hooks = result["step_ms"][name], result["step_ms"]["plain"], result["hooks_ms"][name]
            print(f"{name:<16} {result['rank']:>4} {step:>9.3f} ms {100 * (step / plain - 1):>+8.2f}% "
                  f"{hooks:>10.3f} ms {100 * hooks / plain:>7.2f}% {result['hooks_cpu_ms'][name]:>7.3f} ms")
            rows.append((name, result["rank"], f"{step:.3f} ms", f"{100 * (step / plain - 1):+.2f} %",
                         f"{hooks:.3f} ms", f"{100 * hooks / plain:.2f} %", f"{result['hooks_cpu_ms'][name]:.3f} ms"))
    section.table(["variant", "rank", "median step", "vs plain", "in our hooks", "of the plain step", "hooks CPU"],
                  rows)
    for result in results:
        agreed, local = result["step_ms"]["guards, agreed"], result["step_ms"]["guards, local"]
        section.say(f"rank {result['rank']}: agreement costs {agreed - local:+.3f} ms per step "
                    f"({100 * (agreed / local - 1):+.2f} % of the step with the same callbacks deciding locally)")
    section.publish(args.no_doc, {"mindspore": first["version"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
