"""``msdebug run [--host H] [--port P] train.py [args...]``: run an unmodified training script under the debugger.

The explicit twin of ``ENABLE_MS_DEBUGGER=1 python train.py``, and the way to get it from an editable install
(which carries no ``.pth``): it sets the same variables, installs the same import hook (``autoattach``), checks the
settings before anything heavy starts, then runs the script as ``__main__`` with its own arguments, as ``python``
would (``sys.argv``, ``sys.path[0]`` = the script's directory). The script's exit status becomes ours.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from msdebug_hooks.cli._script import run_script


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run", help="run a training script with the MindInsight online debugger attached",
        description="Run SCRIPT as __main__ with ENABLE_MS_DEBUGGER=1 and the debugger attached to every "
                    "Model.train / Model.fit and hand-written training loop, without changing the script. Start "
                    "MindInsight first: mindinsight start --enable-debugger True --debugger-port PORT.")
    parser.add_argument("--host", default=None,
                        help="MindInsight's host (default: $MS_DEBUGGER_HOST, else localhost)")
    parser.add_argument("--port", default=None,
                        help="MindInsight's --debugger-port (default: $MS_DEBUGGER_PORT, else 50051)")
    parser.add_argument("--wait", action="store_true",
                        help="if MindInsight is not up yet, wait for it instead of training without the debugger")
    parser.add_argument("script", nargs="?", help="the training script")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from msdebug_hooks import autoattach
    from msdebug_hooks.debugger.settings import DEFAULT_HOST, DEFAULT_PORT, WAIT_VARIABLE, DebuggerSettings, \
        validate_address

    if args.script is None:
        print("msdebug run: error: missing the training script to run (usage: msdebug run [--host H] [--port P] "
              "[--wait] train.py [script arguments...])", file=sys.stderr)
        return 2
    if args.host is not None or args.port is not None:   # errors name the option typed, not the variable it sets
        validate_address(args.host if args.host is not None else os.environ.get("MS_DEBUGGER_HOST", DEFAULT_HOST),
                         args.port if args.port is not None else os.environ.get("MS_DEBUGGER_PORT",
                                                                                  str(DEFAULT_PORT)),
                         host_field="--host" if args.host is not None else "MS_DEBUGGER_HOST",
                         port_field="--port" if args.port is not None else "MS_DEBUGGER_PORT")
    script = Path(args.script)
    if not script.is_file():
        raise FileNotFoundError(f"script {args.script!r} does not exist or is not a file")
    os.environ["ENABLE_MS_DEBUGGER"] = "1"
    if args.host is not None:
        os.environ["MS_DEBUGGER_HOST"] = args.host
    if args.port is not None:
        os.environ["MS_DEBUGGER_PORT"] = str(args.port)
    if args.wait:
        os.environ[WAIT_VARIABLE] = "1"
    settings = DebuggerSettings.from_env()      # ConfigError (exit 2) before the script starts
    print(f"msdebug run: debugger attached to every Model.train/fit and hand-written training loop; debugger server "
          f"(MindInsight or msdebug) at {settings.address}", file=sys.stderr)
    autoattach.install_from_env()
    sys.argv = [str(script), *args.args]
    sys.path.insert(0, str(script.resolve().parent))
    return run_script(str(script))         # the script's traceback only, not ours (_script.py)

