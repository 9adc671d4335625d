"""The benchmarks still run, and every figure they measure has its place (fast lane: no MindSpore, no PyTorch).

Every script in ``benchmarks/`` is either a benchmark registered here with the sections of ``docs/performance.md``
it writes, or a helper the benchmarks share: a new benchmark must say where its figures go. Each benchmark parses
``--help`` and offers ``--no-doc`` (a full run that leaves the page alone), and the page holds a section, with the
command that wrote it, for each. ``compare_throughput.py --quick`` generates a small pair of layer captures and of
sync dumps, times both commands against a plain read and must name the planted record in each; it deletes what it
generated and leaves ``docs/performance.md`` alone. The other benchmarks need MindSpore or PyTorch for anything
past their arguments, so only their argument parsing runs here. No timing is asserted.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
PERFORMANCE = ROOT / "docs" / "performance.md"
#: benchmark -> the sections of docs/performance.md it writes (between ``<!-- bench:NAME:start/end -->``)
SECTIONS = {
    "callback_overhead.py": ["callback-overhead"],
    "compare_throughput.py": ["compare-throughput"],
    "comparison_corpus.py": [],     # its confusion table goes into docs/precision-comparison.md
    "debugger_overhead.py": ["debugger-overhead", "debugger-dump-source", "debugger-server"],
    "distributed_overhead.py": ["distributed-overhead"],
    "dump_check.py": ["dump-check"],
    "first_nan_cost.py": ["first-nan"],
    "import_time.py": ["import-time"],
    "layer_recorder_overhead.py": ["layer-recorder-overhead"],
    "replay_cost.py": ["replay-cost"],
    "stats_throughput.py": ["stats-throughput"],
    "zoo_ports.py": [],             # its confusion table goes into docs/precision-comparison.md
}
#: what the benchmarks share (networks, generated data, the page's writer): no figures of their own
HELPERS = {"bench_nets.py", "perf_doc.py", "small_transformer.py", "synthetic_pair.py"}


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_every_script_is_a_registered_benchmark_or_a_helper():
    assert {path.name for path in BENCHMARKS.glob("*.py")} == set(SECTIONS) | HELPERS


@pytest.mark.parametrize("script", sorted(SECTIONS))
def test_each_benchmark_parses_help_and_offers_no_doc(script):
    proc = _run(str(BENCHMARKS / script), "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--no-doc" in proc.stdout


@pytest.mark.parametrize("script", sorted(script for script, names in SECTIONS.items() if names))
def test_the_performance_page_has_each_benchmarks_sections(script):
    text = PERFORMANCE.read_text(encoding="utf-8")
    for name in SECTIONS[script]:
        start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
        assert start in text and end in text, f"docs/performance.md has no section {name!r}: run {script}"
        block = text.split(start, 1)[1].split(end, 1)[0]
        assert block.lstrip().startswith("## ")                               # a heading to link to
        assert f"`.venv/bin/python benchmarks/{script}" in block              # the command that wrote it
        assert "load average" in block and "UTC" in block                     # the machine's state and the date


def test_a_section_is_replaced_in_place_and_a_smoke_run_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import perf_doc

    doc = tmp_path / "performance.md"
    monkeypatch.setattr(perf_doc, "DOC", doc)
    for figure in ("7.25", "9.75"):
        section = perf_doc.Section("demo", "Demo", ["--rounds", "2"], script=str(BENCHMARKS / "demo.py"))
        section.table(["variant", "x plain"], [("attached", f"x{figure}")])
        section.say(f"verdict: x{figure}")
        section.publish(skip=False)
    section = perf_doc.Section("demo", "Demo", ["--quick"], script=str(BENCHMARKS / "demo.py"))
    section.add("a smoke run's figure")
    section.publish(skip=True)
    text = doc.read_text(encoding="utf-8")
    assert text.count("<!-- bench:demo:start -->") == 1 and text.count("## Demo") == 1
    assert "x9.75" in text and "x7.25" not in text and "a smoke run's figure" not in text
    assert "`.venv/bin/python benchmarks/demo.py --rounds 2`" in text
    assert "| attached | x9.75 |" in text and "- verdict: x9.75" in text


def test_every_link_to_a_figure_reaches_a_section():
    headings = {re.sub(r"[^a-z0-9 -]", "", line[3:].strip().lower()).replace(" ", "-")
                for line in PERFORMANCE.read_text(encoding="utf-8").splitlines() if line.startswith("## ")}
    pages = [ROOT / "README.md", ROOT / "pyproject.toml", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "msdebug_hooks").rglob("*.py"))]
    for page in pages:
        for anchor in re.findall(r"performance\.md#([a-z0-9-]+)", page.read_text(encoding="utf-8")):
            assert anchor in headings, f"{page.name} links to docs/performance.md#{anchor}, which has no such section"


def test_the_corpus_table_has_its_place():
    text = (ROOT / "docs" / "precision-comparison.md").read_text(encoding="utf-8")
    assert "<!-- corpus-table:start -->" in text and "<!-- corpus-table:end -->" in text


def test_the_quick_comparison_finds_the_planted_records(tmp_path):
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
