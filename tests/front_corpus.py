"""The listener front's corpus: request streams as raw bytes, each with the
exact answers a strict HTTP/1.1 server gives them.

Every case is what a hostile (or merely odd) client sends on one connection:
the rows of the front's hardening (upgrade smuggling, one byte that would keep
a connection, pipeline floods, chunk extensions, a FIN right after a request,
repeated headers) and the framing cases that already held up (CL/TE
variants, obs-fold, bare CR or LF, NUL, ``Expect``, HTTP/1.0, absolute form).

``answers`` are the statuses in order (interim ``100 Continue`` included);
``closes`` whether the server closes the connection after them (else a poll
sent next on the same connection must be answered). ``half_close``: the
client shuts its sending side right after the bytes. The runner is
``tests/front/test_front_corpus.py``; the node it runs on has 0.5 s timeouts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    name: str
    raw: bytes
    answers: tuple[int, ...]
    closes: bool
    half_close: bool = False


def _head(*lines: str) -> bytes:
    return "\r\n".join([*lines, "", ""]).encode("latin-1")


def _poll(room: str, *extra: str, version: str = "1.1") -> bytes:
    return _head(f"GET /v1/rooms/{room}/poll?uid=u HTTP/{version}", "Host: t", *extra)


def _send(room: str, *extra: str, body: bytes | None = None) -> bytes:
    body = json.dumps({"uid": "s", "body": "hi"}).encode() if body is None else body
    return _head(f"POST /v1/rooms/{room}/messages HTTP/1.1", "Host: t",
                 "Content-Type: application/json", f"Content-Length: {len(body)}",
                 *extra) + body


_HIDDEN = _send("victim", "Authorization: Bearer attacker")

CASES: tuple[Case, ...] = (
    # -- 1: request smuggling through Upgrade -------------------------------------
    Case("upgrade-with-a-body-hiding-a-request",
         _send("up1", "Connection: upgrade", "Upgrade: websocket", body=_HIDDEN),
         (400,), closes=True),
    Case("upgrade-then-a-pipelined-request",
         _poll("up2", "Connection: Upgrade", "Upgrade: h2c") + _poll("up2"),
         (400,), closes=True),
    Case("upgrade-open-ended-body-swallows-the-next-client",
         _head("POST /v1/rooms/up3/messages HTTP/1.1", "Host: t", "Connection: upgrade",
               "Upgrade: x", "Content-Type: application/json", "Content-Length: 100")
         + _send("up3", "Authorization: Bearer next-client"),
         (400,), closes=True),
    Case("connect-method",
         _head("CONNECT 127.0.0.1:6379 HTTP/1.1", "Host: t") + _poll("up4"),
         (400,), closes=True),
    # -- 2: a byte that would keep a connection open forever --------------------
    Case("one-byte", b"G", (), closes=True),
    Case("a-method-and-a-space", b"GET ", (), closes=True),
    Case("bare-crlf", b"\r\n", (), closes=True),
    Case("many-bare-crlfs", b"\r\n" * 200, (), closes=True),
    Case("a-trailing-byte-after-an-answered-poll", _poll("tb") + b"G", (200,), closes=True),
    # -- 3: pipelining is held to 4 waiting requests ----------------------------
    # Past 4 waiting, the rest of a read is kept unparsed (and reading paused)
    # until answers free places; past 32 KiB kept, the client is refused.
    Case("forty-pipelined-polls", _poll("pipe") * 40, (200,) * 40, closes=False),
    Case("pipelined-polls-past-32-KiB-ahead", _poll("flood") * 1000, (200,) * 4 + (400,),
         closes=True),
    Case("sixteen-pipelined-polls", _poll("pipe16") * 16, (200,) * 16, closes=False),
    # -- 8: chunk extensions and framing bytes count ----------------------------
    Case("chunk-extensions-past-the-request-bound",
         _head("POST /v1/rooms/ext/messages HTTP/1.1", "Host: t",
               "Content-Type: application/json", "Transfer-Encoding: chunked")
         + b"".join(b"1;" + b"e" * 4000 + b"\r\n \r\n" for _ in range(40)),
         (413,), closes=True),
    Case("chunked-with-a-short-extension",
         _head("POST /v1/rooms/ext2/messages HTTP/1.1", "Host: t",
               "Content-Type: application/json", "Transfer-Encoding: chunked")
         + b"1d;name=value\r\n" + json.dumps({"uid": "s", "body": "chunk"}).encode()
         + b"\r\n0\r\n\r\n",
         (201,), closes=False),
    # -- 9: a request followed at once by the client's FIN ----------------------
    Case("send-then-fin", _send("fin"), (201,), closes=True, half_close=True),
    Case("two-sends-then-fin", _send("fin2") * 2, (201, 201), closes=True, half_close=True),
    Case("poll-then-fin", _poll("fin3"), (200,), closes=True, half_close=True),
    Case("forty-pipelined-polls-then-fin", _poll("fin5") * 40, (200,) * 40, closes=True,
         half_close=True),
    Case("half-a-request-then-fin", _send("fin4")[:30], (), closes=True, half_close=True),
    # -- 10: headers that decide framing or identity, given twice ---------------
    Case("two-authorizations",
         _send("dup", "Authorization: Bearer a", "Authorization: Bearer b"),
         (400,), closes=True),
    Case("two-content-types",
         _send("dup", "Content-Type: application/msgpack"), (400,), closes=True),
    Case("two-content-encodings",
         _send("dup", "Content-Encoding: identity", "Content-Encoding: gzip"),
         (400,), closes=True),
    Case("two-expects", _send("dup", "Expect: 100-continue", "Expect: 100-continue"),
         (400,), closes=True),
    Case("two-content-lengths", _send("dup", "Content-Length: 3"), (400,), closes=True),
    Case("two-transfer-encodings",
         _head("POST /v1/rooms/dup/messages HTTP/1.1", "Host: t",
               "Transfer-Encoding: chunked", "Transfer-Encoding: chunked")
         + b"0\r\n\r\n", (400,), closes=True),
    # -- framing that held up: keep it so ---------------------------------------
    Case("content-length-and-chunked",
         _head("POST /v1/rooms/cl/messages HTTP/1.1", "Host: t", "Content-Length: 5",
               "Transfer-Encoding: chunked") + b"0\r\n\r\n", (400,), closes=True),
    Case("chunked-not-last",
         _head("POST /v1/rooms/cl/messages HTTP/1.1", "Host: t",
               "Transfer-Encoding: chunked, identity") + b"0\r\n\r\n", (400,), closes=True),
    Case("negative-content-length", _send("cl", "Content-Length: -1"), (400,), closes=True),
    Case("content-length-with-a-sign",
         _head("POST /v1/rooms/cl/messages HTTP/1.1", "Host: t", "Content-Length: +2")
         + b"{}", (400,), closes=True),
    Case("obs-fold",
         b"GET /v1/rooms/of/poll?uid=u HTTP/1.1\r\nHost: t\r\nX-A: a\r\n b\r\n\r\n",
         (400,), closes=True),
    Case("bare-lf-line-ends", b"GET /v1/rooms/lf/poll?uid=u HTTP/1.1\nHost: t\n\n",
         (400,), closes=True),
    Case("bare-cr-in-a-header",
         b"GET /v1/rooms/cr/poll?uid=u HTTP/1.1\r\nHost: t\rX: y\r\n\r\n", (400,), closes=True),
    Case("nul-in-a-header",
         b"GET /v1/rooms/nul/poll?uid=u HTTP/1.1\r\nHost: t\x00\r\n\r\n", (400,), closes=True),
    Case("space-before-a-colon",
         b"GET /v1/rooms/sp/poll?uid=u HTTP/1.1\r\nHost : t\r\n\r\n", (400,), closes=True),
    Case("expect-100-continue",
         _send("ex", "Expect: 100-continue"), (100, 201), closes=False),
    Case("http-1.0", _poll("h10", version="1.0"), (200,), closes=True),
    Case("http-1.0-keep-alive", _poll("h10k", "Connection: keep-alive", version="1.0"),
         (200,), closes=False),
    Case("http-0.9", b"GET /v1/rooms/h09/poll?uid=u\r\n\r\n", (505,), closes=True),
    Case("http-2.0-version", _head("GET /v1/rooms/h2/poll?uid=u HTTP/2.0", "Host: t"),
         (505,), closes=True),
    Case("absolute-form", _head("GET http://t/v1/rooms/abs/poll?uid=u HTTP/1.1", "Host: t"),
         (200,), closes=False),
    Case("connection-close", _poll("cc", "Connection: close") + _poll("cc"),
         (200,), closes=True),
    Case("tls-client-hello", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", (400,),
         closes=True),
    Case("url-over-8-KiB", _head("GET /v1/rooms/l/poll?uid=" + "u" * 9000 + " HTTP/1.1"),
         (414,), closes=True),
    Case("101-headers", _poll("l", *(f"X-H{i}: v" for i in range(101))), (431,),
         closes=True),
    Case("a-body-over-the-limit-is-read-and-refused",
         _send("big", body=b"x" * 6000), (413,), closes=False),
)
