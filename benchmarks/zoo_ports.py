"""The zoo: third-party ports (mindcv 0.3.0) against timm 1.0.31 / torchvision 0.28.0, every case through the port
check at its default options, and the confusion table (case -> expected -> reported -> right, the share right)
written into ``docs/precision-comparison.md`` beside the corpus table.

The cases (``tests/zoo/``): per architecture the port aligned with its reference (a noise-only pair: must exit 0),
as published (its real differences, read from both sources with file:line in ``tests/zoo/differences.py``, must be
named), aligned but for one difference, and bugs planted in the aligned port (``tests/zoo/plants.py``). One process
per architecture. ``tests/compare/test_zoo_ports.py`` runs a handful of them in CI.

Run: ``.venv/bin/python benchmarks/zoo_ports.py [--arch NAME ...] [--case NAME ...] [--heavy] [--no-doc]
[--json FILE]`` (``--heavy`` adds VGG-11 at 224x224: minutes per case; a run restricted by ``--arch`` or ``--case``
does not write the doc).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT), str(ROOT / "benchmarks")]

from perf_doc import Section  # noqa: E402
from zoo.architectures import ARCHITECTURES_BY_NAME  # noqa: E402
from zoo.cases import all_cases  # noqa: E402
from zoo.report import judge, summary, table  # noqa: E402
from zoo.runner import run  # noqa: E402

DOC = ROOT / "docs" / "precision-comparison.md"
INTRO = (
    "Ports nobody here wrote: each mindcv 0.3.0 model against the timm 1.0.31 or torchvision 0.28.0 model closest "
    "to it in source, random weights, batch 2 (64x64; the ViT and the Swin at 224x224), `compare_models` at its "
    "default options. Per architecture: the port **aligned** with its reference (every real difference set equal on "
    "the built models, by layer type: a noise-only pair that must exit 0), **as published** (each real difference, "
    "read from both sources -- `tests/zoo/differences.py` holds them with file:line -- must be named as a `SETTING` "
    "or as the first divergence, and nothing else), aligned **but for one** difference, and **planted** bugs in the "
    "aligned port (norm epsilon, activation type and form, padding, dropout left on, a transposed, swapped or "
    "flipped weight: named at their module with the finding's kind and the replay's verdict). Weights are paired "
    "by the check itself: no mapping file. VGG-11 (mindcv's head accepts only 224x224: 133M parameters, minutes "
    "per case) runs with `--heavy` only. `benchmarks/zoo_ports.py` regenerates this section; "
    "`tests/compare/test_zoo_ports.py` runs a few cases in CI.")
JUDGING = (
    "A case is **right** when the text, JSON and HTML reports agree and: a noise-only pair exits 0; a port keeping "
    "real differences exits 1 with each difference named -- the first divergence at (or inside) one of its layers, "
    "one of its layers listed as diverging on its own after the first divergence (replayed on the reference's "
    "inputs), or a `SETTING` on every one of them -- and no setting, first divergence or later own divergence "
    "anywhere else; a planted bug is the "
    "first divergence at its layer with its kind (`layer`, `parameter` for a converter's weight mistake checked "
    "with `copy_weights=False`, `update` for BatchNorm momentum) and replay verdict (`own`; none for an update), "
    "with no setting on another layer. Reported `exit 2` is a `ConfigError` (the weights could not be paired).")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", action="append", choices=sorted(ARCHITECTURES_BY_NAME), help="only these")
    parser.add_argument("--case", action="append", help="only these cases (names as in the table)")
    parser.add_argument("--heavy", action="store_true", help="include VGG-11 (224x224, 133M parameters)")
    parser.add_argument("--no-doc", action="store_true", help="print the table only")
    parser.add_argument("--json", type=Path, help="also write every case's raw report here (JSON lines)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per architecture's process")
    args = parser.parse_args(argv)
    section = Section("zoo-ports", "The zoo: mindcv ports against timm and torchvision", argv=argv)
    cases = [case for case in all_cases(heavy=args.heavy or bool(args.arch and "vgg11" in args.arch))
             if (not args.arch or case.arch in args.arch) and (not args.case or case.name in args.case)]
    if not cases:
        parser.error("no case selected")
    out = args.json or Path(tempfile.mkdtemp(prefix="zoo_ports_")) / "zoo.jsonl"
    started, cpu = time.perf_counter(), os.times()
    results = run(cases, out, timeout=args.timeout)
    wall = time.perf_counter() - started
    children = os.times()
    child_cpu = (children.children_user - cpu.children_user) + (children.children_system - cpu.children_system)
    rows = [judge(case, result) for case, result in zip(cases, results)]
    section.add(INTRO, "", JUDGING, "", table(rows), "")
    section.say(summary(rows) + ".",
                f"{len(cases)} cases in {wall:.0f} s wall clock ({child_cpu:.0f} s CPU in the case processes).")
    print(f"raw reports: {out}")
    if not args.no_doc and not args.arch and not args.case:
        section.write(doc=DOC)
        print(f"table written to {DOC.relative_to(ROOT)}")
    else:
        print(table(rows))
    if args.json is None:
        print(json.dumps([r for r in results if r.get("exit") is None], indent=1)[:2000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
