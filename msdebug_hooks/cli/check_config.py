"""``msdebug check-config FILE``: validate an existing dump JSON as MindSpore would, before the job runs.

The rules are MindSpore 2.10's parser's; 2.7.2, 2.8.0 and 2.9.0 judged the whole config corpus the same way
(``mindspore_versions``).
The verdict names the installed release, and warns when it is one the rules were not checked against."""
from __future__ import annotations

import argparse
import warnings

from msdebug_hooks.cli import EXIT_BAD_INPUT, EXIT_FOUND, EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check-config", help="validate a dump JSON (MINDSPORE_DUMP_CONFIG) the way MindSpore 2.10 reads it",
        description="Check a dump config file against every rule of MindSpore 2.10's dump JSON parser and report "
                    "all problems at once (MindSpore reports the first one, at the first graph compile). Silent "
                    "traps (ignored keys, iterations that match nothing, remapped values) are printed as warnings. "
                    "Exit 0 valid, 1 valid with warnings and --strict, 2 invalid.",
        epilog="example: msdebug check-config dump.json --target CPU")
    parser.add_argument("file", help="the dump JSON file")
    parser.add_argument("--target", default=None, choices=("CPU", "GPU", "Ascend"),
                        help="device the job runs on; without it, device-dependent rejections are warnings")
    parser.add_argument("--strict", action="store_true", help="exit 1 when there are warnings")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from msdebug_hooks.config.dump import DumpConfig, DumpConfigWarning
    from msdebug_hooks.errors import ConfigError, ConfigErrors

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DumpConfigWarning)  # printed below, one per line
        try:
            config = DumpConfig.load(args.file, target=args.target)
        except ConfigErrors as exc:
            for error in exc.errors:
                print(f"{args.file}: error: {error}")
            print(f"{args.file}: invalid ({len(exc.errors)} errors)")
            return EXIT_BAD_INPUT
        except ConfigError as exc:
            print(f"{args.file}: error: {exc}")
            print(f"{args.file}: invalid")
            return EXIT_BAD_INPUT
    from msdebug_hooks import mindspore_versions

    notes = list(config.warnings)
    unchecked = mindspore_versions.dump_parser_note()
    if unchecked:
        notes.append(unchecked)
    try:
        config.dump_dir()
    except ConfigError as exc:
        notes.append(f"{exc} -- MindSpore fails unless the job's environment sets it")
    for note in notes:
        print(f"{args.file}: warning: {note}")
    where = f"on {args.target}" if args.target else "on CPU, GPU and Ascend (use --target for device rules)"
    print(f"{args.file}: valid for MindSpore {mindspore_versions.installed_text()} {where}"
          + (f", {len(notes)} warning(s)" if notes else ""))
    return EXIT_FOUND if notes and args.strict else EXIT_OK
