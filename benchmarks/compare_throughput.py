"""What ``compare-layers`` and ``compare-dumps`` cost, as a multiple of one plain read of both sides' files.

The floor of a comparison is reading both sides once: every byte of both has to come off the disk or the page
cache. Each part times the command as a user runs it (``msdebug compare-layers A B``, ``msdebug compare-dumps A B
--no-progress``, in this process, its report printed into a buffer) against, in the same run:

* **plain read**: ``np.load`` of every tensor file of both sides (the floor);
* **read + subtract**: the same, plus one ``np.subtract`` of each pair into a preallocated buffer (the floor of any
  comparison that computes on the values at all).

Warm: the files are in the page cache; floor and command alternate, best of ``--repeats``. Cold-ish: before each
timed pass every file is flushed and dropped from the page cache (``posix_fadvise(DONTNEED)``), so both read from the
disk; best of ``--repeats`` - 1. Printed with each figure: the 1-minute load average (the machine is usually
shared). A cProfile pass of each warm command names where the time goes.

Parts (``--parts``, default all):

* ``layers``: two layer captures of >= ``--size-gb`` each (a few hundred forward outputs of 1-16 MB; B the
  reference, A = B with float32 rounding noise up to one planted record, 1e-3 from there on;
  :mod:`synthetic_pair`). The command must name the planted record; the script checks it.
* ``dumps``: the same for two sync dumps of >= ``--size-gb`` each (operators with input 0 and output 0).
* ``lenet``: two real dumps of the examples' LeNet (3 steps, every tensor; MindSpore runs in two subprocesses):
  many small tensors, where the fixed cost per tensor shows.
* ``kernel``: ``compare_arrays`` alone on 16 M float32 in memory against one ``np.subtract``.

Run: ``.venv/bin/python benchmarks/compare_throughput.py [--quick] [--parts layers dumps] [--dir DIR] [--no-doc]``.
Full runs rewrite the section "Comparison throughput" of ``docs/performance.md``; ``--quick`` (about 20 MB a side,
one repeat, no doc) is a smoke run. Needs about 2.5 GB free under ``--dir`` (default: the system's temporary
directory); everything generated is deleted at the end.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]

import perf_doc  # noqa: E402
import synthetic_pair  # noqa: E402

WORKER = ROOT / "examples" / "migration" / "two_mindspore_runs.py"
PARTS = ("layers", "dumps", "lenet", "kernel")


def lenet_dump(base: Path, name: str) -> Path:
    from msdebug_hooks import DumpConfig

    dump_dir = base / name / "dump"
    config = DumpConfig(path=str(dump_dir), net_name="Net", iteration="all", saved_data="tensor", trans_flag=True)
    env = dict(os.environ, GLOG_v="3", MINDSPORE_DUMP_CONFIG=str(config.write(base / name / "config.json")))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    subprocess.run([sys.executable, str(WORKER), "--worker", str(base / name / "losses"), "--steps", "3",
                    "--change-after", "-1"], env=env, check=True)
    return dump_dir


def drop_from_cache(files: list) -> None:
    """Flush each file and ask the kernel to drop its pages (no root needed; only these files are affected)."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def plain_read(files: list) -> None:
    for path in files:
        np.load(path)


def read_subtract(pairs: list, buffers: dict) -> None:
    for file_a, file_b in pairs:
        a, b = np.load(file_a), np.load(file_b)
        kind = np.result_type(a, b)
        kind = np.dtype(np.int8) if kind == np.bool_ else kind     # numpy has no bool subtract
        out = buffers.get((kind.str, a.shape))
        if out is None:
            out = buffers[(kind.str, a.shape)] = np.empty(a.shape, kind)
        if a.shape == b.shape:
            np.subtract(a, b, out=out, dtype=kind, casting="unsafe")


