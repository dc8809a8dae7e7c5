"""Send-path benchmark: liveroom's POST /messages beside nginx + Nchan's publish
and the Python floor's.

What one accepted message costs the server on the send path alone: one room,
nobody listening, ``wrk`` posting the same chat message (``BODY``, 104 bytes
of JSON text) as fast as ``--connections`` keep-alive connections allow for
``--duration`` seconds. For each engine (``--engines``: memory, redis) and
server (``--servers``: liveroom, compiled, nchan, floor, floor-compiled,
floor-c) in
turn, each row on a server (and a Redis) of its own, started for it and
stopped after it:

- **liveroom**: ``python -m liveroom serve`` from this checkout (the pure
  build), as loadtest/kit/servers.py starts it; ``compiled``: the same
  command from the compiled tree (``--compiled-tree``, made by
  ``scripts/build-compiled build/compiled``) with ``PYTHONPATH=DIR
  PYTHONSAFEPATH=1``. Three kinds of send, a row each: ``normal`` (chat:
  ``{"uid": "viewer42", "body": BODY}``), ``important`` (``"important":
  true``) and ``personal`` (``"to": "uNNN"``, 1 000 addressees in turn). Every
  send carries the publisher token, as the business backend's do: the backend
  is not rate limited (docs/api.md, "Rate limits"; proxy/sends/send.py), so no send
  is refused (429) however fast they come, with the server's default
  ``--rate-limits``. With ``--store redis`` (``--auth open``) it runs against
  a throw-away ``redis-server`` on a free port. Two more kinds are a
  viewer's chat, the normal send without a token, on a server run with
  ``--rate-limits off``: ``chat`` as it is, and ``hooked``, "send with the
  hook on (a backend that accepts at once)": the server runs with
  ``--send-hook`` to loadtest/hook_backend.py (its own process: it checks
  each batch's signature and accepts every message), so each send waits for
  the backend's verdict in a batch with the others in flight; and
  ``filtered``, "a send with 10 000 filter words": ``chat`` on a server
  given one word list of 10 000 made-up words (``kit/words.py``: half Latin,
  half Chinese; action mask, every room) through the admin API before the
  warm-up. Two more are
  many viewers' chat with the server's **default** rate limits, each send by
  one of them at random (wrk formats every viewer's request once and picks
  one per send): ``crowd``, 100 000 uids in open mode (``{"uid": "v<i>",
  "body": BODY}``), and ``tickets``, 20 000 tickets in ticket mode (the
  server run with ``--auth ticket --ticket-key``; each request carries one
  ticket of ``t<i>``, body ``{"body": BODY}``). A uid's rate windows are
  then a new uid's most of the time, as in a live room. A live room's
  viewer polls before it sends (the player starts before the chat box), so
  before a ``tickets`` row's warm-up each ticket polls once (another room,
  ``<room>-player``, so that nobody listens to the sends' room, as in every
  row): its verification is its first poll's, and its sends find it
  verified. The sends the windows refuse (429) are not counted as accepted
  (a note gives their share): at full speed (about 40 000 sends a second
  here) 20 000 tickets send twice a second each, and their bursts pass the
  5/s window; ``--pause-ms 1`` paces every row of the run (each connection
  waits a millisecond after each answer, about 10 000 sends a second at 16
  connections), as viewers within the default limits send.
- **nchan**: nginx + Nchan from loadtest/nchan.conf (one worker), ``POST
  /pub/ROOM`` with ``BODY`` as the raw message (Nchan has no envelope, no
  important or personal kind: one ``publish`` row; with ``hooked`` in
  ``--kinds``, a ``hooked`` row too: ``nchan_publisher_upstream_request``
  posts each message, one request each, to the same backend over keep-alive
  connections, which answers 304, "publish it as it came"). On Redis with
  ``nchan_redis_url`` + ``nchan_use_redis on`` against a throw-away
  ``redis-server`` of its own.
- **floor**: loadtest/floor_server.py, the Python floor, run by this
  Python as loadtest/kit/servers.py's ``floor_server()`` starts it: one
  ``asyncio.Protocol`` per connection on uvloop, parsing with httptools,
  orjson, a room's messages in a deque; ``floor-compiled``: the same module
  compiled by mypyc once for the run (loadtest/kit/builds.py's ``build_floor()``),
  left out with a note when mypyc is missing, unless named in ``--servers``;
  ``floor-c``: loadtest/floor_c.pyx, the same send at C level (Cython, a
  ``cdef class`` protocol scanning the head over the read's bytes), built by
  pip for the run (``build_floor_c()``): what uvloop and the kernel cost a
  send when the server's own code costs next to nothing.
  wrk sends them liveroom's normal send, token and all (one ``normal`` row
  each, whatever ``--kinds`` says), on the memory engine only: the floor has
  no store, so no rows on Redis (a note says so). It is not a fair rival: no
  validation, no tokens, no store, no important or personal messages, no
  rate limits or statistics. Its rows show what a bare asyncio + httptools
  protocol with orjson costs per send on this machine in the same run: a
  floor under liveroom's figure.

Each row: a probe send first (liveroom and the floor must answer 201 with
the stored ``seq``, or ``pseq`` for a personal message; Nchan 201 or 202,
"queued messages"), ``--warmup`` seconds of wrk, the server left to go
quiet, then the measured ``--duration`` seconds of wrk; afterwards a read
back (a normal send and a first poll that returns it with its seq; for the
floor, whose first poll answers empty at the head, a first poll at the
send's seq and a poll from the seq before returning it; Nchan's channel info
and a GET of the channel returning the body).

Reported per row:

- **sends accepted**: wrk's answers with a 2xx status (wrk counts a status
  above 399 as an error; a non-2xx answer or a socket error is reported
  beside the row). The server's own count (liveroom's
  ``liveroom_sends_total{outcome="stored"}``, Nchan's ``total published
  messages``, the floor's room head seq as a first poll answers it: the
  floor has no /metrics) is checked against it: at least as many, at most
  ``--connections`` more (sends in flight when wrk stopped);
- **server CPU per message** (µs): utime + stime from /proc of the server
  process and its descendants (nginx master + worker) over the measured
  window, divided by the messages the server stored in it (the progress line
  and ``--json`` also give the kernel's share, stime); the Redis rows
  add **redis µs/msg**, redis-server's own CPU per message, apart, and the
  ``hooked`` rows **backend µs/msg**, the hook backend's;
- **sends/s per core** = 1 / (server CPU per message): what one core of this
  machine would sustain on the send path (Redis's CPU not included: Redis
  runs on a core of its own);
- wrk's **p50 / p99** latency (``--latency``; a closed loop, so about
  connections / throughput), the sends/s the run reached and the server's
  share of a core.

The machine's load average is printed first; above ``--max-load`` the
benchmark waits up to ``--load-wait`` seconds for it to fall, then measures
anyway with a note. Each row also notes other processes' CPU during its
window (the machine's busy time less the server's, Redis's and wrk's), and
a client (wrk) near a full core: then the figures are the client's.

Needs ``wrk`` (``apt-get install wrk``), and for the Nchan rows nginx with
the nchan module (/usr/lib/nginx/modules/ngx_nchan_module.so, ``apt-get
install nginx libnginx-mod-nchan``), and for the Redis rows ``redis-server``.
It fails with a message naming what is missing; ``compiled`` is left out
with a note when no compiled tree exists, and ``floor-compiled`` when mypyc
is not installed, unless named in ``--servers``.

``--profile DIR`` also records a py-spy profile of the server process during
each liveroom and floor row's measured window (``py-spy record --format raw``: folded
stacks, for flamegraph.pl or speedscope) into DIR and prints the functions
with the most own and total time. py-spy stops the server to sample it: the
CPU figures of a profiled run are not the benchmark's.

    python loadtest/bench_send.py                       # everything, 10 s a row
    python loadtest/bench_send.py --servers liveroom --engines memory --duration 5
    python loadtest/bench_send.py --servers liveroom,floor,floor-compiled --engines memory
    python loadtest/bench_send.py --servers liveroom --engines memory \\
        --kinds normal --profile /tmp/send-profile
    python loadtest/bench_send.py --servers compiled,nchan --engines memory \\
        --kinds normal,crowd,tickets --pause-ms 1     # viewers within the limits
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import functools
import importlib.util
import json
import os
import random
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import jwt
from kit import REPO
from kit.builds import BUILD_COMPILED, build_floors, check_compiled_tree, compiled_env
from kit.machine import machine_busy, raise_nofile
from kit.progress import say
from kit.provenance import commit, versions
from kit.servers import (
    ADMIN_TOKEN,
    HOOK_SECRET,
    NCHAN_MODULE,
    PUBLISHER_TOKEN,
    Server,
    built_floor_server,
    floor_server,
    hook_backend,
    interrupt_on_signals,
    liveroom_server,
    nchan_available,
    nchan_server,
    redis_server,
    wait_quiet,
)
from kit.words import made_up_words

BODY = (b'{"type":"chat","text":"that last play was unreal, can we see it again?",'
        b'"user":{"name":"Mika","lvl":12}}')
"""The message every server stores: a typical chat message, 104 bytes of JSON."""
SENDER = "viewer42"
ADDRESSEES = 1000
"""Personal sends go to u0 ... u999 in turn."""
NOFILE = 4096
KINDS = ("normal", "important", "personal", "chat", "hooked", "filtered", "crowd", "tickets")
VIEWERS = ("chat", "hooked", "filtered")
"""A viewer's sends: no token (so the send hook screens them), rate limits off."""
FILTER_WORDS = 10_000
"""Words of the one list a ``filtered`` row's server has (mask, every room)."""
CROWDS = ("crowd", "tickets")
"""Many viewers' chat, each send by one of them at random, with the default
rate limits: ``crowd`` in open mode (``CROWD_UIDS`` uids), ``tickets`` in
ticket mode (``CROWD_TICKETS`` tickets)."""
CROWD_UIDS = 100_000
CROWD_TICKETS = 20_000
TICKET_KEY = "bench-send-ticket-key-0123456789abcdef"
"""The ``--ticket-key`` of a ``tickets`` row's server, which signs its tickets."""
TICKET_TTL = 3600
SERVERS = ("liveroom", "compiled", "nchan", "floor", "floor-compiled", "floor-c")
FLOORS = ("floor", "floor-compiled", "floor-c")
"""The Python floor's servers: one normal row each, memory engine only."""
ENGINES = ("memory", "redis")
CLIENT_BUSY = 0.9
"""wrk at this share of a core or more sets the pace itself."""
OTHERS_BUSY = 0.2
"""Other processes' CPU (share of a core) during a window worth a note."""


