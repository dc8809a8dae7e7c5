# cython: language_level=3, boundscheck=False, wraparound=False
"""The floor at C level: the least a long-poll server on uvloop can cost per delivery.

``floor_server.py`` is the floor in Python (uvloop, httptools' callbacks, a
timer per held poll). This is the same contract's plain path with everything
a delivery runs in the server's own code written at C level with Cython, as
uvloop and httptools are: the protocol is a ``cdef class``, a request's head
is scanned over the read's bytes (no parser callbacks, no string made but the
room's name once), a held poll is a C field and an entry in its room's list,
and an answer is one ``transport.write`` of bytes built once per message for
every listener. What is left per delivery is uvloop's (its read callback, the
``bytes`` it reads into, ``data_received``, ``write``) and the kernel's.

Less than the Python floor, on purpose: no hold timeout (a held poll waits
for the next message; the fan-out benchmark publishes every half second), no
pipelining past one held poll (bytes that arrive while a poll is held wait
for its answer), ``Content-Length`` as the only framing. Anything else is
answered 404, or the connection closed. Built and run by ``bench_fanout.py
--against floor-c`` (``cythonize -i`` in a temporary directory); not part of
liveroom.
"""

import argparse
import asyncio
import secrets
import time
from collections import deque

import orjson
import uvloop

from libc.string cimport memcmp, memchr
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

KEEP = 500
REASONS = {200: b"OK", 201: b"Created", 404: b"Not Found"}

cdef bytes response(int status, bytes body):
    return b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        status, REASONS[status], len(body), body)


cdef bytes NOT_FOUND = response(404, b'{"error":"not_found"}')


