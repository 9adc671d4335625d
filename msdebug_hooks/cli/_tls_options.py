"""The TLS options of ``msdebug serve`` and ``msdebug debug``: ``--tls-cert``/``--tls-key`` (the server's
certificate) and ``--tls-client-ca`` (mutual TLS), read and checked before the server starts.

Every problem with the files is one line, ``msdebug <command>: error: --tls-key='k.pem' is not allowed: ...``, and
the command exits 2 (bad input), as for any other bad option.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Union

from msdebug_hooks.errors import ConfigError, ConfigErrors

TLS_FLAGS = {"cert": "--tls-cert", "key": "--tls-key", "client_ca": "--tls-client-ca"}


def add_tls_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TLS (docs/debugger-server.md, 'Who may connect')")
    group.add_argument("--tls-cert", metavar="FILE", help="PEM certificate (chain) of this server: speak TLS")
    group.add_argument("--tls-key", metavar="FILE", help="PEM private key of --tls-cert")
    group.add_argument("--tls-client-ca", metavar="FILE",
                       help="PEM CA: admit only trainings holding a client certificate signed by it (mutual TLS)")


def read_tls(args: argparse.Namespace) -> Union[None, bool, "ServerTls"]:  # noqa: F821
    """The checked ``ServerTls`` (None: plaintext; False: bad files, one line printed per problem)."""
    from msdebug_hooks.server.server_tls import ServerTls

    try:
        return ServerTls.from_paths(args.tls_cert, args.tls_key, args.tls_client_ca, fields=TLS_FLAGS)
    except ConfigError as exc:
        for error in exc.errors if isinstance(exc, ConfigErrors) else [exc]:
            print(f"msdebug {args.command}: error: {error}", file=sys.stderr)
        return False


class Notices:
    """What the server tells a person (the exposure warning, refused connections) as lines of ``command``; held
    until ``release()`` so that the start line comes first."""

    def __init__(self, command: str) -> None:
        self.command = command
        self._held: Optional[list[str]] = []

    def __call__(self, line: str) -> None:
        if self._held is not None:
            self._held.append(line)
        else:
            print(f"msdebug {self.command}: {line}", flush=True)

    def release(self) -> None:
        held, self._held = self._held or [], None
        for line in held:
            self(line)


def tls_phrase(tls: Optional[object]) -> str:
    """" over TLS" / " over mutual TLS" / "" for the start line."""
    if tls is None:
        return ""
    return " over mutual TLS" if getattr(tls, "mutual", False) else " over TLS"


def listened(host: str, ports: str) -> str:
    """``host:ports`` for the start line; a wildcard with the addresses it stands for
    (``0.0.0.0:50051 (every interface; this host's addresses: 10.0.0.5)``)."""
    from msdebug_hooks.server.exposure import WILDCARDS, host_addresses

    if host not in WILDCARDS:
        return f"{host}:{ports}"
    addresses = ", ".join(host_addresses()) or "none beyond loopback"
    return f"{host or '*'}:{ports} (every interface; this host's addresses: {addresses})"


def training_tls_env(tls, host: str, env: dict) -> bool:
    """The TLS variables of the training ``msdebug debug`` starts (``env``, changed in place), where the person did
    not set them: the server's certificate file as its CA (a self-signed certificate, or a file holding the chain up
    to its CA; else set MS_DEBUGGER_TLS_CA) and the certificate's name when ``host`` is not one of its names. With
    ``--tls-client-ca`` the training needs a certificate of its own: False after one line when it has none."""
    from msdebug_hooks.config.debugger_env import TLS_VARIABLES

    env.setdefault(TLS_VARIABLES["ca"], tls.cert_path)
    if tls.names and host not in tls.names and tls.dns_names:
        env.setdefault(TLS_VARIABLES["server_name"], tls.dns_names[0])
    if tls.mutual and not (env.get(TLS_VARIABLES["cert"]) and env.get(TLS_VARIABLES["key"])):
        print(f"msdebug debug: error: --tls-client-ca={tls.client_ca_path!r} admits only a training holding a "
              f"certificate signed by it: set {TLS_VARIABLES['cert']} and {TLS_VARIABLES['key']} to one and its key",
              file=sys.stderr)
        return False
    return True