def run_command(argv: list) -> tuple:
    """(exit code, report text) of ``msdebug ARGV`` run in this process."""
    from msdebug_hooks.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue()


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(label: str, pairs: list, argv: list, repeats: int) -> dict:
    """Time ``msdebug ARGV`` against a plain read (and read + subtract) of ``pairs``' files, warm and cold-ish."""
    files = [f for pair in pairs for f in pair]
    nbytes = sum(os.path.getsize(f) for f in files)
    buffers: dict = {}
    row = {"label": label, "files": len(files), "gb": nbytes / 1e9}
    plain_read(files)   # page cache warm; buffers allocated; the command's modules imported
    read_subtract(pairs, buffers)
    run_command(argv)
    warm = {"read": [], "subtract": [], "command": []}
    loads = []
    for _ in range(repeats):
        warm["read"].append(timed(lambda: plain_read(files)))
        warm["subtract"].append(timed(lambda: read_subtract(pairs, buffers)))
        warm["command"].append(timed(lambda: run_command(argv)))
        loads.append(perf_doc.load_1m())
    row.update({f"warm_{key}": min(values) for key, values in warm.items()}, load_warm=" ".join(loads))
    cold: dict = {"read": [], "command": []}
    cold_loads = []
    for _ in range(max(1, repeats - 1)):
        drop_from_cache(files)
        cold["read"].append(timed(lambda: plain_read(files)))
        drop_from_cache(files)
        cold["command"].append(timed(lambda: run_command(argv)))
        cold_loads.append(perf_doc.load_1m())
    row.update({f"cold_{key}": min(values) for key, values in cold.items()}, load_cold=" ".join(cold_loads))
    row["x_warm"] = row["warm_command"] / row["warm_read"]
    row["x_warm_subtract"] = row["warm_command"] / row["warm_subtract"]
    row["x_cold"] = row["cold_command"] / row["cold_read"]
    print(f"{label}: {len(files)} files, {row['gb']:.2f} GB both sides\n"
          f"  warm (best of {repeats}; load {row['load_warm']}): plain read {row['warm_read']:.2f} s "
          f"({row['gb'] / row['warm_read']:.2f} GB/s), read + subtract {row['warm_subtract']:.2f} s, command "
          f"{row['warm_command']:.2f} s = x{row['x_warm']:.2f} of the plain read, x{row['x_warm_subtract']:.2f} of "
          f"read + subtract\n"
          f"  cold (best of {max(1, repeats - 1)}; load {row['load_cold']}): plain read {row['cold_read']:.2f} s "
          f"({row['gb'] / row['cold_read']:.2f} GB/s), command {row['cold_command']:.2f} s = x{row['x_cold']:.2f}",
          flush=True)
    return row


def profile(argv: list, top: int) -> list:
    """The functions where the warm command spends its own time: [(share of the total, seconds, where)]."""
    profiler = cProfile.Profile()
    profiler.runcall(run_command, argv)
    stats = pstats.Stats(profiler)
    total = sum(entry[2] for entry in stats.stats.values())
    rows = sorted(((entry[2], func) for func, entry in stats.stats.items()), key=lambda item: -item[0])[:top]
    out = []
    for seconds, (filename, line, name) in rows:
        where = f"{Path(filename).name}:{line} {name}" if line else name
        out.append((seconds / total, seconds, where))
    print(f"  profile of {argv[0]} (own time, {total:.2f} s in all under cProfile):")
    for share, seconds, where in out:
        print(f"    {100 * share:5.1f} %  {seconds:6.2f} s  {where}")
    return out


def check_layers(pair: synthetic_pair.Pair) -> str:
    from msdebug_hooks.compare.layers import compare_layers

    finding = compare_layers(pair.a, pair.b).finding
    named = finding.entry.name if finding is not None else None
    return f"named {named} (planted {pair.planted}): {'right' if named == pair.planted else 'WRONG'}"


def check_dumps(pair: synthetic_pair.Pair) -> str:
    from msdebug_hooks.compare.dumps import DumpComparer

    first = DumpComparer(pair.a, pair.b).compare(progress=False).first_divergence
    named = first.node_a if first is not None else None
    return f"named {named} (planted {pair.planted}): {'right' if named == pair.planted else 'WRONG'}"


