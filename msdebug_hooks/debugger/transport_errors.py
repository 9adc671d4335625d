"""The few exceptions a debugger RPC fails with, and how a ``grpc.RpcError`` becomes one of them.

The client never sees ``grpc.RpcError``: ``Transport`` (``transport.py``) maps every failed call here, by its status
code and by what the transport knows (closed by us, reopened since the call started, speaking TLS).
"""
from __future__ import annotations

from typing import Any, Optional

import grpc

__all__ = ["TransportError", "ServerUnavailable", "RequestTimeout", "MessageTooLarge", "ServerError",
           "TransportClosed", "TlsError", "map_rpc_error"]


class TransportError(RuntimeError):
    """A debugger RPC failed. ``method`` is the RPC name, ``code`` the gRPC status code (or None)."""

    def __init__(self, method: str, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(f"{method}: {message}")
        self.method = method
        self.code = code


class ServerUnavailable(TransportError):
    """Nothing answers at the address, or the connection broke (server stopped or restarted)."""


class RequestTimeout(TransportError):
    """The call did not finish within its deadline."""


class MessageTooLarge(TransportError):
    """A message exceeded a size limit (ours or, usually, the server's 4 MiB receive limit)."""


class ServerError(TransportError):
    """The server received the call and failed it (for MindInsight usually an exception in its handler)."""


class TransportClosed(TransportError):
    """The transport was closed, or the call was cancelled through it."""


class TlsError(ServerUnavailable):
    """The TLS handshake failed (untrusted certificate, wrong host name, missing client certificate)."""


_TLS_HINT = ("TLS handshake with {address} failed: the server certificate is not signed by the CA in "
             "MS_DEBUGGER_TLS_CA (DebuggerCallback tls_ca), or its host name does not match {name} (set "
             "MS_DEBUGGER_TLS_SERVER_NAME / tls_server_name to the name in the certificate), or the server wants a "
             "client certificate (MS_DEBUGGER_TLS_CERT and MS_DEBUGGER_TLS_KEY)")
# words of gRPC's handshake failures; "socket closed": a server that wants a client certificate hangs up
_TLS_WORDS = ("ssl", "tls", "handshake", "certificate", "x509", "verification", "socket closed")


def map_rpc_error(method: str, exc: grpc.RpcError, *, closed: bool, reopened: bool = False, address: str = "",
                  tls: Optional[Any] = None) -> TransportError:
    """The ``TransportError`` for a failed call of ``method``: ``closed`` (the transport was closed), ``reopened``
    (its channel was reopened since the call started), ``address`` and ``tls`` (a ``settings.TlsConfig`` or None)
    of the transport, which a TLS failure's message names."""
    code = exc.code() if hasattr(exc, "code") else None
    details = (exc.details() if hasattr(exc, "details") else None) or str(exc)
    if code == grpc.StatusCode.CANCELLED and closed:
        return TransportClosed(method, "transport closed", code)
    if code == grpc.StatusCode.CANCELLED and reopened:
        return ServerUnavailable(method, "connection dropped by reopen() (the server stopped answering)", code)
    if code == grpc.StatusCode.CANCELLED:   # not by us: the server cancelled the call (it is shutting down)
        return ServerUnavailable(method, f"CANCELLED by the server: {details}", code)
    if code == grpc.StatusCode.UNAVAILABLE and tls is not None and any(word in details.lower() for word in _TLS_WORDS):
        name = tls.server_name or address.rsplit(":", 1)[0]
        return TlsError(method, _TLS_HINT.format(address=address, name=name) + f" ({details})", code)
    kind = {
        grpc.StatusCode.UNAVAILABLE: ServerUnavailable,
        grpc.StatusCode.DEADLINE_EXCEEDED: RequestTimeout,
        grpc.StatusCode.RESOURCE_EXHAUSTED: MessageTooLarge,
    }.get(code, ServerError)
    return kind(method, f"{code.name if code else 'error'}: {details}", code)
