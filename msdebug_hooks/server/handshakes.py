"""Connections a TLS debugger server refused, and where they came from.

Why this way: gRPC's Python server never tells the application about a failed TLS handshake (a plaintext client,
no or an untrusted client certificate): no RPC reaches a handler or an interceptor, and its core only logs the
OpenSSL reason, without the peer, at INFO. What it does offer is a call before every handshake (the certificate
fetcher of ``grpc.dynamic_ssl_server_credentials``). At that moment the connection is accepted, so the kernel's
table of TCP connections (``/proc/net/tcp`` and ``tcp6``, Linux) names its peer: each peer newly connected to one of
our ports is remembered, and one that goes away without ever making an RPC was refused. The watchdog's check then
reports it, once per remote address a minute (a refused client retries). Where ``/proc/net/tcp`` is missing
(not Linux) refusals cannot be seen and are not reported; docs/debugger-server.md says so.
"""
from __future__ import annotations

import ipaddress
import socket
import struct
import threading
import time
from typing import Callable, Iterable, Optional
from urllib.parse import unquote

__all__ = ["HandshakeWatch", "established_peers", "peer_endpoint"]

_TABLES = (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6))
_ESTABLISHED, _CLOSE_WAIT = "01", "08"
_GIVE_UP_S = 180.0          # a connection still open and silent this long is no longer watched
_QUIET_S = 60.0             # further refusals of one address are counted, not reported, for this long

Endpoint = tuple[str, int]


def _address(text: str, family: int) -> str:
    raw = bytes.fromhex(text)
    packed = b"".join(struct.pack("<I", struct.unpack(">I", raw[i:i + 4])[0]) for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(socket.inet_ntop(family, packed))
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)


def established_peers(ports: Iterable[int]) -> Optional[set[Endpoint]]:
    """The remote (address, port) of every open TCP connection to one of ``ports`` on this host; None where the
    kernel's table cannot be read."""
    wanted = set(ports)
    peers: set[Endpoint] = set()
    readable = False
    for path, family in _TABLES:
        try:
            with open(path, encoding="ascii") as table:
                lines = table.readlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] not in (_ESTABLISHED, _CLOSE_WAIT):
                continue
            local, remote = fields[1].split(":"), fields[2].split(":")
            if int(local[1], 16) in wanted:
                peers.add((_address(remote[0], family), int(remote[1], 16)))
    return peers if readable else None


def peer_endpoint(peer: str) -> Optional[Endpoint]:
    """``ipv4:10.0.0.5:51234`` / ``ipv6:%5B::1%5D:51234`` (gRPC's ``context.peer()``) as (address, port)."""
    kind, _, rest = unquote(peer).partition(":")
    if kind not in ("ipv4", "ipv6") or ":" not in rest:
        return None
    host, _, port = rest.rpartition(":")
    try:
        address = ipaddress.ip_address(host.strip("[]"))
        return str(getattr(address, "ipv4_mapped", None) or address), int(port)
    except ValueError:
        return None


class HandshakeWatch:
    """Which connections to ``ports()`` made an RPC, and the ones that left without one (refused).

    ``connection_started`` runs before each handshake, ``admitted`` for every call (its peer string), ``check``
    from the server's watchdog; ``report(line)`` is told of each refusal."""

    def __init__(self, ports: Callable[[], Iterable[int]], report: Callable[[str], None], *,
                 mutual: bool) -> None:
        self._ports = ports
        self._report = report
        self._mutual = mutual
        self._lock = threading.Lock()
        self._known: set[Endpoint] = set()
        self._pending: dict[Endpoint, float] = {}
        self._quiet_until: dict[str, float] = {}
        self.refused = 0

    def connection_started(self) -> None:
        peers = established_peers(self._ports())
        if peers is None:
            return
        now = time.monotonic()
        with self._lock:
            for peer in peers - self._known:
                self._pending.setdefault(peer, now)
            self._known = peers | set(self._pending)

    def admitted(self, peer: str) -> None:
        if not self._pending:            # the usual case, every step: nothing to parse
            return
        endpoint = peer_endpoint(peer)
        if endpoint is not None:
            with self._lock:
                self._pending.pop(endpoint, None)

    def check(self) -> None:
        """Report the watched connections that closed without an RPC; forget the rest after a while."""
        with self._lock:
            if not self._pending:
                return
        peers = established_peers(self._ports()) or set()
        now = time.monotonic()
        refused: list[Endpoint] = []
        with self._lock:
            for endpoint, since in list(self._pending.items()):
                if endpoint not in peers:
                    refused.append(endpoint)
                if endpoint not in peers or now - since > _GIVE_UP_S:
                    del self._pending[endpoint]
            self._known &= peers | set(self._pending)
        for address, port in refused:
            self.refused += 1
            if self._quiet_until.get(address, 0.0) > now:
                continue
            self._quiet_until[address] = now + _QUIET_S
            who = "a training without a client certificate signed by --tls-client-ca" if self._mutual else \
                "a training that does not trust this server's certificate"
            self._report(f"refused a connection from {address} (port {port}): its TLS handshake failed (a "
                         f"plaintext training, or {who}); more from {address} in the next {_QUIET_S:.0f} s are "
                         "refused without a line")
