"""The hostile client's requests, made from the routes' cost table
(``proxy/route_costs.py``): each row's :class:`~proxy.route_costs.Sample`
becomes a request for any room and uid, with or without the credential the
row's caller has. ``tests/hostile/test_route_attacks.py`` attacks every row
with them, and ``loadtest/bench_routes.py`` measures each row's worst case.

Nothing here knows a route by name: a new row is attacked as soon as it is
in the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from proxy.route_costs import COSTS, RouteCost
from proxy.tickets import mint

TICKET_KEY: Final = "attack-ticket-key-0123456789abcdef-44"
STATIC_FILE: Final = {"/static/{name}": ("room.js",),
                      "/static/vendor/{lib}/{name}": ("uplot", "uPlot.min.css")}
"""Files the node serves, for the pages' path parameters."""


@dataclass(frozen=True, slots=True)
class Credentials:
    """What the attacker may hold: ``tokens`` by name (a row's
    ``Sample.token``) and whether uids come with tickets (``ticket`` mode:
    then ``listener`` is an any-room ticket for the uid)."""

    admin: str
    publisher: str
    ticket_mode: bool = False
    now: float = 0.0

    def header(self, token: str, uid: str) -> dict[str, str]:
        if token == "listener":
            if not self.ticket_mode:
                return {}
            return {"Authorization": f"Bearer {mint(TICKET_KEY, uid, now=self.now)}"}
        value = {"admin": self.admin, "publisher": self.publisher,
                 "metrics": self.admin}.get(token)
        return {} if value is None else {"Authorization": f"Bearer {value}"}


def is_public(row: RouteCost) -> bool:
    """Whether anybody may call the row's route (a listener's credential at
    most): the attacker then calls it as the row's caller does. The other
    rows (the backend's, the operators') are attacked without their token."""
    return row.sample.token in ("", "listener")


def _fill(value: object, uid: str) -> object:
    if isinstance(value, str):
        return value.replace("{uid}", uid)
    if isinstance(value, dict):
        return {k: _fill(v, uid) for k, v in value.items()}
    return value


def request_bytes(row: RouteCost, room: str, uid: str, creds: Credentials | None,
                  *, keep_alive: bool = False) -> bytes:
    """One HTTP/1.1 request of ``row``'s route for ``room`` and ``uid``; with
    the credential its sample names when ``creds`` is given (in ``ticket``
    mode a listener's uid is its ticket's)."""
    method, _, template = row.route.partition(" ")
    path = template.replace("{room}", quote(room)).replace("{seq}", "1").replace(
        "{id}", "1").replace("{uid}", quote(uid))
    files = STATIC_FILE.get(template)
    if files is not None:
        path = template
        for part, name in zip(("{lib}", "{name}") if len(files) == 2 else ("{name}",), files,
                              strict=True):
            path = path.replace(part, name)
    sample = row.sample
    ticket = creds is not None and creds.ticket_mode and sample.token == "listener"
    query = sample.query.replace("{uid}", quote(uid))
    if ticket:
        query = "&".join(p for p in query.split("&") if not p.startswith("uid="))
    if query:
        path += "?" + query
    headers = {"Host": "attack"}
    if creds is not None:
        headers.update(creds.header(sample.token, uid))
    body = b""
    if sample.body is not None:
        doc = _fill(dict(sample.body), uid)
        assert isinstance(doc, dict)
        if ticket:
            doc.pop("uid", None)
        body = json.dumps(doc).encode()
        headers["Content-Type"] = "application/json"
    if body or method in ("POST", "PUT"):
        headers["Content-Length"] = str(len(body))
    if not keep_alive:
        headers["Connection"] = "close"
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
    return head.encode() + body


async def exchange(port: int, request: bytes, *, source: str = "127.0.0.1",
                   timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` from ``source`` (a loopback address: 127.0.0.2 is
    another client) and read its answer: ``(status, headers, body)``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                   local_addr=(source, 0))
    try:
        writer.write(request)
        async with asyncio.timeout(timeout):
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            body = await reader.readexactly(length) if length else b""
        return status, headers, body
    finally:
        writer.close()


async def reset_after(port: int, request: bytes) -> None:
    """Send ``request`` whole, then reset the connection (nothing read)."""
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()


def stalled(port: int, request: bytes, copies: int) -> socket.socket:
    """A client that sends ``copies`` of ``request`` pipelined and never reads
    (its receive buffer small, so the node's answers back up at once)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    data = request * copies
    with contextlib.suppress(BlockingIOError):
        sock.send(data)
    return sock


ROWS: Final = COSTS
