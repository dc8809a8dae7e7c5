"""Client addresses as a node counts them: one key per client.

The front counts connections per client (``--connections-per-ip``) and the
send path new rooms per client (``--rooms-per-address``) under the same key,
so one client is one client to both.
"""

from __future__ import annotations

import ipaddress


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
