"""Who can reach the debugger server, and the address a training should be given.

Why: ``--host 0.0.0.0`` listens on every interface, but ``0.0.0.0`` is no address a training on another host can
connect to, and a server beyond loopback without TLS lets whoever reaches the port in. The server says so once at
start (``exposure_warning``) and its start hint names this host (``reachable_host``).
"""
from __future__ import annotations

import ipaddress
import socket
from typing import Optional

__all__ = ["WILDCARDS", "is_loopback", "reachable_host", "host_addresses", "exposure_warning"]

WILDCARDS = ("0.0.0.0", "::", "[::]", "")


def _bare(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` stands for is a loopback one (only this machine can connect)."""
    bare = _bare(host)
    if bare in WILDCARDS:
        return False
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        pass
    try:
        found = {info[4][0] for info in socket.getaddrinfo(bare, None, type=socket.SOCK_STREAM)}
    except OSError:
        return False
    return bool(found) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in found)


def host_addresses() -> list[str]:
    """The non-loopback addresses this host's name resolves to (what other hosts may reach it at)."""
    try:
        found = socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)
    except OSError:
        return []
    addresses: list[str] = []
    for info in found:
        address = str(info[4][0]).split("%")[0]
        if not ipaddress.ip_address(address).is_loopback and address not in addresses:
            addresses.append(address)
    return addresses


def reachable_host(host: str, names: tuple[str, ...] = ()) -> str:
    """The host a training should be given for a server listening on ``host``: itself unless it is a wildcard;
    then a name of the server's certificate (``names``) that is this host, else this host's name when it resolves
    to an address others can reach, else that address."""
    if _bare(host) not in WILDCARDS:
        return host
    addresses = host_addresses()
    if not addresses:                # no address beyond loopback: only this machine can connect anyway
        return "127.0.0.1"
    own = {name for name in (socket.gethostname(), socket.getfqdn()) if not is_loopback(name)}
    for name in names:
        if name in own:
            return name
    return socket.gethostname() if socket.gethostname() in own else addresses[0]


def exposure_warning(host: str, port: int, *, tls: bool, mutual: bool) -> Optional[str]:
    """One warning when whoever reaches ``host:port`` could connect as a training, or read the traffic; None on
    loopback, and with mutual TLS."""
    if is_loopback(host) or mutual:
        return None
    where = f"{host or '*'}:{port}" + (" (every interface)" if _bare(host) in WILDCARDS else "")
    if not tls:
        return (f"warning: listening on {where} without TLS: whoever reaches this port can connect as a training "
                "(feed this session graphs, tensors and hits) and anyone on the network path reads every graph, "
                "tensor value and command in plaintext; --tls-cert/--tls-key encrypt the traffic, --tls-client-ca "
                "admits only trainings holding a certificate signed by that CA, --host 127.0.0.1 keeps it on this "
                "machine")
    return (f"warning: listening on {where} with TLS but without --tls-client-ca: the traffic is encrypted, but "
            "whoever reaches this port can still connect as a training (feed this session graphs, tensors and "
            "hits); --tls-client-ca admits only trainings holding a certificate signed by that CA")
