"""How long ``import msdebug_hooks`` takes in a fresh interpreter, against a bare ``python -c pass``.

Settings must be applied before ``import mindspore``, so the package has to be cheap to import and must not pull
MindSpore in. Each statement runs N times in new subprocesses; the median wall time is printed with the bare
interpreter's median subtracted (the cost we add), and ``-X importtime`` names the slowest modules we import.
Target: under 0.2 s.

Run: ``.venv/bin/python benchmarks/import_time.py [--runs 15] [--no-doc]``; a run rewrites the section "Import time"
of ``docs/performance.md``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import perf_doc  # noqa: E402

TARGET_S = 0.2
STATEMENTS = {
    "bare interpreter": "pass",
    "import msdebug_hooks": "import msdebug_hooks",
    "from msdebug_hooks import DumpConfig, LogConfig": "from msdebug_hooks import DumpConfig, LogConfig",
    "from msdebug_hooks import LogConfig, RDRConfig": "from msdebug_hooks import LogConfig, RDRConfig",
}


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def median_seconds(code: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=_env(), check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def available(code: str) -> bool:
    return subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True).returncode == 0


def slowest_imports(code: str, top: int = 5) -> list[tuple[int, str]]:
    """(cumulative microseconds, module) of the slowest non-stdlib-startup imports, from ``-X importtime``."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=_env(), capture_output=True,
                          text=True, check=True)
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _self_us, cumulative, name = line[len("import time:"):].split("|")
        name = name[1:]  # one separator space; further leading spaces mean a nested import
        if not name.startswith(" "):
            rows.append((int(cumulative), name))
    return sorted(rows, reverse=True)[:top]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh interpreters per statement (median is printed)")
    perf_doc.add_doc_argument(parser)
    args = parser.parse_args(argv)
    section = perf_doc.Section("import-time", "Import time", argv)

    print(f"python {sys.version.split()[0]}, {args.runs} fresh interpreters per statement, median wall time")
    bare = median_seconds(STATEMENTS["bare interpreter"], args.runs)
    print(f"  {'bare interpreter (python -c pass)':<52} {bare * 1000:7.1f} ms")
    rows = [("bare interpreter (`python -c pass`)", f"{bare * 1000:.1f} ms", "", "", perf_doc.load_1m())]
    worst = 0.0
    for label, code in list(STATEMENTS.items())[1:]:
        if not available(code):
            print(f"  {label:<52} (not importable yet: skipped)")
            continue
        median = median_seconds(code, args.runs)
        added = median - bare
        worst = max(worst, added)
        print(f"  {label:<52} {median * 1000:7.1f} ms  (+{added * 1000:.1f} ms over bare, "
              f"{median / bare:.2f}x)")
        rows.append((f"`{label}`", f"{median * 1000:.1f} ms", f"+{added * 1000:.1f} ms", f"x{median / bare:.2f}",
                     perf_doc.load_1m()))
    section.add(f"Median wall time of {args.runs} fresh interpreters per statement; \"added\" is the median minus "
                "the bare interpreter's, the cost the package adds before `import mindspore`.", "")
    section.table(["statement", "median", "added", "x bare", "load (1 min)"], rows)
    leaked = subprocess.run([sys.executable, "-c", "import sys, msdebug_hooks; from msdebug_hooks import LogConfig, "
                             "RDRConfig; print('mindspore' in sys.modules)"], env=_env(), capture_output=True,
                            text=True, check=True).stdout.strip()
    section.say(f"mindspore imported by the package: {leaked}")
    for label in ("from msdebug_hooks import DumpConfig, LogConfig", "from msdebug_hooks import LogConfig, RDRConfig"):
        if available(STATEMENTS[label]):
            print(f"slowest top-level imports under '{label}' (-X importtime, cumulative):")
            slowest = slowest_imports(STATEMENTS[label])
            for micros, name in slowest:
                print(f"  {micros / 1000:7.1f} ms  {name}")
            section.add(f"Slowest top-level imports under `{label}` (`-X importtime`, cumulative, one run):", "")
            section.table(["module", "cumulative"], [(f"`{name}`", f"{micros / 1000:.1f} ms")
                                                      for micros, name in slowest])
    verdict = "OK" if worst < TARGET_S else "OVER TARGET"
    section.say(f"largest added import time {worst * 1000:.1f} ms vs target {TARGET_S * 1000:.0f} ms: {verdict}")
    section.publish(args.no_doc)
    return 0 if worst < TARGET_S and leaked == "False" else 1


if __name__ == "__main__":
    sys.exit(main())
