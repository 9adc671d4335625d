"""``msdebug compare-loss A B``: align two runs' losses by step and name the first step where they part.

A and B are ``LossRecorder``/``LossWriter`` records (``.jsonl``, or a directory holding ``loss_rank_<r>.jsonl``), CSV
files with ``step`` and ``loss`` columns, or training logs read with ``--pattern``. B is the reference: relative
errors are ``|a - b| / |b|``. A step parts when ``|a - b| > atol + rtol * |b|``; MindSpore's docs call about 1e-3
relative difference between a script and its reference normal. Step 1 (the runs' first step, 0 or 1) ran the same
weights on the same batch: a pure forward comparison, whose float32 noise is at most about 1e-6 relative, so it parts
beyond --forward-rtol (default 1e-6) and is then read as a forward-pass difference, even below --rtol. Files that start
later (a resumed run) are judged by --rtol on every step. Mixed precision against float32 parts at step 1 by design:
raise --forward-rtol (e.g. 1e-2 for bfloat16) once two float32 runs agree.

Exit 0: the runs agree; 1: they part at some step; 2: bad input (missing file, malformed line, different lengths,
non-finite loss without --allow-nonfinite, matplotlib missing for --plot).

Example::

    msdebug compare-loss runs/mindspore runs/torch --rtol 1e-3 --plot loss.png
    msdebug compare-loss train_a.log train_b.log --pattern 'step: (?P<step>\\d+).*loss: (?P<loss>[-\\d.e]+)'
"""
from __future__ import annotations

import argparse
import json
import sys

from msdebug_hooks.errors import ConfigError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare-loss", help="compare two runs' losses step by step; name the first step where they part",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_a", metavar="A", help="the run under test (record, directory, CSV or log)")
    parser.add_argument("run_b", metavar="B", help="the reference run")
    parser.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance (default 1e-3)")
    parser.add_argument("--forward-rtol", type=float, default=1e-6,
                        help="relative tolerance of step 1, the pure forward comparison (default 1e-6: the top of "
                             "float32 forward noise)")
    parser.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (default 0)")
    parser.add_argument("--pattern", metavar="REGEX",
                        help="read A and B as text logs: a regex with named groups (?P<step>...) and (?P<loss>...)")
    parser.add_argument("--rank", type=int, default=0, help="rank whose record to read from a directory (default 0)")
    parser.add_argument("--common-steps", action="store_true",
                        help="compare the steps both runs have instead of failing on different lengths")
    parser.add_argument("--allow-nonfinite", action="store_true",
                        help="accept NaN/Inf losses (a step where only one run is finite parts there)")
    parser.add_argument("--plot", metavar="PNG", help="draw both curves and their relative error into this PNG")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def run(args: argparse.Namespace) -> int:
    from msdebug_hooks.compare.loss import LossFileError, read_losses
    from msdebug_hooks.compare.loss_diff import compare_losses
    from msdebug_hooks.compare.loss_plot import PlotUnavailable, plot_losses

    try:
        series_a = read_losses(args.run_a, args.pattern, rank=args.rank, allow_nonfinite=args.allow_nonfinite)
        series_b = read_losses(args.run_b, args.pattern, rank=args.rank, allow_nonfinite=args.allow_nonfinite)
        result = compare_losses(series_a, series_b, rtol=args.rtol, atol=args.atol, forward_rtol=args.forward_rtol,
                                common_steps=args.common_steps)
        plotted = plot_losses(result, args.plot, label_a=args.run_a, label_b=args.run_b) if args.plot else None
    except (ConfigError, LossFileError, PlotUnavailable) as exc:
        print(f"msdebug compare-loss: error: {exc}", file=sys.stderr)
        return 2
    first = result.first_parted
    if args.json:
        out = result.as_dict()
        out["plot"] = str(plotted) if plotted else None
        print(json.dumps(out, indent=1))
        return 1 if first else 0
    for series in (series_a, series_b):
        if series.duplicates:
            print(f"note: {series.path} logs {series.duplicates} step(s) more than once; the last record is used")
    print(f"compared {len(result.steps)} steps ({result.steps[0].step}..{result.steps[-1].step}) of "
          f"{args.run_a} against the reference {args.run_b}, rtol {result.rtol:g}, atol {result.atol:g}")
    forward = result.forward_summary()
    if forward:
        verdict = "parts" if result.forward_check.parted else "agrees"
        print(f"forward check (step {result.forward_step}: same weights, same batch): {forward}; correct float32 "
              f"ports measure 1e-7..5e-7; forward-rtol {result.forward_rtol:g}: {verdict}")
    else:
        print(f"no forward check: the steps compared start at {result.steps[0].step}, not at both runs' first step "
              f"(0 or 1), so every step is judged by rtol")
    print(f"max abs error {_fmt(result.max_abs_error)}, mean abs error {_fmt(result.mean_abs_error)}, "
          f"max rel error {_fmt(result.max_rel_error)}, mean rel error {_fmt(result.mean_rel_error)}")
    if first:
        print(f"first step beyond tolerance: {first.step} (loss {_fmt(first.loss_a)} vs {_fmt(first.loss_b)}, "
              f"abs {_fmt(first.abs_error)}, rel {_fmt(first.rel_error)}); {result.parted_count} step(s) beyond")
    else:
        print("no step beyond tolerance")
    print(f"reading: {result.reading()}")
    if plotted:
        print(f"plot: {plotted}")
    return 1 if first else 0
