from __future__ import annotations

# An assignment, not a docstring: mypyc drops a module's docstring (__doc__ would
# be None compiled), and main() gives it to --help.
__doc__ = """The Python floor: the smallest long-poll server the fan-out benchmark can measure.

``python loadtest/floor_server.py --port P`` serves 127.0.0.1:P on uvloop, one
``asyncio.Protocol`` per connection parsing with ``httptools``, keep-alive,
requests answered in order. It speaks just enough of liveroom's v1 poll contract
for ``kit/clients.py``'s listeners and the benchmark's publisher:

- ``POST /v1/rooms/ROOM/messages`` with ``{"uid", "body", ...}``: the next seq
  in the room's in-memory log (the last ``KEEP`` messages), 201 ``{"seq",
  "epoch"}``, and every poll held in the room answered at once with one answer
  built once for all of them;
- ``GET /v1/rooms/ROOM/poll?uid=..[&epoch=&seq=&timeout=]``: without a seq (or
  with another epoch) at once, empty, at the head; behind the head at once with
  the messages after seq (``gap`` counts those no longer kept); at the head held
  until the next message, or ``timeout`` seconds (default 30) and then empty.

It is not liveroom and not a fair rival: no validation, no tokens or signed
context (``ctx`` is always ``"-"``), no important messages, tiers, presence,
statistics, rate limits or store, one timer per held poll. It is there to show
what a bare asyncio protocol costs per delivery on the machine of the run, a
floor under liveroom's figure. Anything else answers 404.
"""

import argparse
import asyncio
import secrets
import time
from collections import deque
from itertools import islice
from typing import Any

import httptools
import orjson
import uvloop

KEEP = 500
"""Messages a room keeps for polls behind the head."""

REASONS = {200: b"OK", 201: b"Created", 404: b"Not Found"}


def response(status: int, body: bytes) -> bytes:
    return b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        status, REASONS[status], len(body), body)


NOT_FOUND = response(404, b'{"error":"not_found"}')


class Room:
    def __init__(self, name: str) -> None:
        self.name = name
        self.epoch = secrets.token_urlsafe(9)  # URL-safe: polls send it back unescaped
        self.seq = 0
        self.log: deque[dict[str, Any]] = deque(maxlen=KEEP)
        self.held: set[Connection] = set()

    def answer(self, seq: int, messages: list[dict[str, Any]], gap: int = 0) -> bytes:
        return response(200, orjson.dumps({
            "room": self.name, "epoch": self.epoch, "seq": seq, "iseq": 0, "gap": gap,
            "igap": 0, "reset": False, "online": 0, "interval_ms": 0, "important": [],
            "messages": messages, "ctx": "-"}))

    def publish(self, uid: Any, body: Any) -> int:
        self.seq += 1
        message = {"seq": self.seq, "uid": uid, "important": False,
                   "ts": time.time_ns() // 1_000_000, "body": body}
        self.log.append(message)
        if self.held:
            answer = self.answer(self.seq, [message])
            held, self.held = self.held, set()
            for conn in held:
                conn.release(answer)
        return self.seq


rooms: dict[str, Room] = {}


class Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: Any = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.pending: deque[tuple[bytes, bytes, bytes, bool]] = deque()
        self.keep_alive = True
        self.room: Room | None = None
        """The room holding this connection's poll, if one is held."""
        self.seq = 0
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.pending.append((self.parser.get_method(), self.url, b"".join(self.body),
                             self.parser.should_keep_alive()))
        self.url = b""
        self.body.clear()
        self.serve_pending()

    def serve_pending(self) -> None:
        while self.pending and self.room is None and not self.transport.is_closing():
            method, url, body, self.keep_alive = self.pending.popleft()
            self.handle(method, url, body)

    def send(self, answer: bytes) -> None:
        self.transport.write(answer)
        if not self.keep_alive:
            self.transport.close()

    def handle(self, method: bytes, url: bytes, body: bytes) -> None:
        parsed = httptools.parse_url(url)
        parts = parsed.path.split(b"/")
        if len(parts) != 5 or parts[1] != b"v1" or parts[2] != b"rooms":
            return self.send(NOT_FOUND)
        name = parts[3].decode()
        room = rooms.get(name) or rooms.setdefault(name, Room(name))
        if method == b"POST" and parts[4] == b"messages":
            doc = orjson.loads(body)
            seq = room.publish(doc.get("uid"), doc.get("body"))
            return self.send(response(201, b'{"seq":%d,"epoch":"%s"}' % (seq, room.epoch.encode())))
        if method != b"GET" or parts[4] != b"poll":
            return self.send(NOT_FOUND)
        query = dict(p.partition(b"=")[::2] for p in (parsed.query or b"").split(b"&"))
        if b"seq" not in query or query.get(b"epoch", b"").decode() != room.epoch:
            return self.send(room.answer(room.seq, []))
        seq = int(query[b"seq"])
        if seq < room.seq:
            first = room.log[0]["seq"] if room.log else room.seq + 1
            behind = list(islice(room.log, max(0, seq + 1 - first), None))
            return self.send(room.answer(room.seq, behind, gap=max(0, first - seq - 1)))
        self.room, self.seq = room, seq
        room.held.add(self)
        timeout = float(query.get(b"timeout", b"30"))
        self.timer = asyncio.get_running_loop().call_later(timeout, self.expire)

    def release(self, answer: bytes) -> None:
        """Answer the held poll (its room has already let go of it), then what queued behind."""
        if self.timer is not None:
            self.timer.cancel()
        self.room = self.timer = None
        self.send(answer)
        self.serve_pending()

    def expire(self) -> None:
        if self.room is not None:
            self.room.held.discard(self)
            self.release(self.room.answer(self.seq, []))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.room is not None:
            self.room.held.discard(self)
            self.room = None
        if self.timer is not None:
            self.timer.cancel()
        self.pending.clear()


async def serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(
        Connection, "127.0.0.1", port, backlog=4096)
    print(f"floor server listening on http://127.0.0.1:{port}", flush=True)
    await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=8080, help="port on 127.0.0.1 (default 8080)")
    uvloop.run(serve(p.parse_args().port))


if __name__ == "__main__":
    main()
