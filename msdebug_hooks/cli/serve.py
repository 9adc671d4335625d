"""``msdebug serve [--port P] [--ranks N]``: a debugger server with a pdb-like prompt for trainings started
elsewhere with ``ENABLE_MS_DEBUGGER=1 MS_DEBUGGER_HOST=<this host> MS_DEBUGGER_PORT=<P>`` (no MindInsight needed).

``--ranks N`` also listens on P+1 ... P+N-1, where rank r connects under msrun with env activation (and with
``DistributedDebugger(ranks="all", port_per_rank=True)``): every rank connects, ``jobs`` lists them and ``job K``
switches. ``-c "cmd; cmd"`` or ``-x FILE`` runs commands without a
prompt. ``--tls-cert FILE --tls-key FILE`` speak TLS, ``--tls-client-ca FILE`` admits only trainings holding a
certificate signed by that CA (docs/debugger-server.md, "Who may connect"). Exit code: 0 no hit, 1 hits, 2 bad input
(a TLS file that is missing, not PEM, expired or not matching its key, too) or a training that could not be looked at.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Optional, Union

from msdebug_hooks.cli import EXIT_BAD_INPUT
from msdebug_hooks.cli._tls_options import Notices, add_tls_options, listened, read_tls, tls_phrase


def add_session_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-c", "--commands", dest="command_text", metavar="'CMD; CMD'",
                       help="run these prompt commands (separated by ';') instead of the prompt, then end")
    group.add_argument("-x", "--command-file", metavar="FILE",
                       help="run the prompt commands in FILE (one per line, # comments) instead of the prompt")
    parser.add_argument("--timeout", type=float, default=3600.0, metavar="S",
                        help="longest wait of one command (continue, step), and for a script that runs on after a "
                             "training to train again or exit, in seconds (default 3600)")
    add_tls_options(parser)


def check_timeouts(args: argparse.Namespace) -> bool:
    """``--timeout`` / ``--connect-timeout``: a finite number of seconds > 0. False after one line saying which
    is not (the command then exits 2)."""
    for option in ("timeout", "connect_timeout"):
        value = getattr(args, option, None)
        if value is not None and not (math.isfinite(value) and value > 0):
            print(f"msdebug {args.command}: error: --{option.replace('_', '-')}={value:g} is not allowed: a number "
                  "of seconds > 0", file=sys.stderr)
            return False
    return True


def quiet_grpc() -> None:
    """Keep gRPC's core from writing its own log lines (``E1126 12:37:16 ... add_port.cc:83] ...``) between the
    prompt's lines; what goes wrong with a client is told in our words (server reports, ``*** ...`` lines). A
    ``GRPC_VERBOSITY`` the person set wins. Call before the server starts; a training started afterwards is given
    the environment as it was before."""
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")


def read_commands(args: argparse.Namespace) -> Union[None, bool, list[str]]:
    """The commands of ``-c`` / ``-x`` (None: interactive; False: bad input, reported)."""
    from msdebug_hooks.server.shell_parse import split_commands

    if args.command_text is not None:
        text: Optional[str] = args.command_text
    elif args.command_file is not None:
        try:
            with open(args.command_file, encoding="utf-8") as source:
                text = source.read()
        except OSError as exc:
            print(f"msdebug {args.command}: error: --command-file={args.command_file!r} is not allowed: a readable "
                  f"file ({exc.strerror})", file=sys.stderr)
            return False
    else:
        return None
    commands = split_commands(text)
    if not commands:
        print(f"msdebug {args.command}: error: no commands given (-c 'watch weight_overflow; continue')",
              file=sys.stderr)
        return False
    return commands


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="a debugger server with a prompt, for trainings started with ENABLE_MS_DEBUGGER=1",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=50051, help="port to listen on (default 50051, MindInsight's)")
    parser.add_argument("--ranks", type=int, default=1, metavar="N",
                        help="listen on N consecutive ports, one per rank (default 1)")
    parser.add_argument("--connect-timeout", type=float, default=3600.0, metavar="S",
                        help="seconds to wait for a training to connect (default 3600)")
    add_session_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from msdebug_hooks.server.server import DebuggerServer
    from msdebug_hooks.server.shell import run_session

    if not 1 <= args.ranks <= 1024:
        print(f"msdebug serve: error: --ranks={args.ranks} is not allowed: 1..1024", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not (1 <= args.port <= 65535 - args.ranks + 1 or args.port == 0 and args.ranks == 1):
        print(f"msdebug serve: error: --port={args.port} is not allowed: 1..{65536 - args.ranks}"
              f"{' (0, a free port, with --ranks 1 only)' if args.port == 0 else ', or 0 for a free one'}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    commands = read_commands(args)
    tls = read_tls(args)
    if commands is False or tls is False or not check_timeouts(args):
        return EXIT_BAD_INPUT
    quiet_grpc()
    notices = Notices("serve")
    try:
        server = DebuggerServer(port=args.port, host=args.host, ports=range(args.port + 1, args.port + args.ranks),
                                log_reports=False, tls_cert=tls, notify=notices).start()
    except OSError as exc:
        print(f"msdebug serve: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with server:
        args.port = server.port                 # --port 0: the one the system chose, which the training needs
        ports = ",".join(map(str, server.ports))
        every = f" (msrun ... as well: rank r connects to {args.port} + r)" if args.ranks > 1 else ""
        print(f"msdebug serve: listening on {listened(args.host, ports)}{tls_phrase(tls)}; start the training with "
              f"{server.training_variables()}{every}", flush=True)
        notices.release()
        if args.ranks > 1:
            def connect():
                return server.wait_for_ranks(args.ranks, timeout=args.connect_timeout)
        else:
            def connect():
                job = server.wait_for_training(timeout=args.connect_timeout)
                if (job.world or 1) > 1:        # our client says how many ranks its job has
                    print(f"msdebug serve: job {job.id} is rank {job.rank} of a {job.world}-rank job and this server "
                          f"serves one port: the other ranks find none on theirs (rank r: {args.port} + r) and wait in "
                          "the collectives while it is paused (about 30 s on the CPU, then they fail); msdebug serve "
                          f"--port {args.port} --ranks {job.world} serves every rank", flush=True)
                return job
        return run_session(server, connect, commands=commands, timeout=args.timeout)
