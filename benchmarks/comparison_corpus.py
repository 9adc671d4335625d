"""The comparison corpus end to end: generate every case, ask the tools at their defaults, and write the confusion
table (case -> expected -> reported -> match) into ``docs/precision-comparison.md``.

The corpus (``tests/corpus/``) holds noise-only pairs that must read clean and port bugs planted in real
architectures (a ResNet-style CNN, a transformer encoder, a Conv1d + LSTM audio net) written in PyTorch and
MindSpore, with the replay verdict (own error or inherited) of each named layer; the same run is what
``tests/compare/test_comparison_corpus.py`` asserts case by case. This script writes the table between the markers
``<!-- corpus-table:start -->`` and ``<!-- corpus-table:end -->`` (appending a section "The corpus" when they are
absent), prints it with the time the corpus took (wall clock and the CPU time of its processes), and with
``--errors FILE`` writes the normwise relative error ``||a - b|| / ||b||`` of every forward record of a few
informative cases (what attribution rules are judged against).

Run: ``.venv/bin/python benchmarks/comparison_corpus.py [--root DIR] [--no-doc] [--errors FILE] [--case NAME ...]``.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

from corpus.cases import CASES, CASES_BY_NAME  # noqa: E402
from corpus.report import forward_errors, report, summary, table  # noqa: E402
from corpus.runner import generate  # noqa: E402

DOC = ROOT / "docs" / "precision-comparison.md"
START, END = "<!-- corpus-table:start -->", "<!-- corpus-table:end -->"
ERROR_CASES = ("cnn_port", "transformer_port", "audio_port", "cnn_float64", "transformer_float64", "audio_float64",
               "cnn_batchnorm_eps", "transformer_layernorm_eps", "transformer_gelu_tanh", "audio_wrong_activation",
               "cnn_bfloat16", "transformer_bfloat16")
SECTION = f"""
## The corpus

`tests/corpus/` holds the cases every attribution rule is judged on, so that no threshold is tuned to one case:
three real architectures written in PyTorch and in MindSpore (a ResNet-style CNN with BatchNorm and residual blocks;
a transformer encoder with attention built from q/k/v/o projections, an `nn.Softmax` cell, LayerNorm and a GELU
feed-forward; an audio/sequence net with a Conv1d + BatchNorm1d front end, a bidirectional LSTM with `batch_first`
whose sequence length equals the batch size, and a Dense head), deterministic data, PyTorch's initial weights
converted with `convert_torch_state`. Noise-only pairs (a correct port, float32 against float64, one thread against
two, PyNative against GRAPH_MODE, a port whose attribute names differ) must read clean; each planted bug must be
named at the right layer by compare-layers, at the right step by compare-loss and, for weight mistakes, at the right
parameters by compare-weights, all at their default options. A is the run under test, B the reference; the cases
and what each must answer are in `tests/corpus/cases.py`.

The **replay** columns say, for the layer compare-layers names, whether the difference is the layer's **own** or
**inherited** from its input, as the case's plant implies: a bug inside a layer (an epsilon, an activation, a
weight, a padding) is its own; the attention case scales the scores in code before the softmax cell, so the
softmax's difference is inherited. Every side records its layers' inputs (`record_inputs=True`), and the first
verdict is `compare_layers(A, B, replay=True)` comparing the named layer's recorded inputs ("inputs": their
`|a-b|/|b|`, "output": the layer's). Where A is a MindSpore port and B PyTorch, the port's layer is also run for real
on PyTorch's captured inputs (`compare_layers(A, B, replay_a=port)`, in the MindSpore process once the PyTorch
capture exists, with the weights the port held at the captured pass): "replayed" gives its verdict and its error
against PyTorch's output on the same inputs -- about the observed error for an own error, float32 noise for an
inherited one. `benchmarks/comparison_corpus.py` regenerates this table;
`tests/compare/test_comparison_corpus.py` asserts every row.

{START}
{END}
"""


def write_doc(block: str) -> None:
    text = DOC.read_text(encoding="utf-8")
    if START not in text or END not in text:
        text = text.rstrip("\n") + "\n" + SECTION
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    DOC.write_text(f"{head}{START}\n{block}\n{END}{tail}", encoding="utf-8")


def write_errors(path: Path, case_dirs: dict) -> None:
    lines = ["# ||a - b|| / ||b|| of every forward record (A's execution order), per case; A under test, B reference"]
    for name in ERROR_CASES:
        if name not in case_dirs:
            continue
        lines.append(f"\n## {name}: {CASES_BY_NAME[name].planted}")
        for layer, error in forward_errors(case_dirs[name]):
            lines.append(f"{layer:28s} {'shape differs' if error is None else format(error, '.3e')}")
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, help="where the corpus goes (default: a temporary directory, removed)")
    parser.add_argument("--no-doc", action="store_true", help="print the table only")
    parser.add_argument("--errors", type=Path, help="write the per-record normwise errors of a few cases here")
    parser.add_argument("--case", action="append", choices=sorted(CASES_BY_NAME), help="only these cases")
    args = parser.parse_args(argv)
    cases = [CASES_BY_NAME[name] for name in args.case] if args.case else list(CASES)
    root = args.root or Path(tempfile.mkdtemp(prefix="comparison_corpus_"))
    try:
        generated = generate(root, cases)
        started, cpu_started = time.perf_counter(), time.process_time()
        rows = [report(generated["cases"][case.name]) for case in cases]
        report_s, report_cpu = time.perf_counter() - started, time.process_time() - cpu_started
        failed = [f"{key}: {status.get('error')}" for key, status in generated["sides"].items()
                  if status.get("status") != "ok"]
        per_process = ", ".join(f"{name} {cpu:.0f} s" for name, cpu in generated["process_cpu_s"].items())
        timing = (f"Generated in {generated['wall_s']:.0f} s wall clock ({generated['cpu_s']:.0f} s CPU in its "
                  f"processes: {per_process}), reported in {report_s:.1f} s ({report_cpu:.1f} s CPU); "
                  f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, {platform.machine()}, "
                  f"{time.strftime('%Y-%m-%d')}.")
        block = "\n".join([table(rows), "", f"{summary(rows)}. {timing}"]
                          + ([""] + [f"Side failed: {line}" for line in failed] if failed else []))
        print(block)
        for row in rows:
            if row["details"]:
                print(f"{row['name']}: " + "; ".join(f"{k}: {v}" for k, v in row["details"].items()))
        if args.errors:
            write_errors(args.errors, generated["cases"])
            print(f"per-record errors: {args.errors}")
        if not args.no_doc and not args.case:
            write_doc(block)
            print(f"table written to {DOC.relative_to(ROOT)}")
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
