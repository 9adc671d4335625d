"""``msdebug bisect A B``: run two MindSpore trainings and name the step, the operator and the source line where
they part.

A is the run under test, B the reference: each a command as you would type it ("python train.py --lr 0.1"), run
unmodified. Both train with their loss recorded from outside; the first step whose loss parts (step 1 is read as a
pure forward comparison) is dumped in both runs with the step before, and the dumps are compared operator by
operator.

Tolerance (two runs of one framework): when step 1 is bit-equal, every step must be, and the dumps are compared bit
for bit; when it is not, step 1 is dumped and its operators judged against float32 noise (none beyond it: the runs
are not reproducible, and the later steps are judged by rtol 1e-3). --rtol/--forward-rtol/--atol set them instead.
Operators one run computes instead of the other's (ReLU where B has GeLU) are paired by their place in the graph.

The answer: the step, forward pass / backward pass / update, the cell, the operator, the source line in both runs,
and whether the operator computes differently itself, replaces the other run's operators, or was fed a differing
input (a weight is named as the root). Multi-rank jobs (msrun) are compared rank by rank.

Runs, logs and dumps go to --workdir; runs that ended well there are reused by the next call (resume after a crash
or an interruption), and what the command created is removed after an answer unless --keep.

Exit 0: the runs agree on every step; 1: they part (the answer says where); 2: bad input, a run that crashed or
recorded nothing (the error names the run and its log), or a dump that could not be made or read.

Examples::

    msdebug bisect "python train_v2.py" "python train_v1.py"
    msdebug bisect "python train.py" "python train.py" --env-a USE_FUSED_NORM=1 --steps 20
    msdebug bisect "msrun --worker_num=2 --local_worker_num=2 --join=True train.py" "..." --cwd-a new/ --cwd-b old/
"""
from __future__ import annotations

import argparse
import json
import sys

from msdebug_hooks.errors import ConfigError, DumpError

PROG = "msdebug bisect"
#: the API's argument names as this command spells them, for its error lines
_OPTIONS = {"steps": "--steps", "max_dump_gb": "--max-dump-gb", "timeout": "--timeout", "dump_wait": "--dump-wait",
            "rtol": "--rtol", "forward_rtol": "--forward-rtol", "atol": "--atol", "jobs": "--jobs",
            "workdir": "--workdir", "command A": "A", "command B": "B"}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "bisect", help="run two trainings; name the step, operator and source line where they part",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command_a", metavar="A", help="the run under test: a command line, in quotes")
    parser.add_argument("command_b", metavar="B", help="the reference run: a command line, in quotes")
    parser.add_argument("--env", action="append", default=[], metavar="K=V",
                        help="a variable for both runs (repeatable; K= sets it empty, K unsets it)")
    parser.add_argument("--env-a", action="append", default=[], metavar="K=V", help="a variable for run A only")
    parser.add_argument("--env-b", action="append", default=[], metavar="K=V", help="a variable for run B only")
    parser.add_argument("--cwd", metavar="DIR", help="working directory of both runs (default: this one)")
    parser.add_argument("--cwd-a", metavar="DIR", help="working directory of run A (e.g. a checkout of another "
                                                       "code version)")
    parser.add_argument("--cwd-b", metavar="DIR", help="working directory of run B")
    parser.add_argument("--shell", action="store_true", help="run A and B with /bin/sh -c (pipes, &&, cd ...)")
    parser.add_argument("--workdir", metavar="DIR", help="runs, logs and dumps (default: ./msdebug-bisect); runs "
                                                         "done there before are reused")
    parser.add_argument("--steps", type=int, metavar="N", help="stop both runs after N steps (default: the whole "
                                                               "script)")
    parser.add_argument("--rtol", type=float, default=None,
                        help="loss tolerance after step 1 (default: the same-framework rule below; set alone: "
                             "--forward-rtol 1e-6, --atol 0)")
    parser.add_argument("--forward-rtol", type=float, default=None,
                        help="loss tolerance of step 1, a pure forward comparison (set alone: --rtol 1e-3)")
    parser.add_argument("--atol", type=float, default=None, help="absolute loss tolerance (set alone: --rtol 1e-3, "
                                                                 "--forward-rtol 1e-6)")
    parser.add_argument("--max-dump-gb", type=float, default=None,
                        help="the most both dumps may take together, estimated from the first dumped step "
                             "(default 10)")
    parser.add_argument("--timeout", type=float, metavar="S", help="seconds one run may take (default: no limit)")
    parser.add_argument("--jobs", type=int, default=1, choices=(1, 2), help="2: run A and B side by side")
    parser.add_argument("--dump-wait", type=float, default=None, metavar="S",
                        help="seconds to wait for a dump to be complete after its run ended (default 60)")
    parser.add_argument("--keep", action="store_true", help="keep the runs, logs and dumps after the answer")
    parser.add_argument("--fresh", action="store_true", help="rerun everything, reusing nothing")
    parser.add_argument("--json", metavar="FILE", help="also write the result to this JSON file")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.set_defaults(func=run)


