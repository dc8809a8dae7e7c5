"""Client addresses as a node counts them: one key per client.

The front counts connections per client (``--connections-per-ip``) and the
send path new rooms per client (``--rooms-per-address``) under the same key,
so one client is one client to both.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable


def address_key(host: str) -> str:
    """The key client address ``host`` counts under: an IPv4 address (or one
    mapped into IPv6) as it is; an IPv6 address by its /64, its zone dropped
    (what one subscriber is given, and may rotate through at will: one client
    cannot spread over 2**64 keys); anything else (a Unix socket's peer, a
    malformed forwarded address) by its first 64 characters."""
    if ":" not in host:
        return host[:64]
    try:
        ip = ipaddress.IPv6Address(host.partition("%")[0])
    except ValueError:
        return host[:64]
    mapped = ip.ipv4_mapped
    if mapped is not None:
        return str(mapped)
    return str(ipaddress.IPv6Network((int(ip), 64), strict=False))


def _hop(text: str) -> str:
    """One address of ``X-Forwarded-For`` without its port, if it has one."""
    text = text.strip()
    if text.startswith("["):  # [v6]:port
        return text[1:].partition("]")[0]
    if text.count(":") == 1:  # v4:port
        return text.partition(":")[0]
    return text


def forwarded_client(header: bytes, trusts: Callable[[str], bool]) -> str:
    """The client ``X-Forwarded-For`` names, as :func:`address_key` counts it:
    the last address not of a trusted proxy (each proxy appends the address
    it was reached from, so only those the trusted ones appended can be
    believed); ``""`` when every one is trusted."""
    for hop in reversed(header.decode("latin-1").split(",")):
        address = _hop(hop)
        if address and not trusts(address):
            return address_key(address[:64])
    return ""


def peer_address(transport: asyncio.BaseTransport | None) -> str:
    """The client's address as aiohttp's ``request.remote`` gives it: the
    peer's host, or the whole peer name of a socket with no host (a Unix
    socket's, often empty). Read per send only: a connection keeps none."""
    peer = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peer, (list, tuple)):
        return str(peer[0])
    return "" if peer is None else str(peer)