cdef class Room:
    cdef public str name
    cdef public str epoch
    cdef bytes epoch_b
    cdef public long long seq
    cdef object log
    cdef list held

    def __init__(self, str name):
        self.name = name
        self.epoch = secrets.token_urlsafe(9)
        self.epoch_b = self.epoch.encode()
        self.seq = 0
        self.log = deque(maxlen=KEEP)
        self.held = []

    cdef bytes answer(self, long long seq, list messages, long long gap=0):
        return response(200, orjson.dumps({
            "room": self.name, "epoch": self.epoch, "seq": seq, "iseq": 0, "gap": gap,
            "igap": 0, "reset": False, "online": 0, "interval_ms": 0, "important": [],
            "messages": messages, "ctx": "-"}))

    cdef long long publish(self, object uid, object body):
        cdef Conn conn
        self.seq += 1
        message = {"seq": self.seq, "uid": uid, "important": False,
                   "ts": time.time_ns() // 1_000_000, "body": body}
        self.log.append(message)
        if self.held:
            answer = self.answer(self.seq, [message])
            held, self.held = self.held, []
            for conn in held:
                conn.release(answer)
        return self.seq


cdef dict rooms = {}


cdef Room room_named(const char* at, Py_ssize_t size):
    name = at[:size].decode()
    room = rooms.get(name)
    if room is None:
        room = rooms[name] = Room(name)
    return room


cdef Py_ssize_t head_end(const char* data, Py_ssize_t size):
    """The offset just past the head's blank line, or -1."""
    cdef Py_ssize_t i
    for i in range(3, size):
        if data[i] == b'\n' and data[i - 1] == b'\r' and data[i - 2] == b'\n' \
                and data[i - 3] == b'\r':
            return i + 1
    return -1


cdef Py_ssize_t content_length(const char* data, Py_ssize_t size):
    """``Content-Length`` of the head ``data[:size]`` (0: none)."""
    cdef const char* name = b"\ncontent-length:"
    cdef Py_ssize_t i = 0, k, n = 0
    while i + 16 < size:
        k = 0
        while k < 16 and (data[i + k] | 32) == (name[k] | 32):
            k += 1
        if k == 16:
            i += 16
            while i < size and data[i] == b' ':
                i += 1
            while i < size and b'0' <= data[i] <= b'9':
                n = n * 10 + (data[i] - 48)
                i += 1
            return n
        i += 1
    return 0


cdef class Conn:
    cdef object write
    """The transport's ``write``."""
    cdef bytes rest
    cdef Room room
    """The room holding this connection's poll (None: none held)."""

    def __init__(self):
        self.rest = b""

    def connection_made(self, transport):
        self.write = transport.write

    def data_received(self, bytes data):
        if self.rest:
            data = self.rest + data
            self.rest = b""
        self.serve(data)

    cdef void serve(self, bytes data):
        cdef const char* p = PyBytes_AS_STRING(data)
        cdef Py_ssize_t size = PyBytes_GET_SIZE(data), start = 0, end, body
        while start < size:
            if self.room is not None:
                self.rest = data[start:]
                return
            end = head_end(p + start, size - start)
            if end < 0:
                self.rest = data[start:]
                return
            body = content_length(p + start, end)
            if end + body > size - start:
                self.rest = data[start:]
                return
            self.handle(p + start, end, data, start + end, body)
            start += end + body

    cdef void handle(self, const char* p, Py_ssize_t head, bytes data, Py_ssize_t body_at,
                     Py_ssize_t body_size):
        cdef Py_ssize_t i, room_at, room_end, q, seq_at = -1, epoch_at = -1, epoch_end = -1
        cdef const char* amp
        cdef bint post = memcmp(p, b"POST /v1/rooms/", 15) == 0
        cdef bint get = memcmp(p, b"GET /v1/rooms/", 14) == 0
        cdef long long seq = 0
        cdef Room room
        if not (post or get):
            self.write(NOT_FOUND)
            return
        room_at = 15 if post else 14
        room_end = room_at
        while room_end < head and p[room_end] != b'/' and p[room_end] != b' ':
            room_end += 1
        if room_end >= head or p[room_end] != b'/':
            self.write(NOT_FOUND)
            return
        room = room_named(p + room_at, room_end - room_at)
        if post:
            if memcmp(p + room_end, b"/messages ", 10) != 0:
                self.write(NOT_FOUND)
                return
            doc = orjson.loads(data[body_at:body_at + body_size])
            seq = room.publish(doc.get("uid"), doc.get("body"))
            self.write(response(201, b'{"seq":%d,"epoch":"%s"}' % (seq, room.epoch_b)))
            return
        if memcmp(p + room_end, b"/poll?", 6) != 0:
            self.write(NOT_FOUND)
            return
        q = room_end + 6
        i = q
        while i < head and p[i] != b' ':
            if i == q or p[i - 1] == b'&':
                if memcmp(p + i, b"seq=", 4) == 0:
                    seq_at = i + 4
                elif memcmp(p + i, b"epoch=", 6) == 0:
                    epoch_at = i + 6
            i += 1
        if epoch_at >= 0:
            amp = <const char*>memchr(p + epoch_at, b'&', i - epoch_at)
            epoch_end = amp - p if amp != NULL else i
        if seq_at < 0 or epoch_at < 0 or epoch_end - epoch_at != len(room.epoch_b) \
                or memcmp(p + epoch_at, PyBytes_AS_STRING(room.epoch_b), epoch_end - epoch_at):
            self.write(room.answer(room.seq, []))
            return
        while b'0' <= p[seq_at] <= b'9':
            seq = seq * 10 + (p[seq_at] - 48)
            seq_at += 1
        if seq < room.seq:
            log = list(room.log)
            first = log[0]["seq"] if log else room.seq + 1
            behind = log[max(0, seq + 1 - first):]
            self.write(room.answer(room.seq, behind, gap=max(0, first - seq - 1)))
            return
        self.room = room
        room.held.append(self)

    cdef void release(self, bytes answer):
        self.room = None
        self.write(answer)
        if self.rest:
            data, self.rest = self.rest, b""
            self.serve(data)

    def eof_received(self):
        return None

    def pause_writing(self):
        pass

    def resume_writing(self):
        pass

    def connection_lost(self, exc):
        if self.room is not None:
            self.room.held.remove(self)
            self.room = None
        self.write = None


async def serve(int port):
    server = await asyncio.get_running_loop().create_server(
        Conn, "127.0.0.1", port, backlog=4096)
    print(f"floor-c server listening on http://127.0.0.1:{port}", flush=True)
    await server.serve_forever()


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=8080, help="port on 127.0.0.1 (default 8080)")
    uvloop.run(serve(p.parse_args().port))
