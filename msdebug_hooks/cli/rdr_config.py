"""``msdebug rdr-config``: Running Data Recorder settings as an env-config JSON file and/or ``export`` lines.

MindSpore 2.10 ignores RDR; the command says so on stderr (by installed version) but still writes what was asked,
for jobs run with an older MindSpore.
"""
from __future__ import annotations

import argparse
import sys

from msdebug_hooks.cli import EXIT_OK
from msdebug_hooks.cli._paths import output_file
from msdebug_hooks.cli._warnings import warnings_to_stderr


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "rdr-config", help="write RDR settings ({\"rdr\": ...} file and/or MS_RDR_* exports); warns on MindSpore 2.10",
        description="Build Running Data Recorder settings and print 'export MS_RDR_*=...' lines a shell can eval; "
                    "with --output also write the env-config JSON for set_context(env_config_path=...). When both "
                    "are used the file wins, key by key. MindSpore 2.10 does not read RDR at all (a warning says so). "
                    "Exit 0 ok, 2 bad input.",
        epilog='example: eval "$(msdebug rdr-config --path /data/rdr --mode 2)"')
    parser.add_argument("--path", default=None, help="absolute root directory; data in <path>/rank_<id>/rdr/")
    parser.add_argument("--mode", type=int, default=1,
                        help="1 (default): export only when training fails; 2: also when it ends normally")
    parser.add_argument("--disable", action="store_true", help="write enable=false / MS_RDR_ENABLE=0")
    parser.add_argument("--mem-reuse", choices=("on", "off"), default=None,
                        help='also put {"sys": {"mem_reuse": ...}} into the --output file (the only section '
                             "MindSpore 2.10 reads from it)")
    parser.add_argument("--output", default=None, type=output_file, metavar="FILE",
                        help="write the env-config JSON here (atomically, mode 0600)")
    parser.add_argument("--no-exports", action="store_true", help="do not print the export lines")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from msdebug_hooks.config._common import export_lines
    from msdebug_hooks.config.rdr import MemReuseConfig, RDRConfig, warn_if_rdr_unsupported, write_env_config
    from msdebug_hooks.errors import ConfigError

    if args.mem_reuse is not None and args.output is None:
        raise ConfigError("--mem-reuse", args.mem_reuse, "only together with --output FILE (it has no variable form)")
    with warnings_to_stderr("rdr-config"):
        config = RDRConfig(enable=not args.disable, mode=args.mode, path=args.path)
        if args.output:
            sections = [config] + ([MemReuseConfig(args.mem_reuse == "on")] if args.mem_reuse else [])
            target = write_env_config(args.output, *sections)
            print(f"msdebug rdr-config: wrote {target} (pass it to set_context(env_config_path=...))",
                  file=sys.stderr)
        else:
            warn_if_rdr_unsupported()
    if not args.no_exports:
        print(export_lines(config.env()), end="")
    return EXIT_OK
