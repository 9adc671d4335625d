"""``msdebug dump-config``: build a validated MindSpore dump JSON; write it and/or print ``export`` lines.

Without ``--output`` or ``--print-env`` the JSON goes to stdout. ``--print-env`` writes the file (to ``--output`` or
the default location of ``DumpConfig.apply``) and prints ``export MINDSPORE_DUMP_CONFIG=...`` for ``eval``.
"""
from __future__ import annotations

import argparse
import os
import sys

from msdebug_hooks.cli import EXIT_OK
from msdebug_hooks.cli._paths import output_file
from msdebug_hooks.cli._warnings import warnings_to_stderr

# option -> help; each maps to the DumpConfig argument of the same name (dashes -> underscores)
_INT_OPTIONS = {
    "--dump-mode": "0 all kernels (default), 1 only --kernels (default when --kernels is given), 2 set_dump marks "
                   "(Ascend only)",
    "--input-output": "0 inputs and outputs (default), 1 inputs, 2 outputs",
    "--op-debug-mode": "0 normal, 3 overflow dump, 4 exception dump (1 and 2 become 3)",
    "--overflow-number": "with --op-debug-mode 3: how many overflows to dump (0: all)",
    "--initial-iteration": "first value of MindSpore's dump iteration counter",
    "--sample-mode": "0 whole tensors, 1 sliced dump",
    "--sample-num": "slice size when --sample-mode 1 (default 100)",
}
_STR_OPTIONS = {
    "--saved-data": "tensor (default), statistic or full (statistic/full: GPU and Ascend only)",
    "--file-format": "bin or npy (Ascend async dump only, i.e. with --no-e2e)",
    "--stat-calc-mode": "host (default) or device (Ascend only)",
    "--device-stat-precision-mode": "high (default) or low",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "dump-config", help="build a validated dump JSON (MINDSPORE_DUMP_CONFIG) and/or print export lines",
        description="Build a MindSpore 2.10 dump config, validated up front: every value MindSpore would reject is "
                    "reported (all at once, exit 2) and every silent trap is a warning on stderr. Prints the JSON, "
                    "or writes it (--output, atomically, mode 0600) and/or prints 'export MINDSPORE_DUMP_CONFIG=...' "
                    "lines a shell can eval (--print-env). Iterations are 0-based.",
        epilog='examples:\n'
               '  msdebug dump-config --path /data/dump --iteration "8|9" --output dump.json\n'
               '  eval "$(msdebug dump-config --path /data/dump --around-step 10 --print-env)"\n'
               '  msdebug dump-config --path /data/dump --kernels Conv2D "name-regex(Default/fc1.+)" --target CPU',
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", default="", help="dump directory (letters, digits, '-', '_', '/' only; a relative "
                        "one is made absolute from the current directory); none: $MS_DIAGNOSTIC_DATA_PATH/debug_dump, "
                        "refused when that is not set (nor --diagnostic-data-path)")
    parser.add_argument("--net-name", default="Net", help="directory name for the network (default Net)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--iteration", default=None,
                       help='0-based iterations: "all" (default), "3", "0|5-8|100-120" (no spaces)')
    which.add_argument("--around-step", type=int, default=None, metavar="N",
                       help="the failure was seen at 1-based cur_step_num N: dump iterations N-2 and N-1")
    parser.add_argument("--kernels", nargs="+", default=None, metavar="KERNEL",
                        help='full names ("Default/Conv-op12"), types ("conv") or "name-regex(<re>)"')
    parser.add_argument("--support-device", nargs="+", type=int, default=None, metavar="ID",
                        help="device ids (DEVICE_ID, not ranks) to dump on (default 0-7)")
    parser.add_argument("--statistic-category", nargs="+", default=None, metavar="NAME",
                        help='statistics for saved_data statistic/full, e.g. max min "nan count"')
    for option, text in _INT_OPTIONS.items():
        parser.add_argument(option, type=int, default=None, help=text)
    for option, text in _STR_OPTIONS.items():
        parser.add_argument(option, default=None, help=text)
    parser.add_argument("--no-e2e", dest="e2e", action="store_false",
                        help="leave out e2e_dump_settings (Ascend async dump; MindSpore 2.10 then warns for 3 s)")
    parser.add_argument("--enable", action=argparse.BooleanOptionalAction, default=True,
                        help="e2e_dump_settings.enable (default true; false: async dump on Ascend)")
    parser.add_argument("--trans-flag", action=argparse.BooleanOptionalAction, default=None,
                        help="e2e_dump_settings.trans_flag (save in NCHW; MindSpore default true)")
    parser.add_argument("--save-kernel-args", action=argparse.BooleanOptionalAction, default=None,
                        help="e2e_dump_settings.save_kernel_args")
    parser.add_argument("--target", default=None, choices=("CPU", "GPU", "Ascend"),
                        help="device the job runs on: turns on device-dependent rules (e.g. no statistic on CPU)")
    parser.add_argument("--output", "-o", default=None, type=output_file, metavar="FILE",
                        help="write the JSON here (its directory must exist)")
    parser.add_argument("--print-env", action="store_true",
                        help="write the file (--output or ~/.cache/msdebug-hooks/dump-configs/) and print export lines")
    parser.add_argument("--diagnostic-data-path", default=None, metavar="DIR",
                        help="with an empty --path: MS_DIAGNOSTIC_DATA_PATH to export (dump goes to DIR/debug_dump)")
    parser.set_defaults(func=_run)


def _fields(args: argparse.Namespace) -> dict:
    fields = {"path": args.path, "net_name": args.net_name, "e2e": args.e2e, "target": args.target}
    for option in list(_INT_OPTIONS) + list(_STR_OPTIONS) + ["--kernels", "--support-device",
                                                             "--statistic-category", "--trans-flag",
                                                             "--save-kernel-args"]:
        name = option[2:].replace("-", "_")
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    if args.e2e:
        fields["enable"] = args.enable
    else:
        fields["enable"] = None
    if args.kernels and args.dump_mode is None:
        fields["dump_mode"] = 1
    if args.iteration is not None:
        fields["iteration"] = args.iteration
    return fields


def _run(args: argparse.Namespace) -> int:
    from msdebug_hooks.config._common import export_lines
    from msdebug_hooks.config.dump import ENV_DIAGNOSTIC, DumpConfig
    from msdebug_hooks.errors import ConfigError

    with warnings_to_stderr("dump-config"):
        fields = _fields(args)
        if args.path and not os.path.isabs(os.path.expanduser(args.path)):
            # MindSpore wants an absolute path and runs elsewhere: the one meant is the one below this shell's cwd
            fields["path"] = os.path.abspath(os.path.expanduser(args.path))
            print(f"msdebug dump-config: --path {args.path!r} is relative; the config names {fields['path']}",
                  file=sys.stderr)
        config = (DumpConfig.around_step(args.around_step, **fields) if args.around_step is not None
                  else DumpConfig(**fields))
        if not config.path:     # MindSpore then dumps under $MS_DIAGNOSTIC_DATA_PATH; refused as MindSpore would
            source = dict(os.environ)
            if args.diagnostic_data_path is not None:
                source[ENV_DIAGNOSTIC] = args.diagnostic_data_path
            if not source.get(ENV_DIAGNOSTIC):
                raise ConfigError("--path", None, f"a dump directory, or {ENV_DIAGNOSTIC} (or --diagnostic-data-path) "
                                                  "set, under which MindSpore dumps into debug_dump")
            print(f"msdebug dump-config: no --path: MindSpore will dump into {config.dump_dir(source)} "
                  f"(${ENV_DIAGNOSTIC}/debug_dump; export {ENV_DIAGNOSTIC} where the training runs)", file=sys.stderr)
        if not args.output and not args.print_env:
            print(config.to_json(), end="")
            return EXIT_OK
        file = args.output if args.output else config.default_file()
        env = config.env(file, args.diagnostic_data_path)  # checks MS_DIAGNOSTIC_DATA_PATH before writing
        written = config.write(file)
        print(f"msdebug dump-config: wrote {written}", file=sys.stderr)
    if args.print_env:
        print(export_lines(env), end="")
    return EXIT_OK
