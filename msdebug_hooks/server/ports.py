"""Whether the debugger server can listen on an address, asked before gRPC is.

Why: gRPC's core prints its own line for a port it cannot bind (``E1126 ... add_port.cc:83] Failed to add port to
server: ...``) straight to the process's stderr, before Python hears of it, so a person sees that line and then ours.
Binding a plain socket first, the way gRPC binds (``SO_REUSEADDR`` on, so a port in ``TIME_WAIT`` is still free),
finds a port in use and says so in one line of ours; gRPC is then only asked for ports that are free. A port taken
between the two binds still fails in gRPC, with its line: the check narrows that window, it cannot close it.
"""
from __future__ import annotations

import errno
import socket

__all__ = ["check_free"]


def check_free(host: str, port: int) -> None:
    """``OSError`` naming ``host:port`` and why when it cannot be listened on (in use, an address of no interface,
    a name that does not resolve); nothing for port 0 (the system picks a free one)."""
    if port == 0:
        return
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    host = f"[{bare}]" if ":" in bare else host            # [::]:50051, as gRPC writes an IPv6 address
    try:
        found = socket.getaddrinfo(bare or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise OSError(f"cannot listen on {host}:{port}: the host does not resolve ({exc.strerror})") from None
    reasons = {errno.EADDRINUSE: "the port is in use (another debugger server or MindInsight?); choose another "
                                 "port, or 0 for a free one",
               errno.EADDRNOTAVAIL: "no interface of this machine has that address",
               errno.EACCES: "ports below 1024 need privileges"}
    for family, kind, proto, _, address in found:
        try:
            probe = socket.socket(family, kind, proto)
        except OSError:          # an address family this machine lacks (IPv6 off): gRPC skips it too
            continue
        with probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                reason = reasons.get(exc.errno, exc.strerror or str(exc))
                raise OSError(f"cannot listen on {host}:{port}: {reason}") from None
