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

import dataclasses
import os
import socket
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple, Optional

from msdebug_hooks.config import debugger_env as env
from msdebug_hooks.config.debugger_env import DEFAULT_HOST, DEFAULT_PORT, ON_LOST_POLICIES, TLS_VARIABLES
from msdebug_hooks.errors import ConfigError, ConfigErrors
from msdebug_hooks.validation import raise_all, real_number, whole_number

__all__ = ["DebuggerSettings", "TlsConfig", "ServerAddress", "validate_address", "validate_policy", "DEFAULT_HOST",
           "DEFAULT_PORT", "WAIT_VARIABLE", "ON_LOST_VARIABLE", "ON_LOST_POLICIES", "TLS_VARIABLES", "TLS_ARGUMENTS",
           "MIN_HEARTBEAT_PERIOD", "MAX_HEARTBEAT_PERIOD"]

WAIT_VARIABLE = env.WAIT
ON_LOST_VARIABLE = env.ON_LOST
#: the ``DebuggerCallback`` arguments that name the TLS files, by the ``TlsConfig`` part they fill
TLS_ARGUMENTS = {"ca": "tls_ca", "cert": "tls_cert", "key": "tls_key", "server_name": "tls_server_name"}
#: MindInsight accepts heartbeat periods of 5..3600 s (and resets a session after three missed beats)
MIN_HEARTBEAT_PERIOD, MAX_HEARTBEAT_PERIOD = 5, 3600
PARTIAL_MEM_NOTE = ("MS_DEBUGGER_PARTIAL_MEM has nothing to do here: this debugger client reads tensors from Python "
                    "(parameters, the loss and, while watched, layer outputs and gradients) and never turns off "
                    "MindSpore's memory reuse, so training uses the same memory with or without it")
_HOST_ALLOWED = "a host name or IP address of the MindInsight machine that resolves (e.g. 127.0.0.1 or localhost)"
_PORT_ALLOWED = "a port number 1-65535 (MindInsight's --debugger-port, 50051 by default)"
_SECONDS = "a number of seconds > 0"


def _host_shape(field: str, host: object) -> str:
    """``host`` stripped, when it can be a host name at all (resolving it is ``_check_host``'s)."""
    if not isinstance(host, str) or not host.strip() or any(c.isspace() for c in host.strip()):
        raise ConfigError(field, host, _HOST_ALLOWED)
    return host.strip()


def _check_host(field: str, host: object, port: int = DEFAULT_PORT) -> Optional[ConfigError]:
    try:
        name = _host_shape(field, host)
    except ConfigError as exc:
        return exc
    try:
        socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        return ConfigError(field, host, _HOST_ALLOWED, detail=f"it does not resolve: {exc}")
    return None


def _port(field: str, port: object) -> int:
    """A port 1..65535, an int or a string of digits (what the variable holds)."""
    return whole_number(field, port, minimum=1, maximum=65535, allowed=_PORT_ALLOWED, digits=True)


def _parse_port(field: str, port: object) -> tuple[Optional[int], Optional[ConfigError]]:
    try:
        return _port(field, port), None
    except ConfigError as exc:
        return None, exc


class ServerAddress(NamedTuple):
    """A debugger server's address, checked: a host that resolves and a port 1..65535."""

    host: str
    port: int