def kernel_only(elements: int, repeats: int) -> list:
    """compare_arrays alone on in-memory arrays (no files, no matching), against one np.subtract."""
    from msdebug_hooks.compare.metrics import compare_arrays

    rng = np.random.default_rng(0)
    a = rng.standard_normal(elements, dtype=np.float32)
    out = np.empty_like(a)
    rows = []
    for label, b in (("equal up to rounding", a * np.float32(1 + 1e-7)),
                     ("1 % apart", a * (1 + rng.uniform(-0.01, 0.01, elements).astype(np.float32)))):
        np.subtract(a, b, out=out)   # pages of ``out`` touched, work buffers allocated
        compare_arrays(a, b)
        t_plain = min(timed(lambda b=b: np.subtract(a, b, out=out)) for _ in range(repeats))
        t = min(timed(lambda b=b: compare_arrays(a, b)) for _ in range(repeats))
        rows.append((label, t, t_plain, perf_doc.load_1m()))
        print(f"kernel, {elements / 2 ** 20:.0f} M float32, {label}: compare_arrays {t * 1e3:.0f} ms "
              f"({2 * a.nbytes / 1e9 / t:.2f} GB/s), np.subtract {t_plain * 1e3:.0f} ms: x{t / t_plain:.1f} "
              f"(load {rows[-1][3]})", flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: ~20 MB a side, one repeat, no doc")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="what to run (default all)")
    parser.add_argument("--size-gb", type=float, default=1.1, help="bytes of each side of the generated pairs")
    parser.add_argument("--repeats", type=int, default=3, help="warm repeats (best of)")
    parser.add_argument("--dir", type=Path, default=None, help="where to generate (default: a temporary directory)")
    perf_doc.add_doc_argument(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.size_gb, args.repeats = 0.02, 1
    largest = synthetic_pair.MB * (16 if not args.quick else 1)
    smallest = synthetic_pair.MB if not args.quick else synthetic_pair.MB // 8
    section = perf_doc.Section("compare-throughput", "Comparison throughput", argv)
    base = Path(tempfile.mkdtemp(prefix="compare_bench_", dir=args.dir))
    rows, notes, profiles = [], [], {}
    try:
        # the generated pairs: (part, generator, folder, what a side holds, check, extra command arguments)
        for part, generate, folder, unit, check, extra in (
                ("layers", synthetic_pair.layer_captures, "captures", "records", check_layers, []),
                ("dumps", synthetic_pair.sync_dumps, "dumps", "files", check_dumps, ["--no-progress"])):
            if part not in args.parts:
                continue
            command = f"compare-{part}"
            pair = generate(base / folder, int(args.size_gb * 1e9), smallest=smallest, largest=largest)
            argv_part = [command, str(pair.a), str(pair.b), *extra]
            rows.append(measure(f"{command}, {len(pair.files_a)} {unit} a side",
                                list(zip(pair.files_a, pair.files_b)), argv_part, args.repeats))
            notes.append(f"{command} {check(pair)}")
            profiles[command] = profile(argv_part, 8)
            shutil.rmtree(base / folder)
        if "lenet" in args.parts:
            from msdebug_hooks.compare.dumps import DumpComparer

            dump_a, dump_b = lenet_dump(base, "a"), lenet_dump(base, "b")
            result = DumpComparer(dump_a, dump_b).compare(progress=False)
            pairs = [(p.file_a, p.file_b) for p in result.pairs if p.file_a and p.file_b]
            rows.append(measure(f"compare-dumps, LeNet 3 steps, {len(pairs)} tensor pairs", pairs,
                                ["compare-dumps", str(dump_a), str(dump_b), "--no-progress"], args.repeats))
        kernel = kernel_only((16 if not args.quick else 1) * 2 ** 20, args.repeats) if "kernel" in args.parts else []
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for note in notes:
        print(note)
    if args.quick or args.no_doc:
        return 0
    write_doc(section, rows, notes, profiles, kernel, args.repeats)
    return 0


def write_doc(section, rows: list, notes: list, profiles: dict, kernel: list, repeats: int) -> None:
    section.add("Generated pairs: B the reference, A = B with float32 rounding noise (3e-7) up to one planted "
                "record, 1e-3 from there on; record sizes log-uniform in 1-16 MB (`benchmarks/synthetic_pair.py`). "
                "The command runs in-process as `msdebug` would run it; the floor is `np.load` of every file of "
                "both sides. Warm: page cache warm, best of "
                f"{repeats}, floor and command alternating. Cold: each file flushed and dropped from the page "
                f"cache (`posix_fadvise(DONTNEED)`) before each pass, best of {max(1, repeats - 1)}; the disk is "
                "shared too, so cold figures swing more than warm ones.", "")
    section.table(["comparison", "files (both sides)", "GB", "plain read, warm", "read + subtract, warm",
                   "command, warm", "x plain read", "x read + subtract", "load (1 min)", "plain read, cold",
                   "command, cold", "x plain read, cold", "load (1 min), cold"],
                  [(r["label"], r["files"], f"{r['gb']:.2f}", f"{r['warm_read']:.2f} s", f"{r['warm_subtract']:.2f} s",
                    f"{r['warm_command']:.2f} s", f"**x{r['x_warm']:.2f}**", f"x{r['x_warm_subtract']:.2f}",
                    r["load_warm"], f"{r['cold_read']:.2f} s", f"{r['cold_command']:.2f} s",
                    f"**x{r['x_cold']:.2f}**", r["load_cold"]) for r in rows])
    section.add(*[f"- {note}" for note in notes], "")
    for command, entries in profiles.items():
        section.add(f"Where {command} spends its own time (cProfile, warm, one run):", "")
        section.table(["share", "seconds", "function"],
                      [(f"{100 * share:.1f} %", f"{seconds:.2f}", f"`{where}`") for share, seconds, where in entries])
    if kernel:
        section.add("`compare_arrays` alone on 16 M float32 in memory (every metric of a pair), against one "
                    "`np.subtract`:", "")
        section.table(["pair", "compare_arrays", "np.subtract", "x", "load (1 min)"],
                      [(label, f"{t * 1e3:.0f} ms", f"{plain * 1e3:.0f} ms", f"x{t / plain:.1f}", load)
                       for label, t, plain, load in kernel])
    print(f"wrote {section.write({'numpy': np.__version__})}")


if __name__ == "__main__":
    sys.exit(main())
