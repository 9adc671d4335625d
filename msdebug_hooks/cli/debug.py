"""``msdebug debug [options] SCRIPT [args...]``: run a training script with the debugger attached to a server in this
command, and drive it from a pdb-like prompt (or from ``-c`` commands, for CI).

The script runs in a child process (its own session, so Ctrl-C at the prompt pauses the training instead of
killing it) through ``msdebug run``; its output goes to a log file in the temp directory (its path is printed;
``log`` at the prompt shows it) unless ``--output -``. That log is the command's: removed at its end unless the exit
code is 2 (then kept, and its path said again); a log given with ``--output FILE`` is left alone. Exit code: the
prompt's (``msdebug_hooks/server/shell_exit.py``): 0 no hit, 1 hits, 2 bad input or a training that could not be
looked at.

Example::

    msdebug debug train.py --epochs 3
    msdebug debug -c "watch weight_overflow *; continue" train.py     # exit 1 if a weight overflows

A script that trains more than once (one ``Model.train`` per epoch) is followed: ``continue`` runs on into its next
training, which gets the same watchpoints.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from msdebug_hooks.cli import EXIT_BAD_INPUT
from msdebug_hooks.cli._tls_options import Notices, read_tls, training_tls_env
from msdebug_hooks.cli.serve import add_session_options, check_timeouts, quiet_grpc, read_commands

# MindSpore's log lines below ERROR ("[WARNING] ME(123:456,MainProcess):2025-...") and gRPC core's ("I1126 12:37:16.2
# 18767 file.cc:83] ..."): between a script's last lines they hide its traceback
_CHATTER = re.compile(r"^\[(DEBUG|INFO|WARNING)\] [A-Z_]+\(\d+|^[IW]\d{4} \d\d:\d\d:\d\d")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "debug", help="run a training script under a debugger prompt (our own server; no MindInsight needed)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0, help="the server's port (default: a free one)")
    parser.add_argument("--source", choices=("light", "dump"), default=None,
                        help="tensor source of the debugger (dump: every operator's outputs; GRAPH_MODE)")
    parser.add_argument("--output", default=None, metavar="FILE",
                        help="where the training's output goes (default: a log file in the temp dir; - for the "
                             "terminal)")
    parser.add_argument("--connect-timeout", type=float, default=300.0, metavar="S",
                        help="seconds to wait for the script to reach its first training step (default 300)")
    add_session_options(parser)
    parser.add_argument("script", help="the training script")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from msdebug_hooks.server.server import DebuggerServer
    from msdebug_hooks.server.shell import run_session

    script = Path(args.script)
    if not script.is_file():
        print(f"msdebug debug: error: script={args.script!r} is not allowed: an existing file", file=sys.stderr)
        return EXIT_BAD_INPUT
    commands = read_commands(args)
    tls = read_tls(args)
    if commands is False or tls is False or not check_timeouts(args):
        return EXIT_BAD_INPUT
    env = dict(os.environ)
    env.pop("ENABLE_MS_DEBUGGER", None)       # msdebug run attaches the debugger itself
    if args.source:
        env["MS_DEBUGGER_SOURCE"] = args.source
    connect_host = "127.0.0.1" if args.host in ("0.0.0.0", "::", "[::]", "") else args.host
    if tls is not None and not training_tls_env(tls, connect_host, env):
        return EXIT_BAD_INPUT
    quiet_grpc()                               # ours only: env (the training's) was taken before
    notices = Notices("debug")
    try:
        server = DebuggerServer(port=args.port, host=args.host, log_reports=False, tls_cert=tls,
                                notify=notices).start()
    except (ValueError, OSError) as exc:
        print(f"msdebug debug: error: --port / --host: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with server:
        command = [sys.executable, "-m", "msdebug_hooks", "run", "--host", connect_host, "--port", str(server.port),
                   str(script), *args.args]
        if args.output == "-":
            log_path, out = None, None
        else:
            log_path = Path(args.output) if args.output else Path(tempfile.gettempdir()) / \
                f"msdebug-debug-{os.getpid()}.log"
            out = open(log_path, "w")
        print(f"msdebug debug: {script} starts with the debugger at {connect_host}:{server.port}"
              f"{' over TLS' if tls is not None else ''}{f'; its output goes to {log_path}' if log_path else ''}",
              flush=True)
        notices.release()
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT if out else None,
                                   start_new_session=True)
        code = None
        try:
            code = run_session(server, lambda: server.wait_for_training(timeout=args.connect_timeout,
                                                                        process=process),
                               commands=commands, process=process, output_log=log_path, timeout=args.timeout)
            if code == EXIT_BAD_INPUT and log_path is not None and process.poll() is not None and \
                    process.returncode != 0:
                tail = [line for line in log_path.read_text(errors="replace").splitlines()
                        if not _CHATTER.match(line)][-15:]
                print("the training's last output lines (MindSpore's and gRPC's info and warning lines left out):\n"
                      + "\n".join(tail), flush=True)
            return code
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(30)
            if out is not None:
                out.close()
            if log_path is not None and not args.output:
                _own_log(log_path, code)


def _own_log(log_path: Path, code: "int | None") -> None:
    """The log this command made (no ``--output``): kept, and said so, when the session ended in exit 2 (a crash, a
    signal, a training that could not be looked at, bad input) or was interrupted; removed otherwise, since the
    prompt showed what mattered (hits, the training's warnings) and ``log`` showed the rest."""
    if code is None or code == EXIT_BAD_INPUT:
        print(f"msdebug debug: the training's output is kept in {log_path}", flush=True)
        return
    try:
        log_path.unlink()
    except OSError:
        return
    print(f"msdebug debug: removed the training's output log {log_path} (--output FILE keeps it)", flush=True)