def validate_address(host: object, port: object, *, host_field: str = "host",
                     port_field: str = "port") -> ServerAddress:
    """``(host, port)`` checked: the port is 1..65535 (ints or digit strings), the host resolves. Raises one
    ``ConfigError`` (``ConfigErrors`` when both are wrong) naming the fields."""
    number, port_error = _parse_port(port_field, port)
    host_error = _check_host(host_field, host, number or DEFAULT_PORT)
    raise_all(e for e in (host_error, port_error) if e is not None)
    return ServerAddress(str(host).strip(), int(number))   # type: ignore[arg-type]


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
        raise_all(errors)
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
    """Everything the online debugger client is told: where the server is, how long to wait, what to do when it goes.

    The one place these values are checked: every instance is (``__post_init__``, all problems in one
    ``ConfigError``), so ``DebuggerCallback``, ``DebuggerSession`` and ``Heartbeat`` take them as they are. Build one
    from the environment (``from_env``) or from ``DebuggerCallback``'s keyword arguments (``with_options``, which
    also reads the TLS files and resolves the host).

    From the environment: ``enabled``: ``ENABLE_MS_DEBUGGER`` is 1 or true (any case); ``host`` / ``port``:
    ``MS_DEBUGGER_HOST`` (default localhost) / ``MS_DEBUGGER_PORT`` (default 50051); ``partial_memory``:
    ``MS_DEBUGGER_PARTIAL_MEM`` (validated, explained, no effect: see the module docstring); ``wait_for_server``:
    ``MSDEBUG_DEBUGGER_WAIT`` (ours, set by ``msdebug run --wait``); ``tls``: ``MS_DEBUGGER_TLS_*``;
    ``on_server_lost``: ``MSDEBUG_DEBUGGER_ON_LOST``. The rest are arguments only (``DebuggerCallback`` documents
    each): ``connect_timeout``, ``rpc_timeout``, ``progress_interval`` and ``reconnect_window`` in seconds,
    ``heartbeat_period`` (5..3600 s, MindInsight's range), ``device_id`` (reported as the device).
    ``enabled`` is what ``from_env`` honours; a callback built from settings attaches whatever it says.
    """

    enabled: bool = False
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    partial_memory: bool = False
    wait_for_server: bool = False
    tls: Optional[TlsConfig] = None
    on_server_lost: str = "continue"
    connect_timeout: float = 5.0
    rpc_timeout: float = 10.0
    heartbeat_period: int = 30
    progress_interval: float = 5.0
    device_id: int = 0
    reconnect_window: float = 600.0

    def __post_init__(self) -> None:
        errors: list[ConfigError] = []

        def check(name: str, rule: Any) -> None:
            try:
                object.__setattr__(self, name, rule(name, getattr(self, name)))
            except ConfigError as exc:
                errors.append(exc)

        for name in ("enabled", "partial_memory", "wait_for_server"):
            object.__setattr__(self, name, bool(getattr(self, name)))
        check("host", _host_shape)
        check("port", _port)
        check("on_server_lost", validate_policy)
        check("reconnect_window", lambda f, v: real_number(
            f, v, minimum=0, finite=False, allowed="a number of seconds >= 0 (0: never reconnect)"))
        if self.tls is not None and not isinstance(self.tls, TlsConfig):
            errors.append(ConfigError("tls", self.tls, "None or a TlsConfig (TlsConfig.from_paths reads the files)"))
        for name in ("connect_timeout", "rpc_timeout", "progress_interval"):
            check(name, lambda f, v: real_number(f, v, above=0, finite=False, allowed=_SECONDS))
        check("heartbeat_period", lambda f, v: whole_number(
            f, v, minimum=MIN_HEARTBEAT_PERIOD, maximum=MAX_HEARTBEAT_PERIOD,
            allowed=f"an int {MIN_HEARTBEAT_PERIOD}..{MAX_HEARTBEAT_PERIOD} (seconds; MindInsight's range)"))
        check("device_id", lambda f, v: whole_number(f, v, minimum=0))
        raise_all(errors)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def with_options(self, **options: Any) -> "DebuggerSettings":
        """These settings with ``DebuggerCallback``'s keyword arguments applied: any field but ``enabled``, and
        ``tls_ca`` / ``tls_cert`` / ``tls_key`` / ``tls_server_name`` (PEM files, read here; ``tls_ca`` may be a
        ready ``TlsConfig``). A new ``host`` or ``port`` must resolve (``validate_address``). Raises ``ConfigError``
        naming the argument; ``TypeError`` for a name that is no option.

        Example:
            >>> DebuggerSettings().with_options(host="127.0.0.1", heartbeat_period=60).heartbeat_period
            60
        """
        changes = dict(options)
        unknown = sorted(set(changes) - _OPTION_NAMES)
        if unknown:
            raise TypeError(f"unexpected keyword argument {unknown[0]!r}: the debugger's options are "
                            f"{', '.join(sorted(_OPTION_NAMES))}")
        if "host" in changes or "port" in changes:
            changes["host"], changes["port"] = validate_address(changes.get("host", self.host),
                                                                changes.get("port", self.port))
        paths = {part: changes.pop(name, None) for part, name in TLS_ARGUMENTS.items()}
        if isinstance(paths["ca"], TlsConfig):
            changes["tls"] = paths["ca"]
        elif any(paths.values()):
            changes["tls"] = TlsConfig.from_paths(**paths, fields=TLS_ARGUMENTS)
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "DebuggerSettings":
        """Read and check the variables; every bad value is reported in one ``ConfigError``.

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
        raise_all(errors)
        return cls(enabled=bool(enabled), host=host.strip(), port=int(port),   # type: ignore[arg-type]
                   partial_memory=bool(env.read_flag(partial)), wait_for_server=bool(env.read_flag(wait)),
                   tls=tls, on_server_lost=policy or "continue")


_OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(DebuggerSettings)) - {"enabled", "tls"} | \
    set(TLS_ARGUMENTS.values())