@dataclass(frozen=True)
class Row:
    engine: str
    server: str
    kind: str

    @property
    def room(self) -> str:
        return f"send-{self.kind}"

    @property
    def name(self) -> str:
        return f"{self.engine}-{self.server}-{self.kind}"


# -- what wrk sends ----------------------------------------------------------------


def liveroom_doc(kind: str, to: str | None = None) -> bytes:
    """A liveroom send's request body around ``BODY``."""
    extra = {"important": b',"important":true',
             "personal": b',"to":"%s"' % (to or "u0").encode()}.get(kind, b"")
    return b'{"uid":"%s","body":%s%s}' % (SENDER.encode(), BODY, extra)


def crowd_uid(i: int) -> str:
    return f"v{i}"


def ticket(uid: str) -> str:
    """A ticket for ``uid`` signed with ``TICKET_KEY``, good for an hour (a
    business backend's, HS256)."""
    now = int(time.time())
    return jwt.encode({"sub": uid, "iat": now, "exp": now + TICKET_TTL}, TICKET_KEY,
                      algorithm="HS256")


@functools.cache
def viewer_tickets() -> tuple[str, ...]:
    """The ``tickets`` rows' tickets, ``t0`` ... (minted once a run: the
    first polls and wrk's script carry the same strings)."""
    return tuple(ticket(f"t{i}") for i in range(CROWD_TICKETS))


