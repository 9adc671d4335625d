"""Where the online debugger connects, from arguments or from MindSpore's ``ENABLE_MS_DEBUGGER`` / ``MS_DEBUGGER_*``.

Pure Python (no MindSpore, no gRPC), so a bad value is reported before anything heavy happens, and in one
exception: every problem names the variable (or argument), the value and what is allowed.

``MS_DEBUGGER_PARTIAL_MEM`` is read and validated but changes nothing here. MindSpore's own client turned off
memory reuse so that every kernel output stayed readable, and this variable gave part of it back. This client reads
tensors from Python (parameters and the loss between steps; layer outputs and gradients through hooks while watched)
and never touches MindSpore's memory settings, so there is nothing to give back.

TLS (ours; MindInsight itself serves plain gRPC, so TLS is for a server behind a TLS-terminating proxy such as
nginx or envoy, or a gRPC server of your own):

* ``MS_DEBUGGER_TLS_CA``: PEM file of the CA that signed the server certificate. Setting it turns TLS on.
* ``MS_DEBUGGER_TLS_CERT`` / ``MS_DEBUGGER_TLS_KEY``: PEM client certificate and key, both or neither (mutual TLS).
* ``MS_DEBUGGER_TLS_SERVER_NAME``: the host name to check the server certificate against when it differs from
  ``MS_DEBUGGER_HOST`` (e.g. connecting by IP address to a certificate issued for a name).

Fault policy (ours): ``MSDEBUG_DEBUGGER_ON_LOST`` = ``continue`` (default: training goes on without the debugger
and reconnects when a server is back) or ``stop`` (training stops cleanly when the server is lost while it waits
for a command).
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Mapping, Optional

from msdebug_hooks.config import debugger_env as env
from msdebug_hooks.config.debugger_env import DEFAULT_HOST, DEFAULT_PORT, ON_LOST_POLICIES, TLS_VARIABLES
from msdebug_hooks.errors import ConfigError, ConfigErrors

__all__ = ["DebuggerSettings", "TlsConfig", "validate_address", "validate_policy", "DEFAULT_HOST", "DEFAULT_PORT",
           "WAIT_VARIABLE", "ON_LOST_VARIABLE", "ON_LOST_POLICIES", "TLS_VARIABLES"]

WAIT_VARIABLE = env.WAIT
ON_LOST_VARIABLE = env.ON_LOST
PARTIAL_MEM_NOTE = ("MS_DEBUGGER_PARTIAL_MEM has nothing to do here: this debugger client reads tensors from Python "
                    "(parameters, the loss and, while watched, layer outputs and gradients) and never turns off "
                    "MindSpore's memory reuse, so training uses the same memory with or without it")


def _check_host(field: str, host: object, port: int = DEFAULT_PORT) -> Optional[ConfigError]:
    allowed = "a host name or IP address of the MindInsight machine that resolves (e.g. 127.0.0.1 or localhost)"
    if not isinstance(host, str) or not host.strip() or any(c.isspace() for c in host.strip()):
        return ConfigError(field, host, allowed)
    try:
        socket.getaddrinfo(host.strip(), port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        return ConfigError(field, host, allowed, detail=f"it does not resolve: {exc}")
    return None


def _parse_port(field: str, port: object) -> tuple[Optional[int], Optional[ConfigError]]:
    allowed = "a port number 1-65535 (MindInsight's --debugger-port, 50051 by default)"
    number = env.read_port(port)
    return (None, ConfigError(field, port, allowed)) if number is None else (number, None)


def validate_address(host: object, port: object, *, host_field: str = "host",
                     port_field: str = "port") -> tuple[str, int]:
    """``(host, port)`` checked: the port is 1..65535 (ints or digit strings), the host resolves. Raises one
    ``ConfigError`` (``ConfigErrors`` when both are wrong) naming the fields."""
    number, port_error = _parse_port(port_field, port)
    host_error = _check_host(host_field, host, number or DEFAULT_PORT)
    errors = [e for e in (host_error, port_error) if e is not None]
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ConfigErrors(errors)
    return str(host).strip(), int(number)   # type: ignore[arg-type]


def validate_policy(field: str, value: object) -> str:
    """``on_server_lost``: "continue" or "stop" (any case)."""
    if not isinstance(value, str) or value.strip().lower() not in ON_LOST_POLICIES:
        raise ConfigError(field, value, "continue (train on without the debugger, reconnect later) or stop "
                                        "(end training cleanly) when the server is lost while training waits")
    return value.strip().lower()


@dataclass(frozen=True)
class TlsConfig:
    """PEM bytes for a TLS channel: ``ca`` (trusted roots; None = the system's), ``cert`` + ``key`` (client
    certificate, optional), ``server_name`` (name to verify instead of the host)."""

    ca: Optional[bytes] = None
    cert: Optional[bytes] = None
    key: Optional[bytes] = None
    server_name: str = ""
    ca_path: str = ""

    @classmethod
    def from_paths(cls, ca: object = None, cert: object = None, key: object = None, server_name: object = None, *,
                   fields: Optional[Mapping[str, str]] = None) -> Optional["TlsConfig"]:
        """Read and check the files; None when no TLS setting is given. ``fields`` names the settings in errors
        (the variables by default). Raises ``ConfigError`` / ``ConfigErrors``."""
        names = dict(TLS_VARIABLES, **(fields or {}))
        if not any((ca, cert, key, server_name)):
            return None
        errors: list[ConfigError] = []
        data: dict[str, Optional[bytes]] = {}
        for kind, path in (("ca", ca), ("cert", cert), ("key", key)):
            data[kind] = None
            if not path:
                continue
            try:
                data[kind] = _read_pem(str(path))
            except (OSError, ValueError) as exc:
                errors.append(ConfigError(names[kind], str(path), "a readable PEM file", detail=str(exc)))
        if bool(cert) != bool(key):
            missing = "key" if cert else "cert"
            errors.append(ConfigError(names[missing], "", f"set together with {names['cert' if key else 'key']} "
                                      "(a client certificate needs its private key and the other way round)"))
        if server_name is not None and (not isinstance(server_name, str) or any(c.isspace() for c in server_name)):
            errors.append(ConfigError(names["server_name"], server_name, "a host name without spaces"))
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ConfigErrors(errors)
        return cls(ca=data["ca"], cert=data["cert"], key=data["key"], server_name=(server_name or "").strip(),
                   ca_path=str(ca or ""))


def _read_pem(path: str) -> bytes:
    with open(path, "rb") as handle:
        data = handle.read(1 << 20)
    if b"-----BEGIN " not in data:
        raise ValueError("no '-----BEGIN ...' PEM block in it")
    return data


@dataclass(frozen=True)
class DebuggerSettings:
    """The debugger switch and server address as MindSpore's client read them from the environment.

    ``enabled``: ``ENABLE_MS_DEBUGGER`` is 1 or true (any case); ``host`` / ``port``: ``MS_DEBUGGER_HOST``
    (default localhost) / ``MS_DEBUGGER_PORT`` (default 50051); ``partial_memory``: ``MS_DEBUGGER_PARTIAL_MEM``
    (validated, explained, no effect: see the module docstring); ``wait_for_server``: ``MSDEBUG_DEBUGGER_WAIT``
    (ours, set by ``msdebug run --wait``).
    """

    enabled: bool = False
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    partial_memory: bool = False
    wait_for_server: bool = False
    tls: Optional[TlsConfig] = None
    on_server_lost: str = "continue"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "DebuggerSettings":
        """Read and check the four variables; every bad value is reported in one ``ConfigError``.

        Example:
            >>> DebuggerSettings.from_env({"ENABLE_MS_DEBUGGER": "1", "MS_DEBUGGER_PORT": "15051"}).address
            'localhost:15051'
        """
        variables = os.environ if environ is None else environ
        errors: list[ConfigError] = []
        switch = variables.get(env.SWITCH, "")
        enabled = env.read_flag(switch)
        if enabled is None:
            errors.append(ConfigError(env.SWITCH, switch,
                                      "1 or true (any case) to attach the debugger; 0, false or unset not to"))
        port, port_error = _parse_port(env.PORT, variables.get(env.PORT, str(DEFAULT_PORT)))
        if port_error:
            errors.append(port_error)
        host = variables.get(env.HOST, DEFAULT_HOST)
        host_error = _check_host(env.HOST, host, port or DEFAULT_PORT)
        if host_error:
            errors.append(host_error)
        partial = variables.get(env.PARTIAL_MEM, "")
        if env.read_flag(partial) is None:
            errors.append(ConfigError(env.PARTIAL_MEM, partial, "1, true, 0, false or unset",
                                      detail="accepted for compatibility; " + PARTIAL_MEM_NOTE))
        wait = variables.get(env.WAIT, "")
        if env.read_flag(wait) is None:
            errors.append(ConfigError(env.WAIT, wait, "1, true, 0, false or unset"))
        tls = policy = None
        try:
            tls = TlsConfig.from_paths(*(variables.get(v) for v in TLS_VARIABLES.values()))
        except ConfigErrors as exc:
            errors.extend(exc.errors)
        except ConfigError as exc:
            errors.append(exc)
        try:
            policy = validate_policy(env.ON_LOST, variables.get(env.ON_LOST, "continue") or "continue")
        except ConfigError as exc:
            errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ConfigErrors(errors)
        return cls(enabled=bool(enabled), host=host.strip(), port=int(port),   # type: ignore[arg-type]
                   partial_memory=bool(env.read_flag(partial)), wait_for_server=bool(env.read_flag(wait)),
                   tls=tls, on_server_lost=policy or "continue")
