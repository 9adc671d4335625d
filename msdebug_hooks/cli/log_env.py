"""``msdebug log-env``: MindSpore's logging variables as ``export`` lines for ``eval``, validated (see LogConfig).

    eval "$(msdebug log-env --level INFO --submodule PARSER=WARNING --submodule ANALYZER=WARNING)"
"""
from __future__ import annotations

import argparse
import json
from typing import Dict, List

from msdebug_hooks.cli import EXIT_OK
from msdebug_hooks.cli._paths import output_file
from msdebug_hooks.cli._warnings import warnings_to_stderr
from msdebug_hooks.errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "log-env", help="print validated GLOG_* / MS_SUBMODULE_LOG_v / logger_* exports for eval",
        description="Build MindSpore's logging settings, check them (levels, the 39 submodule names of MindSpore 2.10, "
                    "log directory, sizes) and print 'export NAME=value' lines a shell can eval before starting "
                    "training. Exit 0 ok, 2 bad input (the message names the setting, the value and what is allowed).",
        epilog='example: eval "$(msdebug log-env --level INFO --submodule PARSER=WARNING)"')
    parser.add_argument("--level", default="WARNING",
                        help="GLOG_v: DEBUG, INFO, WARNING (default), ERROR, CRITICAL or 0-4")
    parser.add_argument("--submodule", action="append", default=[], metavar="NAME=LEVEL",
                        help="MS_SUBMODULE_LOG_v entry overriding --level for one C++ submodule, e.g. PARSER=WARNING "
                             "(repeatable)")
    parser.add_argument("--log-dir", default=None,
                        help="log to files under this absolute directory (GLOG_logtostderr=0, GLOG_log_dir); files "
                             "land in <dir>/rank_<id>/logs/. Without it MindSpore logs to the screen")
    parser.add_argument("--stderr-threshold", default=None,
                        help="GLOG_stderrthreshold: level also shown on the screen while logging to files")
    parser.add_argument("--max-log-size-mb", type=_int, default=None, help="GLOG_max_log_size: MB per C++ log file")
    parser.add_argument("--log-max", type=_int, default=None,
                        help="GLOG_log_max, the name some MindSpore docs use; MindSpore reads GLOG_max_log_size, "
                             "so the value is exported under that name, with a warning")
    parser.add_argument("--logger-max-bytes", type=_int, default=None,
                        help="logger_maxBytes: bytes per Python log file")
    parser.add_argument("--logger-backup-count", type=_int, default=None,
                        help="logger_backupCount: rotated Python log files kept")
    parser.add_argument("--replace", action="store_true",
                        help="also print 'unset' lines for the logging variables this configuration leaves out, so "
                             "nothing set earlier still applies")
    parser.add_argument("--output", default=None, type=output_file, metavar="FILE",
                        help="also write the lines to FILE (atomically, mode 0600) for 'source FILE'")
    parser.add_argument("--json", action="store_true", help="print the variables as a JSON object instead")
    parser.set_defaults(func=_run)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def parse_submodules(items: List[str]) -> Dict[str, str]:
    """``["PARSER=WARNING"]`` -> ``{"PARSER": "WARNING"}`` (LogConfig checks names and levels)."""
    levels: Dict[str, str] = {}
    for item in items:
        name, sep, level = item.partition("=")
        if not sep or not name.strip() or not level.strip():
            raise ConfigError("--submodule", item, "NAME=LEVEL, e.g. PARSER=WARNING or PARSER=2")
        levels[name.strip()] = level.strip()
    return levels


def _run(args: argparse.Namespace) -> int:
    from msdebug_hooks._files import atomic_write_text
    from msdebug_hooks.config._common import export_lines
    from msdebug_hooks.config.log import LOG_MAX_ALIAS, LOG_VARIABLES, LogConfig

    with warnings_to_stderr("log-env"):
        config = LogConfig(args.level, parse_submodules(args.submodule), to_stderr=args.log_dir is None,
                           log_dir=args.log_dir, stderr_threshold=args.stderr_threshold,
                           max_log_size_mb=args.max_log_size_mb, log_max=args.log_max,
                           logger_max_bytes=args.logger_max_bytes, logger_backup_count=args.logger_backup_count)
    env = config.env()
    unset = [n for n in (*LOG_VARIABLES, LOG_MAX_ALIAS) if n not in env] if args.replace else []
    text = export_lines(env, unset)
    if args.output:
        atomic_write_text(args.output, text)
    if args.json:
        print(json.dumps(env, indent=2))
    else:
        print(text, end="")
    return EXIT_OK