def first_polls(row: Row, port: int) -> str:
    """A ``tickets`` row's viewers each poll once with their ticket before they
    send, as a live room's viewers do (the player polls from the start, the
    chat box comes later): each ticket is verified at its first poll, and a
    send finds it verified. They poll another room (``<room>-player``: a
    ticket naming no rooms is good for any, and the node keeps what it
    verified by ticket), so the sends' room has nobody listening, as in every
    row (a room listened to on a node costs each send its snapshot's update
    there, which Nchan's publish row does not pay). A first poll answers at
    once (no cursor: the room's head). One keep-alive connection, each
    answer checked (200)."""
    conn = HTTPConnection("127.0.0.1", port, timeout=10)
    path = f"/v1/rooms/{row.room}-player/poll"
    try:
        for token in viewer_tickets():
            conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
            answer = conn.getresponse()
            body = answer.read()
            if answer.status != 200:
                raise RuntimeError(f"{row.server} answered a viewer's first poll "
                                   f"{answer.status}: {body[:200]!r}")
    finally:
        conn.close()
    return f"{len(viewer_tickets())} first polls of {row.room}-player, one per ticket, each 200"


def requests_of(row: Row) -> tuple[list[tuple[str, bytes]], dict[str, str]]:
    """The (path, body) pairs wrk sends in turn, and its headers (a crowd's
    first viewer's send for ``crowd`` and ``tickets``: :func:`crowd_script`
    writes their requests)."""
    if row.kind == "crowd":
        return [(f"/v1/rooms/{row.room}/messages", crowd_doc(crowd_uid(0)))], \
            {"Content-Type": "application/json"}
    if row.kind == "tickets":
        return [(f"/v1/rooms/{row.room}/messages", TICKET_DOC)], \
            {"Content-Type": "application/json", "Authorization": f"Bearer {ticket('t0')}"}
    if row.server == "nchan":
        return [(f"/pub/{row.room}", BODY)], {"Content-Type": "application/json"}
    headers = {"Content-Type": "application/json"}
    if row.kind not in VIEWERS:
        headers["Authorization"] = f"Bearer {PUBLISHER_TOKEN}"
    path = f"/v1/rooms/{row.room}/messages"
    # The floor gets liveroom's normal send, token and all: the same bytes to parse.
    if row.kind == "personal":
        return [(path, liveroom_doc("personal", f"u{i}")) for i in range(ADDRESSEES)], headers
    return [(path, liveroom_doc(row.kind))], headers


TICKET_DOC = b'{"body":%s}' % BODY
"""A ticket holder's send: its uid is its ticket's."""


def crowd_doc(uid: str) -> bytes:
    return b'{"uid":"%s","body":%s}' % (uid.encode(), BODY)


def lua_string(data: str | bytes) -> str:
    text = data.decode() if isinstance(data, bytes) else data
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


RESULT_TAG = "BENCH_SEND_RESULT"

WRK_DONE = r"""
done = function(summary, latency, requests)
    local e = summary.errors
    io.write(string.format(
        'BENCH_SEND_RESULT {"requests": %d, "duration_us": %d, "status": %d, "connect": %d, '
        .. '"read": %d, "write": %d, "timeout": %d, "p50_us": %d, "p99_us": %d, '
        .. '"max_us": %d}\n',
        summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
        latency:percentile(50), latency:percentile(99), latency.max))
end
"""
"""``done`` of every script: wrk's counts and percentiles as one line, RESULT_TAG first."""


def wrk_script(row: Row) -> str:
    """The Lua script of a row: every thread formats the requests once and
    sends them in turn (one, except personal sends); ``done`` prints the
    counts and percentiles as one JSON line."""
    pairs, headers = requests_of(row)
    lines = ["-- written by loadtest/bench_send.py", "local raw = {"]
    lines += [f"    {{{lua_string(path)}, {lua_string(body)}}}," for path, body in pairs]
    lines += ["}", "local headers = {"]
    lines += [f"    [{lua_string(k)}] = {lua_string(v)}," for k, v in headers.items()]
    lines += ["}",
              "local reqs = {}",
              "local n = 0",
              "init = function(args)",
              "    for i, r in ipairs(raw) do",
              '        reqs[i] = wrk.format("POST", r[1], headers, r[2])',
              "    end",
              "end",
              "request = function()",
              "    n = n % #reqs + 1",
              "    return reqs[n]",
              "end"]
    return "\n".join(lines) + "\n" + WRK_DONE


def crowd_script(row: Row) -> str:
    """The Lua script of a ``crowd`` or ``tickets`` row: every thread formats
    one request per viewer once (``CROWD_UIDS`` bodies naming ``v<i>``, or
    ``CROWD_TICKETS`` requests with ``t<i>``'s ticket each), then sends one
    of them at random each time."""
    path = lua_string(f"/v1/rooms/{row.room}/messages")
    if row.kind == "crowd":
        before, after = crowd_doc("\0").split(b"\0")
        make = [f"local before, after = {lua_string(before)}, {lua_string(after)}",
                "local function build(i)",
                '    return wrk.format("POST", path, {["Content-Type"] = "application/json"},',
                '                      before .. "v" .. (i - 1) .. after)',
                "end",
                f"local count = {CROWD_UIDS}"]
    else:
        make = ["local tickets = {"]
        make += [f'    "{t}",' for t in viewer_tickets()]
        make += ["}",
                 f"local body = {lua_string(TICKET_DOC)}",
                 "local function build(i)",
                 '    return wrk.format("POST", path, {["Content-Type"] = "application/json",',
                 '                      ["Authorization"] = "Bearer " .. tickets[i]}, body)',
                 "end",
                 "local count = #tickets"]
    lines = [f"-- written by loadtest/bench_send.py ({row.kind})",
             f"local path = {path}", *make,
             "local reqs = {}",
             "init = function(args)",
             "    for i = 1, count do reqs[i] = build(i) end",
             "    math.randomseed(os.time())",
             "end",
             "request = function()",
             "    return reqs[math.random(count)]",
             "end"]
    return "\n".join(lines) + "\n" + WRK_DONE


