"""What the benchmarks share: the machine facts printed with every figure, and ``docs/performance.md``, the one
place measured figures live.

Each benchmark owns one section of ``docs/performance.md`` between ``<!-- bench:NAME:start -->`` and
``<!-- bench:NAME:end -->`` and rewrites it (heading included) at the end of a full run; ``--quick`` smoke runs and
``--no-doc`` leave the file alone. Other docs link to a section (``docs/performance.md#replay-cost``) instead of
copying its numbers, so a figure is never stale in one place and fresh in another.

The machine is usually shared: every section says the cores, the CPU, the memory and the load average when the run
started and ended, and the benchmarks print the 1-minute load average next to each figure. Compare the ratios of one
run (measured together, in interleaved rounds) rather than absolute times across runs.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Iterable, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "performance.md"
HEADER = """# Performance: what the tools cost, measured

Every figure of this project's documentation that comes from a benchmark lives here, written by the benchmark
itself (`benchmarks/*.py`, full runs; `--quick` smoke runs write nothing). Each section says the command, the date,
the machine and its load while the run lasted: the test machines are small and shared, so read the ratios measured
within one run (against the floor of the same work, in the same process) rather than absolute times. Rerun a
benchmark to refresh its section; do not edit between the markers by hand.
"""


def load() -> str:
    """The 1-, 5- and 15-minute load averages, e.g. ``1.93 2.10 2.25``."""
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:  # pragma: no cover - not on Linux/macOS
        return "n/a"


def load_1m() -> str:
    """The 1-minute load average, printed next to each figure."""
    return load().split()[0]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 2 ** 20:.0f} GiB"
    except OSError:
        pass
    return "n/a"


def machine(versions: Optional[dict] = None) -> str:
    """One line: cores (usable/online), CPU model, memory, Python and the given package versions."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    parts = [f"{usable} usable cores of {os.cpu_count()} ({_cpu_model()})", f"{_memory_gib()} memory",
             f"Python {platform.python_version()}"]
    parts += [f"{name} {version}" for name, version in (versions or {}).items()]
    return ", ".join(parts)


class Section:
    """A benchmark's section of ``docs/performance.md``: started when the run starts (date, load), written at the
    end with the lines the benchmark collected."""

    def __init__(self, name: str, title: str, argv: Optional[Sequence[str]] = None,
                 script: Optional[str] = None) -> None:
        """``argv``: the arguments given (default ``sys.argv[1:]``); ``script``: the benchmark's file when another
        benchmark runs it (default ``sys.argv[0]``)."""
        self.name = name
        self.title = title
        script = Path(script or sys.argv[0]).resolve()
        try:
            script_text = str(script.relative_to(ROOT))
        except ValueError:
            script_text = str(script)
        args = sys.argv[1:] if argv is None else list(argv)
        self.command = shlex.join([".venv/bin/python", script_text, *args])
        self.started = datetime.datetime.now(datetime.timezone.utc)
        self.load_start = load()
        self.lines: list[str] = []

    def add(self, *lines: str) -> None:
        """Markdown lines, as they are (a list ended by ``say`` gets the blank line it needs first)."""
        if lines and lines[0] and self.lines and self.lines[-1].startswith("- "):
            self.lines.append("")
        self.lines.extend(lines)

    def say(self, *lines: str) -> None:
        """Print each line as the benchmark always did and keep it as a list item of the section (verdicts,
        one-line results)."""
        for line in lines:
            print(line, flush=True)
        if self.lines and self.lines[-1] and not self.lines[-1].startswith("- "):
            self.lines.append("")
        self.lines.extend(f"- {line.strip()}" for line in lines)

    def table(self, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        """A markdown table."""
        if self.lines and self.lines[-1]:
            self.lines.append("")           # markdown needs a blank line before a table
        self.lines.append("| " + " | ".join(header) + " |")
        self.lines.append("|" + "---|" * len(header))
        self.lines.extend("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows)
        self.lines.append("")

    def render(self, versions: Optional[dict] = None) -> str:
        minutes = (datetime.datetime.now(datetime.timezone.utc) - self.started).total_seconds() / 60
        head = [f"## {self.title}", "",
                f"`{self.command}`, {self.started:%Y-%m-%d %H:%M} UTC, {minutes:.0f} min; {machine(versions)}; "
                f"load average (1/5/15 min) {self.load_start} at the start, {load()} at the end.", ""]
        return "\n".join(head + self.lines).rstrip("\n")

    def publish(self, skip: bool, versions: Optional[dict] = None) -> None:
        """Write the section at the end of a full run; ``skip`` (a ``--quick`` smoke run or ``--no-doc``) leaves the
        file alone."""
        if not skip:
            print(f"wrote {self.write(versions)}")

    def write(self, versions: Optional[dict] = None, doc: Optional[Path] = None) -> Path:
        """Replace (or append) this section in ``doc`` (default :data:`DOC`)."""
        doc = doc or DOC
        start, end = f"<!-- bench:{self.name}:start -->", f"<!-- bench:{self.name}:end -->"
        text = doc.read_text(encoding="utf-8") if doc.exists() else HEADER
        block = f"{start}\n{self.render(versions)}\n{end}"
        if start in text and end in text:
            head, rest = text.split(start, 1)
            text = head + block + rest.split(end, 1)[1]
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
        doc.write_text(text, encoding="utf-8")
        return doc


def add_doc_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-doc``, which every benchmark offers: run in full but leave ``docs/performance.md`` alone."""
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/performance.md")


def add_worker_arguments(parser, nets: Sequence[str], workers: dict) -> None:
    """The options every benchmark with one worker process per framework/mode shares."""
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads per framework (default 1: steady on a shared machine; 0: default)")
    parser.add_argument("--nets", nargs="+", choices=list(nets), default=list(nets))
    parser.add_argument("--workers", nargs="+", choices=list(workers), default=list(workers))
    add_doc_argument(parser)
    parser.add_argument("--worker", choices=list(workers), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)


def run_workers(script: str, args, workers: dict, worker_options: Sequence[str], describe, header: Sequence[str],
                doing: str = "") -> tuple:
    """Run ``script --worker W`` for each chosen worker (one process each, so each framework and mode starts fresh),
    print each row as it comes and return ``(rows, versions)``."""
    import json
    import subprocess
    import tempfile

    rows, versions = [], {}
    with tempfile.TemporaryDirectory(prefix="bench_") as tmp:
        for worker in args.workers:
            out = Path(tmp) / f"{worker}.json"
            print(f"{workers[worker]}: {doing}{', '.join(args.nets)} ...", flush=True)
            subprocess.run([sys.executable, script, "--worker", worker, "--out", str(out), *worker_options,
                            "--threads", str(args.threads), "--nets", *args.nets], check=True)
            result = json.loads(out.read_text())
            versions.update(result["versions"])
            for row in describe(result):
                rows.append(row)
                print("  " + "; ".join(f"{h}: {c}" for h, c in zip(header[1:], row[1:])).replace("**", "")
                      .replace("`", ""), flush=True)
    return rows, versions
