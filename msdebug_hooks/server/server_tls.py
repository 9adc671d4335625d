"""The debugger server's TLS: its certificate and key, and the CA whose trainings it admits, checked at start.

Why at start: gRPC reads these files only when it builds its credentials, and a bad one then surfaces as a core log
line or as every training failing its handshake. Checked here, each problem is one ``ConfigError`` line naming the
option, the file and what is wrong: missing or unreadable, not PEM, a key that does not match the certificate
(or is encrypted, which gRPC cannot read), a certificate that has expired or is not valid yet. All problems are
reported at once (``ConfigErrors``). Pure stdlib ``ssl`` (OpenSSL) does the reading; grpc is imported only to build
the credentials.
"""
from __future__ import annotations

import ssl
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from msdebug_hooks.errors import ConfigError
from msdebug_hooks.validation import raise_all

__all__ = ["ServerTls", "TLS_OPTIONS"]

#: the ``DebuggerServer`` arguments by part; the CLI passes its own option names (``--tls-cert`` ...)
TLS_OPTIONS = {"cert": "tls_cert", "key": "tls_key", "client_ca": "tls_client_ca"}
_MAX_PEM_BYTES = 1 << 20


@dataclass(frozen=True)
class ServerTls:
    """PEM bytes of the server's certificate (chain) and key, and of the CA that signs admitted trainings' client
    certificates (None: any client that speaks TLS is admitted). ``names``: the DNS names and IP addresses the
    certificate is valid for (what ``MS_DEBUGGER_HOST`` or ``MS_DEBUGGER_TLS_SERVER_NAME`` must be)."""

    cert: bytes
    key: bytes
    client_ca: Optional[bytes] = None
    cert_path: str = ""
    client_ca_path: str = ""
    names: tuple[str, ...] = ()
    dns_names: tuple[str, ...] = ()

    @classmethod
    def from_paths(cls, cert: Any = None, key: Any = None, client_ca: Any = None, *,
                   fields: Optional[Mapping[str, str]] = None, now: Optional[float] = None) -> Optional["ServerTls"]:
        """Read and check the files; None when none is given. ``fields`` names the options in errors
        (``TLS_OPTIONS`` by default). Raises ``ConfigError`` / ``ConfigErrors``, one per problem."""
        names = dict(TLS_OPTIONS, **(fields or {}))
        if not any((cert, key, client_ca)):
            return None
        now = time.time() if now is None else now
        errors: list[ConfigError] = []
        if not cert or not key:
            missing, given = ("cert", "key") if not cert else ("key", "cert")
            errors.append(ConfigError(names[missing], None, f"a PEM file, given together with {names[given]}"
                                      if (cert or key) else f"a PEM file: {names['client_ca']} needs the server's "
                                      f"certificate and key ({names['cert']}, {names['key']})"))
        data: dict[str, Optional[bytes]] = {"cert": None, "key": None, "client_ca": None}
        decoded: dict[str, Optional[dict]] = {}
        for part, path, marker, what in (("cert", cert, b"CERTIFICATE-----", "certificate"),
                                         ("key", key, b"PRIVATE KEY-----", "private key"),
                                         ("client_ca", client_ca, b"CERTIFICATE-----", "CA certificate")):
            if not path:
                continue
            try:
                data[part] = _read_pem(str(path), marker, what)
                if part != "key":
                    decoded[part] = _decode(str(path), what)
                    _check_dates(decoded[part], now, what)
            except (OSError, ValueError) as exc:
                data[part] = None
                errors.append(ConfigError(names[part], str(path), f"a readable PEM {what}", detail=_reason(exc)))
        if data["cert"] and data["key"]:
            problem = _key_problem(str(cert), str(key), data["key"])
            if problem:
                errors.append(ConfigError(names["key"], str(key), f"the unencrypted private key of {names['cert']}",
                                          detail=problem))
        raise_all(errors)
        assert data["cert"] is not None and data["key"] is not None
        alt = (decoded.get("cert") or {}).get("subjectAltName", ())
        return cls(cert=data["cert"], key=data["key"], client_ca=data["client_ca"], cert_path=str(cert),
                   client_ca_path=str(client_ca or ""), names=tuple(value for _, value in alt),
                   dns_names=tuple(value for kind, value in alt if kind == "DNS"))

    @property
    def mutual(self) -> bool:
        """Whether a training must show a client certificate signed by ``client_ca``."""
        return self.client_ca is not None

    def credentials(self, on_connection: Optional[Callable[[], None]] = None):
        """gRPC server credentials; ``on_connection()`` is called as each connection starts its handshake (gRPC
        asks for the certificate then: the one moment Python hears of a connection that may be refused)."""
        import grpc

        config = grpc.ssl_server_certificate_configuration([(self.key, self.cert)], root_certificates=self.client_ca)
        if on_connection is None:
            return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.client_ca,
                                               require_client_auth=self.mutual)

        def fetch():                # runs on a gRPC core thread: must never raise, and keeps the certificate
            try:
                on_connection()
            except Exception:       # noqa: BLE001 - a report must not refuse a connection
                pass
            return None
        return grpc.dynamic_ssl_server_credentials(config, fetch, require_client_authentication=self.mutual)


def _read_pem(path: str, marker: bytes, what: str) -> bytes:
    with open(path, "rb") as handle:
        data = handle.read(_MAX_PEM_BYTES + 1)
    if len(data) > _MAX_PEM_BYTES:
        raise ValueError(f"over {_MAX_PEM_BYTES >> 20} MiB: not a PEM {what}")
    if b"-----BEGIN " not in data:
        raise ValueError("not PEM: no '-----BEGIN ...' block in it")
    if marker not in data:
        raise ValueError(f"holds PEM, but no {what} ('-----BEGIN {marker.decode()}' block)")
    if marker == b"PRIVATE KEY-----" and b"ENCRYPTED" in data:
        raise ValueError("an encrypted key: gRPC cannot read one (openssl pkey -in KEY -out PLAIN.pem decrypts it)")
    return data


def _decode(path: str, what: str) -> dict:
    """The first certificate of the file, as ``ssl`` decodes it (subject, dates, subjectAltName)."""
    try:
        return ssl._ssl._test_decode_cert(path)       # type: ignore[attr-defined]  # CPython 3.x's decoder
    except ssl.SSLError as exc:
        raise ValueError(f"its {what} does not parse ({exc.reason or exc})") from None


def _check_dates(cert: dict, now: float, what: str) -> None:
    after, before = cert.get("notAfter"), cert.get("notBefore")
    if after and ssl.cert_time_to_seconds(after) < now:
        raise ValueError(f"the {what} expired on {after}")
    if before and ssl.cert_time_to_seconds(before) > now:
        raise ValueError(f"the {what} is not valid before {before}")


def _key_problem(cert_path: str, key_path: str, key: bytes) -> str:
    """Why ``key`` cannot serve ``cert`` ("" when it can)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_path, key_path, password=lambda: b"")   # never a terminal prompt
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            return "it does not match the certificate: a key of another certificate"
        return f"OpenSSL cannot use it with the certificate ({exc.reason or exc})"
    except OSError as exc:
        return _reason(exc)
    return ""


def _reason(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[0].lower() + exc.strerror[1:]
    return str(exc)