def pause_script(pause_ms: int) -> str:
    """What paces a run's every row: each connection waits ``pause_ms``
    after each answer before its next send (wrk's ``delay``, whole
    milliseconds), so ``--connections`` connections send at most
    ``connections * 1000 / pause_ms`` a second; nothing at 0."""
    if pause_ms == 0:
        return ""
    return f"delay = function()\n    return {pause_ms}\nend\n"


@dataclass(frozen=True)
class WrkResult:
    requests: int
    seconds: float
    non_2xx: int
    socket_errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    client_cpu: float
    output: str

    @property
    def accepted(self) -> int:
        return self.requests - self.non_2xx


def run_wrk(port: int, script: Path, seconds: int, connections: int,
            threads: int) -> WrkResult:
    cmd = ["wrk", "--latency", "-t", str(threads), "-c", str(connections),
           "-d", f"{seconds}s", "--timeout", "5s", "-s", str(script),
           f"http://127.0.0.1:{port}/"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60,
                          check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): "
                           f"{(done.stderr + done.stdout).strip()}")
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_TAG)), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result line:\n{done.stdout}{done.stderr}")
    r = json.loads(line.removeprefix(RESULT_TAG))
    return WrkResult(
        requests=r["requests"], seconds=r["duration_us"] / 1e6, non_2xx=r["status"],
        socket_errors=r["connect"] + r["read"] + r["write"] + r["timeout"],
        p50_ms=r["p50_us"] / 1000, p99_ms=r["p99_us"] / 1000, max_ms=r["max_us"] / 1000,
        client_cpu=(after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        output=done.stdout)


# -- talking to the servers --------------------------------------------------------


def http(method: str, url: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def probe(row: Row, port: int) -> str:
    """One send as wrk sends it, checked: what the server answered (raises when
    it did not store it)."""
    pairs, headers = requests_of(row)
    path, body = pairs[0]
    status, answer = http("POST", f"http://127.0.0.1:{port}{path}", body, headers)
    text = answer.decode(errors="replace").strip()
    if row.server == "nchan":
        if status not in (201, 202) or "queued messages" not in text:
            raise RuntimeError(f"nchan answered the probe publish {status}: {text}")
        return f"{status} ({text.splitlines()[0]})"
    key = "pseq" if row.kind == "personal" else "seq"
    doc = json.loads(answer) if status == 201 else {}
    if status != 201 or not isinstance(doc.get(key), int) or not doc.get("epoch"):
        raise RuntimeError(f"{row.server} answered the probe send {status}: {text}")
    return f"201 {text}"


def read_back(row: Row, port: int) -> str:
    """After the run: the room still takes a send and returns it with its seq
    (liveroom, the floor), or the channel holds messages and returns the body
    (Nchan)."""
    base = f"http://127.0.0.1:{port}"
    if row.server == "nchan":
        status, info = http("GET", f"{base}/pub/{row.room}", headers={"Accept": "text/json"})
        kept = json.loads(info).get("messages", 0) if status == 200 else 0
        status2, got = http("GET", f"{base}/sub/{row.room}")
        if not kept or status2 != 200 or got != BODY:
            raise RuntimeError(f"nchan's channel {row.room}: info {status} {info!r}, "
                               f"GET {status2} {got[:200]!r}")
        return f"channel holds {kept} messages, GET returns the body"
    headers = {"Content-Type": "application/json",
               "Authorization": f"Bearer {PUBLISHER_TOKEN}"}
    status, answer = http("POST", f"{base}/v1/rooms/{row.room}/messages",
                          liveroom_doc("normal"), headers)
    if status != 201:
        raise RuntimeError(f"{row.server} answered the read-back send {status}: {answer!r}")
    seq = json.loads(answer)["seq"]
    if row.server in FLOORS:
        return floor_read_back(row, base, seq, json.loads(answer)["epoch"])
    reader = f"&ticket={ticket('reader')}" if row.kind == "tickets" else ""
    status, polled = http("GET", f"{base}/v1/rooms/{row.room}/poll?uid=reader&recent=1{reader}")
    messages = json.loads(polled).get("messages", []) if status == 200 else []
    last = messages[-1] if messages else {}
    if last.get("seq") != seq or last.get("body") != json.loads(BODY):
        raise RuntimeError(f"liveroom's first poll of {row.room} ({status}) does not return "
                           f"the send of seq {seq}: {polled[:300]!r}")
    return f"a send (seq {seq}) and a first poll returning it"


def floor_read_back(row: Row, base: str, seq: int, epoch: str) -> str:
    """The floor's first poll answers at once, empty, at the head: it must be
    the read-back send's seq; a poll from the seq before must return that
    send."""
    status, polled = http("GET", f"{base}/v1/rooms/{row.room}/poll?uid=reader")
    head = json.loads(polled).get("seq") if status == 200 else None
    status2, behind = http("GET", f"{base}/v1/rooms/{row.room}/poll?uid=reader"
                                  f"&epoch={epoch}&seq={seq - 1}")
    messages = json.loads(behind).get("messages", []) if status2 == 200 else []
    last = messages[-1] if messages else {}
    if head != seq or last.get("seq") != seq or last.get("body") != json.loads(BODY):
        raise RuntimeError(f"the floor's polls of {row.room} do not return the send of seq "
                           f"{seq}: first poll {status} {polled[:200]!r}, from seq {seq - 1} "
                           f"{status2} {behind[:300]!r}")
    return f"a send (seq {seq}), a first poll at its seq and one returning it"


def floor_head(row: Row, port: int) -> int:
    """The seq at the head of the floor's room, which a first poll answers
    (the room counts from 1: the messages it took since the server started)."""
    status, text = http("GET", f"http://127.0.0.1:{port}/v1/rooms/{row.room}/poll?uid=counter")
    seq = json.loads(text).get("seq") if status == 200 else None
    if not isinstance(seq, int):
        raise RuntimeError(f"{row.server}: a first poll of {row.room} gave no seq ({status}): "
                           f"{text[:200]!r}")
    return seq


def stored(row: Row, port: int) -> int:
    """Messages the server itself counts as stored since it started (the
    floor, which has no /metrics: its room's head seq)."""
    if row.server in FLOORS:
        return floor_head(row, port)
    if row.server == "nchan":
        status, text = http("GET", f"http://127.0.0.1:{port}/nchan_status")
        found = re.search(rb"total published messages: (\d+)", text)
    else:
        status, text = http("GET", f"http://127.0.0.1:{port}/metrics",
                            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        found = re.search(rb'^liveroom_sends_total\{outcome="stored"\} ([0-9.e+]+)$', text,
                          re.MULTILINE)
    if status != 200 or found is None:
        raise RuntimeError(f"{row.server}: no count of stored messages ({status})")
    return int(float(found.group(1)))


def hook_calls(row: Row, port: int) -> int:
    """The send hook's calls a liveroom server made so far (0 for any other row)."""
    if row.kind != "hooked" or row.server == "nchan":
        return 0
    status, text = http("GET", f"http://127.0.0.1:{port}/metrics",
                        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    found = re.findall(rb'^liveroom_send_hook_calls_total\{outcome="[a-z_]+"\} ([0-9.e+]+)$',
                       text, re.MULTILINE)
    if status != 200:
        raise RuntimeError(f"{row.server}: no /metrics ({status})")
    return int(sum(float(n) for n in found))


@contextlib.contextmanager
def servers_of(row: Row, tmp: Path, tree: Path, extra: list[str],
               floor_builds: dict[str, Path]
               ) -> Iterator[tuple[Server, Server | None, Server | None]]:
    """The server of a row, its Redis (None on the memory engine) and its
    hook backend (None but for ``hooked`` rows); ``floor_builds``: the
    directory each built floor was built in, by server (floor-compiled,
    floor-c)."""
    with contextlib.ExitStack() as stack:
        redis = stack.enter_context(redis_server(tmp)) if row.engine == "redis" else None
        url = f"redis://127.0.0.1:{redis.port}" if redis else None
        backend = (stack.enter_context(hook_backend(tmp, NOFILE)) if row.kind == "hooked"
                   else None)
        if row.kind in VIEWERS:
            extra = [*extra, "--rate-limits", "off"]
        if row.kind == "tickets":
            extra = [*extra, "--auth", "ticket", "--ticket-key", TICKET_KEY]
        if backend is not None:
            extra = [*extra, "--send-hook", f"http://127.0.0.1:{backend.port}/hook",
                     "--send-hook-secret", HOOK_SECRET]
        if row.server == "nchan":
            server = stack.enter_context(nchan_server(
                tmp, NOFILE, False, url, backend.port if backend is not None else None))
        elif row.server == "floor":
            server = stack.enter_context(floor_server(tmp, NOFILE))
        elif row.server in floor_builds:
            server = stack.enter_context(
                built_floor_server(row.server, tmp, NOFILE, floor_builds[row.server]))
        else:
            server = stack.enter_context(liveroom_server(
                tmp, NOFILE, None, f"{url}/0" if url else None, 1, name=row.server,
                extra=extra, env=compiled_env(tree) if row.server == "compiled" else None))
        yield server, redis, backend


# -- one row -----------------------------------------------------------------------


def measure(row: Row, args: argparse.Namespace,
            floor_builds: dict[str, Path] | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"bench-send-{row.name}-") as tmp_, \
            servers_of(row, Path(tmp_), args.compiled_tree, args.serve_arg,
                       floor_builds or {}) as (server, redis, backend):
        tmp = Path(tmp_)
        label = f"{row.server}/{row.engine}"
        script = tmp / "send.lua"
        script.write_text((crowd_script(row) if row.kind in CROWDS and row.server != "nchan"
                           else wrk_script(row)) + pause_script(args.pause_ms))
        if row.kind == "filtered":
            words = made_up_words(FILTER_WORDS, random.Random(47))
            status, answer = http("PUT", f"http://127.0.0.1:{server.port}/v1/admin/filters/bench",
                                  json.dumps({"words": words, "action": "mask"}).encode(),
                                  headers={"Authorization": f"Bearer {ADMIN_TOKEN}",
                                           "Content-Type": "application/json"})
            if status != 200:
                raise SystemExit(f"{label}: the word list was refused: {status} {answer!r}")
        say(label, row.kind, f"started (pid {server.proc.pid}"
            + (f", redis-server pid {redis.proc.pid}" if redis else "")
            + f"); probe: {probe(row, server.port)}")
        if row.kind == "tickets" and row.server != "nchan":
            say(label, row.kind, first_polls(row, server.port))
        if args.warmup > 0:
            run_wrk(server.port, script, args.warmup, args.connections, args.threads)
        wait_quiet(server)
        count0, calls0 = stored(row, server.port), hook_calls(row, server.port)
        profiler = start_profile(row, server, args) if args.profile else None
        (user0, sys0), rcpu0 = server.cpu_times(), redis.cpu() if redis else 0.0
        bcpu0 = backend.cpu() if backend else 0.0
        busy0, t0 = machine_busy(), time.monotonic()
        wrk = run_wrk(server.port, script, args.duration, args.connections, args.threads)
        (user1, sys1), rcpu1 = server.cpu_times(), redis.cpu() if redis else 0.0
        bcpu1 = backend.cpu() if backend else 0.0
        busy1, t1 = machine_busy(), time.monotonic()
        count1, calls1 = stored(row, server.port), hook_calls(row, server.port)
        profile = finish_profile(profiler) if profiler else None
        server.check_alive()
        checked = read_back(row, server.port)
    messages = count1 - count0
    window = t1 - t0
    user, system, rcpu, bcpu = user1 - user0, sys1 - sys0, rcpu1 - rcpu0, bcpu1 - bcpu0
    cpu = user + system
    notes = []
    if not wrk.accepted <= messages <= wrk.accepted + args.connections:
        notes.append(f"{row.name}: the server stored {messages} messages, wrk had "
                     f"{wrk.accepted} 2xx answers (expected at most {args.connections} more)")
    if wrk.non_2xx or wrk.socket_errors:
        notes.append(f"{row.name}: {wrk.non_2xx} non-2xx answers "
                     f"({100 * wrk.non_2xx / max(wrk.requests, 1):.2f} % of the sends; "
                     f"429 for a rate limit in the crowd rows), "
                     f"{wrk.socket_errors} socket errors")
    others = (busy1 - busy0) - cpu - rcpu - bcpu - wrk.client_cpu
    if others / window > OTHERS_BUSY:
        notes.append(f"{row.name}: other processes used {100 * others / window:.0f} % of a "
                     "core during the window")
    if wrk.client_cpu / window > CLIENT_BUSY * args.threads:
        notes.append(f"{row.name}: wrk used {100 * wrk.client_cpu / window:.0f} % of a core: "
                     "the client may set the pace")
    if profile:
        notes.append(f"{row.name}: profiled with py-spy (the CPU figures include its pauses)")
    cpu_us = 1e6 * cpu / messages if messages else float("nan")
    r: dict[str, Any] = {
        "engine": row.engine, "server": row.server, "kind": row.kind,
        "accepted": wrk.accepted, "stored": messages, "non_2xx": wrk.non_2xx,
        "socket_errors": wrk.socket_errors, "seconds": wrk.seconds,
        "rate": wrk.accepted / wrk.seconds, "server_cpu_s": cpu,
        "server_cpu_pct": 100 * cpu / window,
        "cpu_us": cpu_us, "per_core": 1e6 / cpu_us if messages else 0.0,
        "sys_share": system / cpu if cpu else 0.0,
        "redis_cpu_us": 1e6 * rcpu / messages if redis and messages else None,
        "redis_cpu_pct": 100 * rcpu / window if redis else None,
        "backend_cpu_us": 1e6 * bcpu / messages if backend and messages else None,
        "backend_cpu_pct": 100 * bcpu / window if backend else None,
        "hook_calls": calls1 - calls0,
        "client_cpu_pct": 100 * wrk.client_cpu / window,
        "p50_ms": wrk.p50_ms, "p99_ms": wrk.p99_ms, "max_ms": wrk.max_ms,
        "read_back": checked, "notes": notes, "profile": profile}
    say(label, row.kind,
        f"{wrk.accepted} accepted in {wrk.seconds:.1f} s ({r['rate']:,.0f}/s), "
        f"server {r['server_cpu_pct']:.0f} % of a core, {r['cpu_us']:.1f} µs/msg "
        f"({100 * r['sys_share']:.0f} % in the kernel)"
        + (f" + redis {r['redis_cpu_us']:.1f} µs/msg" if redis else "")
        + (f" + backend {r['backend_cpu_us']:.1f} µs/msg" if backend else "")
        + (f" ({calls1 - calls0} calls to it, {messages / (calls1 - calls0):.1f} messages "
           "a call)" if calls1 > calls0 else "")
        + f", p50 {wrk.p50_ms:.2f} ms, p99 {wrk.p99_ms:.2f} ms, wrk "
        f"{r['client_cpu_pct']:.0f} % of a core; read back: {checked}")
    for n in notes:
        say(label, row.kind, f"note: {n}")
    return r


# -- the py-spy profile ------------------------------------------------------------


@dataclass
class Profiler:
    proc: subprocess.Popen[bytes]
    out: Path
    row: Row


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise RuntimeError("py-spy not found (pip install py-spy)")
    return found


def start_profile(row: Row, server: Server, args: argparse.Namespace) -> Profiler | None:
    if row.server == "nchan":
        return None
    out = args.profile / f"{row.name}.txt"
    cmd = [py_spy(), "record", "--format", "raw", "--rate", "200", "--duration",
           str(args.duration + 1), "--pid", str(server.proc.pid), "-o", str(out),
           *(["--native"] if args.profile_native else [])]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)  # attached before the window opens
    return Profiler(proc, out, row)


def finish_profile(profiler: Profiler) -> dict[str, Any]:
    _, err = profiler.proc.communicate(timeout=60)
    if profiler.proc.returncode != 0 or not profiler.out.exists():
        raise RuntimeError(f"py-spy failed: {err.decode(errors='replace').strip()}")
    return summarize_profile(profiler.out)


def summarize_profile(path: Path, top: int = 15) -> dict[str, Any]:
    """Own and total samples per function of py-spy's folded stacks (a
    function counted once per sample in its total however deep it recurses).
    The totals list Python functions only, less those in 95 % of the samples
    or more: the entry chain and the event loop's run.

    A function's own time includes the C code it calls that py-spy does not
    see without ``--native``: ``transport.write`` in the front's ``_write``,
    uvloop's whole loop (reading sockets, dispatching callbacks) in
    ``liveroom/node.py``'s ``run``."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        samples += n
        own[frames[-1]] += n
        for frame in set(frames):
            total[frame] += n
    inner = [(f, n) for f, n in total.most_common()
             if n < 0.95 * samples and ".py" in f.rpartition("(")[2]]
    return {"file": str(path), "samples": samples,
            "own": [(f, n / samples) for f, n in own.most_common(top)],
            "total": [(f, n / samples) for f, n in inner[:top]]}


def print_profile(name: str, p: dict[str, Any]) -> None:
    print(f"\npy-spy, {name}: {p['samples']} samples ({p['file']})")
    for title in ("own", "total"):
        print(f"\n| {title} | function |\n|---:|---|")
        for frame, share in p[title]:
            print(f"| {100 * share:.1f} % | `{frame}` |")


# -- the report --------------------------------------------------------------------


def table(results: list[dict[str, Any]]) -> str:
    def ms(x: float) -> str:
        return f"{x:.2f} ms"

    lines = ["| engine | server | kind | sends accepted | sends/s | server CPU | CPU µs/msg "
             "| redis µs/msg | backend µs/msg | sends/s per core | p50 | p99 |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        redis = f"{r['redis_cpu_us']:.1f}" if r["redis_cpu_us"] is not None else "-"
        backend = f"{r['backend_cpu_us']:.1f}" if r.get("backend_cpu_us") is not None else "-"
        lines.append(f"| {r['engine']} | {r['server']} | {r['kind']} | {r['accepted']:,} "
                     f"| {r['rate']:,.0f} | {r['server_cpu_pct']:.0f} % | {r['cpu_us']:.1f} "
                     f"| {redis} | {backend} | {r['per_core']:,.0f} | {ms(r['p50_ms'])} "
                     f"| {ms(r['p99_ms'])} |")
    return "\n".join(lines)


def load_check(args: argparse.Namespace) -> list[str]:
    """Print the load average; wait (up to --load-wait) while it is above
    --max-load. A note when it stayed above."""
    deadline = time.monotonic() + args.load_wait
    while True:
        load = os.getloadavg()
        print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
              f"({os.cpu_count()} cores; measuring below {args.max_load:g})", flush=True)
        if load[0] <= args.max_load:
            return []
        if time.monotonic() >= deadline:
            return [f"the 1-minute load average was {load[0]:.2f} at the start (above "
                    f"{args.max_load:g}): other work may have run beside the benchmark"]
        time.sleep(10)


def kinds_of(server: str, engine: str, kinds: list[str]) -> tuple[str, ...]:
    """The rows a server has on an engine: Nchan its one publish, the floor
    one normal on the memory engine and none on Redis."""
    if server == "nchan":
        return ("publish", "hooked") if "hooked" in kinds else ("publish",)
    if server in FLOORS:
        return ("normal",) if engine == "memory" else ()
    return tuple(kinds)


def rows_of(args: argparse.Namespace) -> list[Row]:
    return [Row(engine, server, kind)
            for engine in args.engines for server in args.servers
            for kind in kinds_of(server, engine, args.kinds)]


def choose(args: argparse.Namespace, named: bool) -> list[str]:
    """Check what the run needs; notes on servers left out (RuntimeError for
    what is missing and asked for by name)."""
    if shutil.which("wrk") is None:
        raise RuntimeError("wrk not found: this benchmark's client is wrk (apt-get install wrk)")
    if "redis" in args.engines and shutil.which("redis-server") is None:
        raise RuntimeError("redis-server not found for the redis engine "
                           "(apt-get install redis-server, or --engines memory)")
    if "nchan" in args.servers and not nchan_available():
        raise RuntimeError(f"nginx with the nchan module ({NCHAN_MODULE}) not found "
                           "(apt-get install nginx libnginx-mod-nchan, or leave nchan out "
                           "of --servers)")
    notes = []
    if "compiled" in args.servers:
        try:
            check_compiled_tree(args.compiled_tree)
        except RuntimeError as e:
            if named:
                raise
            args.servers.remove("compiled")
            notes.append(f"compiled left out: {e}")
    if "floor-compiled" in args.servers and importlib.util.find_spec("mypyc") is None:
        why = "mypyc not found (pip install mypy)"
        if named:
            raise RuntimeError(f"floor-compiled: {why}")
        args.servers.remove("floor-compiled")
        notes.append(f"floor-compiled left out: {why}")
    floors = [s for s in args.servers if s in FLOORS]
    if floors and "redis" in args.engines:
        notes.append(f"{' and '.join(floors)}: no rows on redis (the floor has no store: "
                     "memory engine only)")
    if args.profile:
        py_spy()
        args.profile.mkdir(parents=True, exist_ok=True)
    return notes


def names(allowed: tuple[str, ...]) -> Any:
    def parse(value: str) -> list[str]:
        chosen = [v.strip() for v in value.split(",") if v.strip()]
        unknown = [v for v in chosen if v not in allowed]
        if unknown or not chosen:
            raise argparse.ArgumentTypeError(
                f"choose from {', '.join(allowed)} (several separated by commas)")
        return list(dict.fromkeys(chosen))

    return parse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--servers", type=names(SERVERS),
                   help="servers to measure, in this order: liveroom (pure build), compiled "
                        "(the compiled tree), nchan, floor (loadtest/floor_server.py, the "
                        "Python floor: no validation, tokens or store; one normal row, "
                        "memory engine only), floor-compiled (the floor compiled by mypyc "
                        "for the run) (default: all five, compiled left out with a note "
                        "when there is no compiled tree, floor-compiled when mypyc is "
                        "missing)")
    p.add_argument("--engines", type=names(ENGINES), default=list(ENGINES),
                   help="memory, redis or both (default: memory,redis)")
    p.add_argument("--kinds", type=names(KINDS), default=list(KINDS),
                   help="liveroom's sends: normal, important, personal, chat (a viewer's "
                        "normal send, no token), hooked (the same with the send hook on, "
                        "to a backend that accepts at once), filtered (chat with one word "
                        "list of 10 000 words), crowd (100 000 uids at random, "
                        "open mode, default rate limits), tickets (20 000 tickets at random, "
                        "ticket mode, default rate limits) (default: all; Nchan always has "
                        "its publish row, and a hooked row with hooked; the floor its one "
                        "normal row)")
    p.add_argument("--duration", type=int, default=10,
                   help="whole seconds wrk sends in each measured window (default 10)")
    p.add_argument("--warmup", type=int, default=1,
                   help="whole seconds of wrk before each window, not measured (default 1; "
                        "0: none)")
    p.add_argument("--connections", type=int, default=16,
                   help="wrk's keep-alive connections, each with one send in flight "
                        "(default 16)")
    p.add_argument("--pause-ms", type=int, default=0, metavar="MS",
                   help="each connection waits MS milliseconds after each answer before "
                        "its next send, in every row of the run (Nchan's too): a paced "
                        "load, at most connections x 1000 / MS sends a second, as many "
                        "viewers send within the default rate limits (20 000 tickets at "
                        "16 connections and 1 ms: under one send a second each); default "
                        "0, as fast as the connections allow")
    p.add_argument("--threads", type=int, default=1,
                   help="wrk's threads (default 1: the other cores stay for the server "
                        "and Redis)")
    p.add_argument("--compiled-tree", type=Path, default=REPO / "build" / "compiled",
                   metavar="DIR",
                   help=f"the compiled tree, made by {BUILD_COMPILED} DIR "
                        "(default: build/compiled in the checkout)")
    p.add_argument("--max-load", type=float, default=0.5 * (os.cpu_count() or 1),
                   help="1-minute load average above which the benchmark waits before "
                        "measuring (default: half the cores)")
    p.add_argument("--load-wait", type=float, default=60.0,
                   help="seconds to wait for the load to fall below --max-load, then "
                        "measure anyway with a note (default 60)")
    p.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                   help="one more argument to liveroom serve (repeat it: --serve-arg="
                        "--important-keep --serve-arg=100000), to see what a setting costs")
    p.add_argument("--profile", type=Path, metavar="DIR",
                   help="record a py-spy profile of each liveroom and floor row's server "
                        "into DIR and "
                        "print its top functions (the CPU figures then include py-spy's "
                        "pauses)")
    p.add_argument("--profile-native", action="store_true",
                   help="with --profile: py-spy --native (C frames too: uvloop, the "
                        "compiled build's modules); system calls then look far dearer than "
                        "the kernel's share of the CPU says (py-spy's stops land in them)")
    p.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = p.parse_args(argv)
    if args.duration <= 0 or args.warmup < 0 or args.connections < 1 or args.threads < 1 \
            or args.pause_ms < 0:
        p.error("--duration, --connections and --threads must be positive, --warmup and "
                "--pause-ms not negative")
    if args.threads > args.connections:
        p.error("--threads must not exceed --connections (wrk gives each thread some)")
    args.compiled_tree = args.compiled_tree.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    named = args.servers is not None
    args.servers = args.servers or list(SERVERS)
    interrupt_on_signals()
    raise_nofile(NOFILE)
    command = shlex.join([Path(sys.executable).name, *(sys.argv if argv is None
                                                      else ["loadtest/bench_send.py", *argv])])
    try:
        notes = choose(args, named)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    stamp = commit()
    started = datetime.datetime.now().astimezone()
    rows = rows_of(args)
    print(f"bench_send: {len(rows)} rows of {args.duration:g} s (+{args.warmup:g} s warm-up), "
          f"{args.connections} connections, commit {stamp}, {versions()}", flush=True)
    for n in notes:
        print(f"note: {n}", flush=True)
    results = []
    try:
        with contextlib.ExitStack() as stack:
            floor_builds = build_floors((row.server for row in rows), stack, "bench-send")
            # After the builds: a compiler's run (and the kernel writing its
            # files back) must not fall in the first rows' windows.
            notes += load_check(args)
            for row in rows:
                results.append(measure(row, args, floor_builds))
    except KeyboardInterrupt:
        print("interrupted: servers stopped", file=sys.stderr)
        return 130
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1

    print()
    print(f"command: {command}")
    print(f"commit:  {stamp}    date: {started:%Y-%m-%d %H:%M %Z}")
    print(f"machine: {versions()}")
    print(f"load:    wrk, {args.connections} connections, {args.threads} thread(s), "
          + (f"each pausing {args.pause_ms} ms after each answer, " if args.pause_ms else "")
          + f"{args.duration:g} s a row after {args.warmup:g} s of warm-up; one room, no "
          f"listeners; body {len(BODY)} bytes (liveroom's request {len(liveroom_doc('normal'))})")
    print()
    print(table(results))
    for r in results:
        if r.get("hook_calls"):
            print(f"\n{r['engine']}-{r['server']}-{r['kind']}: {r['hook_calls']:,} calls to the "
                  f"send hook's backend, {r['stored'] / r['hook_calls']:.1f} messages a call")
    notes += [n for r in results for n in r["notes"]]
    if notes:
        print()
        for n in notes:
            print(f"note: {n}")
    for r in results:
        if r["profile"]:
            print_profile(f"{r['engine']}-{r['server']}-{r['kind']}", r["profile"])
    if args.json:
        args.json.write_text(json.dumps({
            "command": command, "commit": stamp, "date": started.isoformat(),
            "machine": versions(), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
