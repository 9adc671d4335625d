"""Throughput of ``compare-dumps`` (DumpComparer) against one plain pass over the same arrays.

Part 1, real dumps: the examples' LeNet trained 3 steps twice (two processes, sync dump of every tensor), compared
with ``DumpComparer``; reported as tensor pairs per second, GB/s (bytes of both sides) and the time per pair, against
a plain pass (load both files as compare-dumps does, ``np.subtract`` into a preallocated buffer) over the same pairs.
The difference per pair is the per-tensor overhead on small tensors (matching, file lookup, header checks, metrics'
fixed cost).

Part 2, a generated pair of at least 1 GB in all: float32 ``.npy`` files of 16 M elements written in a sync-dump
layout in a temporary directory (deleted afterwards). Half of B's tensors are A plus float32 rounding noise (the
usual "pass" pair), half differ by up to 1 % (every share has to be counted). Same measures, the plain pass in the
same run. Target: >= 30 % of the plain pass for the full metric set on large tensors.

Run: ``.venv/bin/python benchmarks/compare_throughput.py [--quick]``. Timings are the best of several repeats; the
machine is shared, so compare the ratios of one run rather than absolute numbers across runs.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from msdebug_hooks.compare.dumps import DumpComparer  # noqa: E402
from msdebug_hooks.compare.metrics import compare_arrays  # noqa: E402
from msdebug_hooks.dump import npy  # noqa: E402

WORKER = ROOT / "examples" / "migration" / "two_mindspore_runs.py"


def best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def lenet_dump(base: Path, name: str) -> Path:
    from msdebug_hooks import DumpConfig

    dump_dir = base / name / "dump"
    config = DumpConfig(path=str(dump_dir), net_name="Net", iteration="all", saved_data="tensor", trans_flag=True)
    env = dict(os.environ, GLOG_v="3", MINDSPORE_DUMP_CONFIG=str(config.write(base / name / "config.json")))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    subprocess.run([sys.executable, str(WORKER), "--worker", str(base / name / "losses"), "--steps", "3",
                    "--change-after", "-1"], env=env, check=True)
    return dump_dir


def generated_dump(root: Path, count: int, elements: int, seed: int, noisy: bool) -> Path:
    """``count`` float32 tensors in ``rank_0/Net/0/0/`` named as MindSpore 2.10 names them."""
    directory = root / "rank_0" / "Net" / "0" / "0"
    directory.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(elements, dtype=np.float32)
    for index in range(count):
        value = base * np.float32(1 + index / 10)
        if noisy:
            if index % 2 == 0:   # float32 rounding noise: a "pass" pair
                value = value * np.float32(1 + 1e-7)
            else:                # up to 1 % apart: every count is taken
                value = value * (1 + rng.uniform(-0.01, 0.01, elements).astype(np.float32))
        name = (f"MatMul.Default_net-Net_layer{index}-Dense_MatMul-op{index}.0.0.{1000 + index}"
                f".output.0.DefaultFormat.Float32.npy")
        with open(directory / name, "wb") as handle:
            np.lib.format.write_array(handle, value)
    return root


def measure(label: str, dump_a: Path, dump_b: Path, repeats: int) -> dict:
    comparer = DumpComparer(dump_a, dump_b)
    result = comparer.compare(progress=False)
    pairs = [p for p in result.pairs if p.file_a and p.file_b]
    nbytes = sum(npy.read_header(p.file_a).nbytes + npy.read_header(p.file_b).nbytes for p in pairs)
    loaded = [(p.file_a, p.file_b) for p in pairs]
    buffers: dict = {}

    def plain() -> None:
        for file_a, file_b in loaded:
            a, b = npy.load(file_a), npy.load(file_b)
            kind = np.result_type(a, b)
            kind = np.dtype(np.int8) if kind == np.bool_ else kind     # numpy has no bool subtract
            out = buffers.get((kind.str, a.shape))
            if out is None:
                out = buffers[(kind.str, a.shape)] = np.empty(a.shape, kind)
            np.subtract(a, b, out=out, dtype=kind, casting="unsafe")

    plain()   # page cache and buffers warm
    t_plain = best_time(plain, repeats)
    t_compare = best_time(lambda: DumpComparer(dump_a, dump_b).compare(progress=False), repeats)
    n = len(pairs)
    row = {"label": label, "pairs": n, "gb": nbytes / 1e9, "t_compare": t_compare, "t_plain": t_plain,
           "pairs_per_s": n / t_compare, "gb_per_s": nbytes / 1e9 / t_compare,
           "plain_gb_per_s": nbytes / 1e9 / t_plain, "share": t_plain / t_compare,
           "overhead_us": (t_compare - t_plain) / n * 1e6, "counts": result.counts()}
    print(f"{label}: {n} pairs, {row['gb']:.3f} GB; compare {t_compare:.3f} s = {row['pairs_per_s']:.0f} pairs/s, "
          f"{row['gb_per_s']:.2f} GB/s; plain pass {t_plain:.3f} s = {row['plain_gb_per_s']:.2f} GB/s; "
          f"share of plain pass {100 * row['share']:.1f} %; per pair {t_compare / n * 1e6:.0f} us "
          f"(overhead over the plain pass {row['overhead_us']:.0f} us); verdicts {row['counts']}", flush=True)
    return row


def kernel_only(elements: int, repeats: int) -> None:
    """compare_arrays alone on in-memory arrays (no files, no matching), close and differing pairs."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal(elements, dtype=np.float32)
    close = a * np.float32(1 + 1e-7)
    apart = a * (1 + rng.uniform(-0.01, 0.01, elements).astype(np.float32))
    out = np.empty_like(a)
    t_plain = best_time(lambda: np.subtract(a, close, out=out), repeats)
    for label, b in (("close (pass)", close), ("1 % apart (error)", apart)):
        t = best_time(lambda: compare_arrays(a, b), repeats)
        print(f"kernel, {elements / 1e6:.0f} M float32, {label}: {t * 1e3:.1f} ms = "
              f"{2 * a.nbytes / 1e9 / t:.2f} GB/s; plain np.subtract {t_plain * 1e3:.1f} ms = "
              f"{2 * a.nbytes / 1e9 / t_plain:.2f} GB/s; share {100 * t_plain / t:.1f} %", flush=True)
    small = rng.standard_normal(100, dtype=np.float32)
    t_small = best_time(lambda: [compare_arrays(small, small * np.float32(1.001)) for _ in range(1000)], repeats)
    print(f"kernel, 100-element tensors: {t_small * 1e3:.0f} us per pair", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    repeats = 2 if args.quick else 4
    base = Path(tempfile.mkdtemp(prefix="compare_bench_"))
    try:
        print("part 1: LeNet, 3 steps, every tensor dumped, two runs", flush=True)
        a = lenet_dump(base, "a")
        b = lenet_dump(base, "b")
        measure("LeNet dumps", a, b, repeats)
        print("part 2: generated pair, 8 + 8 float32 tensors of 16 M elements (1.07 GB in all)", flush=True)
        big_a = generated_dump(base / "big_a", 8, 16 * 1024 * 1024, seed=1, noisy=False)
        big_b = generated_dump(base / "big_b", 8, 16 * 1024 * 1024, seed=1, noisy=True)
        measure("generated 1 GB pair", big_a, big_b, repeats)
        kernel_only(16 * 1024 * 1024, repeats)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
