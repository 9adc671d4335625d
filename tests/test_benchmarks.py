"""The comparison benchmarks still run (fast lane: no MindSpore, no PyTorch).

``compare_throughput.py --quick`` generates a small pair of layer captures and of sync dumps, times both commands
against a plain read and must name the planted record in each; it deletes what it generated and leaves
``docs/performance.md`` alone. The recorder and replay benchmarks need MindSpore and PyTorch for anything past their
arguments, so only their argument parsing runs here. No timing is asserted.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
PERFORMANCE = ROOT / "docs" / "performance.md"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_benchmarks_parse_and_the_quick_comparison_finds_the_planted_records(tmp_path):
    for script in ("layer_recorder_overhead.py", "replay_cost.py"):
        proc = _run(str(BENCHMARKS / script), "--help")
        assert proc.returncode == 0, proc.stderr
        assert "--quick" in proc.stdout and "--no-doc" in proc.stdout

    doc_before = PERFORMANCE.read_text(encoding="utf-8") if PERFORMANCE.exists() else None
    proc = _run(str(BENCHMARKS / "compare_throughput.py"), "--quick", "--parts", "layers", "dumps",
                "--dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "x" in out and "of the plain read" in out
    verdicts = [line for line in out.splitlines() if "(planted " in line]
    assert len(verdicts) == 2 and all(line.endswith(": right") for line in verdicts), out
    assert list(tmp_path.iterdir()) == []          # everything generated is deleted
    assert (PERFORMANCE.read_text(encoding="utf-8") if PERFORMANCE.exists() else None) == doc_before
