"""The listener front's answers to a fixed conversation, as bytes.

``python tests/transcript.py`` serves a node on a free loopback port (memory
store, a fake clock, fixed secrets and epochs), sends it every stream of the
front's corpus (``tests/front_corpus.py``) and a listener's conversation (first
polls, sends, deliveries in JSON and msgpack, important and personal messages,
an empty answer, refusals), each on its own connection, and writes every byte
the node answered to standard output (the ``Date`` header's value masked).
``tests/node/test_compiled_build.py`` runs it under the pure and the compiled build and
compares the two outputs byte for byte.

It imports whichever build the environment gives it (``PYTHONPATH`` and
``PYTHONSAFEPATH=1`` for a compiled tree).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # support, front_corpus

from front_corpus import CASES, _head, _send  # the corpus's request builders
from support import PUBLISHER, running_node

from liveroom.clock import FakeClock
from liveroom.store.memory import log as memory_log

_DATE = re.compile(rb"\r\nDate: [^\r]*")
_CLOSE = b"GET /v1/rooms/last/poll?uid=z HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


def _post(room: str, body: dict[str, object]) -> bytes:
    return _send(room, f"Authorization: Bearer {PUBLISHER}", body=json.dumps(body).encode())


def _get(path: str, *headers: str) -> bytes:
    return _head(f"GET {path} HTTP/1.1", "Host: t", *headers)


async def _exchange(port: int, raw: bytes, *, half_close: bool = False) -> bytes:
    """Everything answered to ``raw`` on a new connection, then a first poll
    asking to close (so the read ends at the server's FIN either way)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        if half_close:
            writer.write_eof()
        else:
            writer.write(_CLOSE)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        async with asyncio.timeout(10):
            return _DATE.sub(b"\r\nDate: -", await reader.read(-1))
    finally:
        writer.transport.abort()


def _first_body(stream: bytes) -> bytes:
    """The body of the first answer in ``stream`` (by its Content-Length)."""
    head, _, rest = stream.partition(b"\r\n\r\n")
    length = re.search(rb"\r\nContent-Length: (\d+)", head)
    assert length is not None, head
    return rest[:int(length.group(1))]


def _cursor(stream: bytes) -> str:
    """The query that echoes the cursor of the first answer (JSON) in ``stream``."""
    body = json.loads(_first_body(stream))
    return (f"epoch={body['epoch']}&seq={body['seq']}&iseq={body['iseq']}"
            f"&pseq={body['pseq']}&ctx={body['ctx']}")


async def conversation(port: int) -> list[bytes]:
    room = "/v1/rooms/talk/poll"
    out = [await _exchange(port, _post("talk", {"uid": "s", "body": "one"}))]
    first = await _exchange(port, _get(f"{room}?uid=a&recent=5"))
    first_b = await _exchange(port, _get(f"{room}?uid=b", "Accept: application/msgpack"))
    out += [first, first_b]
    out.append(await _exchange(port, _post("talk", {"uid": "s", "body": {"text": "two"}})))
    out.append(await _exchange(port, _post("talk", {"uid": "s", "body": "gift",
                                                    "important": True})))
    out.append(await _exchange(port, _post("talk", {"uid": "s", "body": "hi a", "to": "a"})))
    cursor = _cursor(first)
    for accept in ((), ("Accept: application/msgpack",)):
        out.append(await _exchange(port, _get(f"{room}?uid=a&{cursor}", *accept)))
        out.append(await _exchange(port, _get(f"{room}?uid=c&{cursor}", *accept)))
    held = await _exchange(port, _get(f"{room}?uid=a&{cursor}&timeout=1"))
    out.append(held)
    head = _cursor(held)
    out.append(await _exchange(port, _get(f"{room}?uid=a&{head}&timeout=1")))
    for bad in ("", "uid=", "uid=a&epoch=x", "uid=a&seq=-1&epoch=e&iseq=0",
                "uid=a&timeout=nope", "uid=a&recent=99999", "uid=a&spread=70000",
                "uid=%ff"):
        out.append(await _exchange(port, _get(f"{room}?{bad}")))
    out.append(await _exchange(port, _post("talk", {"uid": "s"})))
    out.append(await _exchange(port, _post("talk", {"uid": "s", "body": "x", "to": "a",
                                                    "important": False})))
    return out


async def transcript() -> bytes:
    epochs = itertools.count(1)
    memory_log.new_epoch = lambda: f"epoch{next(epochs)}"  # fixed epochs, fixed contexts
    async with running_node(clock=FakeClock(), header_timeout=0.5,
                            keepalive_timeout=0.5, request_timeout=0.5) as node:
        port = int(node.url.rpartition(":")[2])
        parts = [b"== case %s\n%s" % (case.name.encode(), await _exchange(
            port, case.raw, half_close=case.half_close)) for case in CASES]
        parts += [b"== talk %d\n%s" % (i, raw)
                  for i, raw in enumerate(await conversation(port))]
    return b"\n".join(parts)


if __name__ == "__main__":
    sys.stdout.buffer.write(asyncio.run(transcript()))