def _variables(items: list[str], option: str) -> dict:
    """``K=V`` sets, ``K=`` sets empty, ``K`` unsets (``None``)."""
    out: dict = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise ConfigError(option, item, "NAME=VALUE with a variable name of letters, digits and _ (NAME alone "
                                            "unsets it)")
        out[name] = value if sep else None
    return out


def run(args: argparse.Namespace) -> int:
    from msdebug_hooks._files import atomic_write_text
    from msdebug_hooks.compare import bisection
    from msdebug_hooks.compare.bisect_runs import BisectError, RunSpec
    from msdebug_hooks.compare.loss import LossFileError

    def say(line: str) -> None:
        if not args.quiet:
            print(f"{PROG}: {line}", file=sys.stderr, flush=True)

    try:
        both = _variables(args.env, "--env")
        spec_a = RunSpec("A", args.command_a, args.cwd_a or args.cwd, {**both, **_variables(args.env_a, "--env-a")},
                         args.shell)
        spec_b = RunSpec("B", args.command_b, args.cwd_b or args.cwd, {**both, **_variables(args.env_b, "--env-b")},
                         args.shell)
        options = {name: value for name, value in (("rtol", args.rtol), ("forward_rtol", args.forward_rtol),
                                                   ("atol", args.atol), ("max_dump_gb", args.max_dump_gb),
                                                   ("dump_wait", args.dump_wait)) if value is not None}
        result = bisection.bisect(spec_a, spec_b, args.workdir, steps=args.steps, timeout=args.timeout,
                                  jobs=args.jobs, keep=args.keep, fresh=args.fresh, progress=say, **options)
    except ConfigError as exc:
        option = _OPTIONS.get(exc.field)
        # the API's None is an option left out here: not something to type
        message = str(ConfigError(option, exc.value, exc.allowed.replace(" (or None)", "")) if option else exc)
        print(f"{PROG}: error: {message}", file=sys.stderr)
        _kept(args)
        return 2
    except DumpError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        _kept(args)
        return 2
    except (BisectError, LossFileError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        _kept(args)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; the runs in progress were stopped", file=sys.stderr)
        _kept(args)
        return 130
    for line in result.lines():
        print(line)
    if args.json:
        atomic_write_text(args.json, json.dumps(result.as_dict(), indent=1, default=str) + "\n", mode=0o644)
        print(f"result: {args.json}")
    return result.exit_code


def _kept(args: argparse.Namespace) -> None:
    from pathlib import Path

    from msdebug_hooks.compare.bisection import DEFAULT_WORKDIR

    workdir = Path(args.workdir or DEFAULT_WORKDIR)
    if workdir.is_dir() and any(workdir.iterdir()):
        print(f"{PROG}: kept {workdir} (logs; runs that ended well are reused when you rerun the same command)",
              file=sys.stderr)
