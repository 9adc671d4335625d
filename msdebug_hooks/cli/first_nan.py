"""``msdebug first-nan SCRIPT [ARGS...]``: run a training and name the operator that made its first NaN/Inf.

The script runs unmodified, twice at most: once with a NaN/Inf check of each step's loss (the weights where no loss
is seen) to find the first non-finite step N, then again up to step N with steps N-1 and N looked at operator by
operator (a sync dump in GRAPH_MODE or under @jit, the script's own lines followed in PyNative mode). The answer:
the step, the operator (or "the data of step N"), its calling line and cell, its inputs' statistics and a hint.

Options go before SCRIPT; everything after it is the script's own arguments.

Exit 1: an origin was found; 0: no NaN/Inf in the steps run (their number is printed); 2: bad input, a run that
crashed (its log is named) or a dump that could not be made.

Examples::

    msdebug first-nan train.py --epochs 1
    msdebug first-nan --steps 200 --keep train.py
    msdebug first-nan --python "msrun --worker_num=2 --local_worker_num=2 --join=True" train.py
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys

from msdebug_hooks.errors import ConfigError, DumpError

PROG = "msdebug first-nan"
_OPTIONS = {"steps": "--steps", "max_dump_gb": "--max-dump-gb", "timeout": "--timeout", "workdir": "--workdir"}


def register(subparsers) -> None:
    parser = subparsers.add_parser("first-nan", help="name the operator, step and line behind a training's first "
                                                     "NaN/Inf", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("script", metavar="SCRIPT", help="the training script")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="its arguments")
    parser.add_argument("--steps", type=int, metavar="N", help="check at most N steps (default: the whole script)")
    parser.add_argument("--python", default=None, metavar="CMD",
                        help="what runs SCRIPT (default: this Python; e.g. an msrun command line)")
    parser.add_argument("--workdir", metavar="DIR", help="runs, logs and the dump (default: ./msdebug-first-nan)")
    parser.add_argument("--keep", action="store_true", help="keep the runs, logs and dump")
    parser.add_argument("--max-dump-gb", type=float, default=10.0, help="the most the rerun's dump may take "
                                                                        "(default 10)")
    parser.add_argument("--timeout", type=float, metavar="S", help="seconds one run may take")
    parser.add_argument("--json", metavar="FILE", help="also write the result to this JSON file")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from msdebug_hooks._files import atomic_write_text
    from msdebug_hooks.compare.bisect_runs import BisectError
    from msdebug_hooks.nan.runner import first_nan

    def say(line: str) -> None:
        if not args.quiet:
            print(f"{PROG}: {line}", file=sys.stderr, flush=True)

    launcher = shlex.split(args.python) if args.python else [sys.executable]
    command = launcher + [args.script] + list(args.args)
    try:
        result = first_nan(command, args.workdir, steps=args.steps, keep=args.keep, max_dump_gb=args.max_dump_gb,
                           timeout=args.timeout, progress=say)
    except ConfigError as exc:
        option = _OPTIONS.get(exc.field)
        print(f"{PROG}: error: {ConfigError(option, exc.value, exc.allowed) if option else exc}", file=sys.stderr)
        return 2
    except (BisectError, DumpError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        from pathlib import Path

        from msdebug_hooks.nan.runner import DEFAULT_WORKDIR

        workdir = Path(args.workdir or DEFAULT_WORKDIR)
        if workdir.is_dir():
            print(f"{PROG}: kept {workdir} (the runs' logs)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; the run in progress was stopped", file=sys.stderr)
        return 130
    for line in result.lines():
        print(line)
    if args.json:
        atomic_write_text(args.json, json.dumps(result.as_dict(), indent=1, default=str) + "\n", mode=0o644)
    return result.exit_code
