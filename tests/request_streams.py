"""Request streams for the listener front, generated (hypothesis): requests
well or badly framed (``Content-Length`` and ``Transfer-Encoding`` alone,
together, wrong or missing; chunk extensions; upgrades, ``Expect`` and
repeated headers; a body that is itself a request), several on one
connection, or two with junk between them.

``streams`` drives ``test_front_streams`` (a node over a real socket, against
h11, and split into reads anywhere) and ``test_front_reader`` (the reader
alone, split anywhere).
"""

from __future__ import annotations

import json

from hypothesis import strategies as st


def _chunked(body: bytes, cut: int, extension: bytes) -> bytes:
    parts = [body[i:i + cut] for i in range(0, len(body), cut)] or [b""]
    return b"".join(b"%x%s\r\n%s\r\n" % (len(p), extension, p) for p in parts if p) \
        + b"0\r\n\r\n"


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """One request, well or badly framed: the framing headers, upgrades,
    repeated headers and bodies that parsers have disagreed on."""
    kind = draw(st.sampled_from(["poll", "send"]))
    room = draw(st.sampled_from(["d1", "d2"]))
    body = json.dumps({"uid": "s", "body": draw(st.text(max_size=20))}).encode()
    if draw(st.integers(0, 3)) == 0:  # a body that is itself a request
        body = (f"POST /v1/rooms/{room}/messages HTTP/1.1\r\nHost: t\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                ).encode() + body
    if kind == "poll":
        line = f"GET /v1/rooms/{room}/poll?uid=u HTTP/1.1"
        body = draw(st.sampled_from([b"", b"", body]))
    else:
        line = f"POST /v1/rooms/{room}/messages HTTP/1.1"
    headers = ["Host: t"]
    if kind == "send":
        headers.append("Content-Type: application/json")
    framing = draw(st.sampled_from(["length", "chunked", "both", "none", "wrong-length"]))
    extension = draw(st.sampled_from([b"", b";a=b", b";" + b"x" * 40]))
    if framing == "length" and body:
        headers.append(f"Content-Length: {len(body)}")
        payload = body
    elif framing == "chunked":
        headers.append("Transfer-Encoding: chunked")
        payload = _chunked(body, draw(st.integers(1, 16)), extension)
    elif framing == "both":
        headers += [f"Content-Length: {len(body)}", "Transfer-Encoding: chunked"]
        payload = _chunked(body, 8, extension)
    elif framing == "wrong-length":
        headers.append(f"Content-Length: {max(0, len(body) - draw(st.integers(1, 5)))}")
        payload = body
    else:
        payload = b"" if kind == "poll" else body
        if kind == "send":
            headers.append(f"Content-Length: {len(body)}")
    for extra in draw(st.lists(st.sampled_from([
            "Connection: close", "Connection: upgrade", "Upgrade: websocket",
            "Expect: 100-continue", "Authorization: Bearer a", "Content-Length: 0",
            "Transfer-Encoding: chunked", "Content-Type: text/plain", "X-Pad: p",
            "Connection: keep-alive"]), max_size=3)):
        headers.insert(draw(st.integers(0, len(headers))), extra)
    if draw(st.integers(0, 3)) == 0:
        headers += ["Connection: upgrade", "Upgrade: websocket"]
    head = "\r\n".join([line, *headers, "", ""]).encode()
    prefix = draw(st.sampled_from([b"", b"", b"\r\n", b"\r\n\r\n"]))
    return prefix + head + payload


streams = st.lists(requests(), min_size=1, max_size=6).map(b"".join) | st.builds(
    lambda good, junk, more: good + junk + more,
    requests(), st.binary(max_size=12), requests())
