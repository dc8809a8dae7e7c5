"""Load test for liveroom: many listeners long-poll one room while a few senders chat.

Start a server first (``liveroom serve``, http://127.0.0.1:8080 by default; it
prints the publisher token needed for important messages), then, from the repo
root::

    locust -f loadtest/locustfile.py --headless -u 200 -r 50 -t 60s \\
        --host http://127.0.0.1:8080 --csv loadtest/results/run

``-t`` bounds the run; aim it at 127.0.0.1 (or a host you own) only. Add
``--processes N`` once one locust process saturates a core (about 1.2-1.5k
polls/s or 5k users each). The default weights give one sender per 50
listeners (``-u 200`` runs 4 senders, so about 4 messages a second); naming
classes on the command line (``... ListenerUser``) or ``--class-picker`` in the
web UI runs only some of them.

The default load runs clean against a default ``liveroom serve``: a sender is
a crowd of chatters, each as fast as a person (one message every
``LOADTEST_CHAT_INTERVAL``, 20 s: 3 a minute, 180 an hour, inside the server's
default per-uid limits of 5 a second, 30 a minute and 300 an hour). A 429 is
an answer, not a failure: the server's rate limit saying no, counted in a row
of its own (``POST /messages [429]``) and in the summary.

Users
    ``ListenerUser`` polls ``GET /v1/rooms/{room}/poll`` in a loop: a first poll
    without cursors, then at once again with the ``epoch``, ``seq``, ``iseq`` and
    ``ctx`` of the last answer, as a real client does (the server does the
    waiting). ``SenderUser`` posts ``{"uid", "body": {"text", "sent_at"}}`` to
    ``/v1/rooms/{room}/messages``, every Nth one important, as its chatters in
    turn (``ceil(LOADTEST_SEND_RATE x LOADTEST_CHAT_INTERVAL)`` uids of its own).
    ``ImportantSenderUser`` (only with ``LOADTEST_IMPORTANT_RATE``; one of it)
    posts only important messages, evenly spaced, at its own phase.

Environment (``LOADTEST_*``: the load's own; a ``LIVEROOM_*`` name is a server
setting's, read here only for the publisher token it sets)
    ``LOADTEST_ROOM``              room every user joins (default ``loadtest``)
    ``LOADTEST_POLL_TIMEOUT``      the poll's ``timeout`` in seconds, 1-60 (default 25)
    ``LOADTEST_SEND_RATE``         sends per second per sender (default 1)
    ``LOADTEST_CHAT_INTERVAL``     seconds between two sends of one chatter (uid) of a
                                   sender (default 20); 0: each sender is one uid
    ``LOADTEST_IMPORTANT_EVERY``   every Nth send is important (default 0: never)
    ``LIVEROOM_PUBLISHER_TOKEN``   bearer token for important sends: the server's
                                   own setting (``--publisher-token``), same value
    ``LOADTEST_LISTENER_WEIGHT``   weight of ListenerUser (default 50)
    ``LOADTEST_SENDER_WEIGHT``     weight of SenderUser (default 1; 0 leaves senders out)
    ``LOADTEST_SENDERS``           exactly this many SenderUsers, whatever the weights
                                   (default 0: by weight); they start first
    ``LOADTEST_SEND_AS_PUBLISHER`` 1: normal sends carry the publisher token too
    ``LOADTEST_IMPORTANT_RATE``    important messages a second sent by one extra
                                   ``ImportantSenderUser`` (default 0: no such user)
    ``LOADTEST_REPORT``            write every poll's figures as JSON to this file
                                   when locust quits (``.PID`` appended on workers)
    ``LOADTEST_HOSTS``             comma-separated base URLs (``http://127.0.0.2:8080,
                                   http://127.0.0.3:8080``): users are spread over
                                   them in turn, instead of all going to ``--host``.
                                   One client address reaches one server address
                                   through at most ~28 000 ephemeral ports; every
                                   further server address (or port) adds as many.

Rows of the statistics (the console table, and ``run_stats.csv`` with the
columns Type, Name, Request Count, Failure Count, Median/Average/Min/Max Response
Time in ms, Average Content Size in bytes, Requests/s, Failures/s, then the
percentiles):

    ``GET /poll [first]``, ``GET /poll``
        Long polls. Their response time includes the hold: an idle room answers
        after ``timeout`` seconds, so these times measure the server's waiting,
        not its speed. Anything but 200 is a failure.
    ``POST /messages``, ``POST /messages [important]``
        Sends; anything but 201 (or 429) is a failure.
    ``POST /messages [429]``, ``POST /messages [important] [429]``
        Sends a rate limit refused (the server's per-uid windows, or nginx's
        per-address one): answers, not failures; the sender keeps its pace.
    ``DELIVER normal``, ``DELIVER important``
        One row per answer that carried messages of that kind, its "response
        time" being the delivery latency of the oldest of them (the answer's
        worst): arrival at the listener minus the sender's ``sent_at`` (so
        sender and listener clocks must agree: one host, or synced hosts), and
        its "content size" the number of messages, so the messages delivered
        are Request Count x Average Content Size (printed exactly when locust
        quits). It includes the adaptive hold (up to the room's
        ``interval_ms``) on purpose. Messages in first-poll and reset answers
        are backlog, not live delivery, and are not counted.
    ``GAP normal``, ``GAP important``
        One row per answer whose ``gap`` / ``igap`` was above zero; "Average
        Content Size" is the mean number of messages skipped, so the total is
        Request Count x Average Content Size (also printed when locust quits).
        Important messages should never show here.
    ``RESET poll``
        One row per answer with ``"reset": true`` (the room's log restarted, or a
        cursor ran past the store's head); the listener goes on from the new cursors.
    ``HOLD interval_ms``
        One row per answer, its "response time" the answer's ``interval_ms``:
        the adaptive hold's interval of the room's tier at that moment (0 for a
        plain long poll), so the median shows which tier the room was in.

With ``LOADTEST_REPORT`` set, each locust process also keeps one record per
poll (listener, when it was sent and answered, the pause since the listener's
previous answer, messages and important messages carried, ``interval_ms``), one
per important message received (listener, when, the sender's ``sent_at``) and
the ``sent_at`` of every important message sent, and writes them as JSON when
it quits: ``loadtest/bench_hold.py`` reads them to count
requests per listener per minute over a window of its choice.

The ``Aggregated`` row mixes all of these, so read the rows one by one.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import random
import secrets
import time
from typing import Any
from urllib.parse import quote, urlencode

import gevent
from locust import FastHttpUser, constant_throughput, events, task
from locust.env import Environment
from locust.runners import WorkerRunner
from locust.stats import StatsEntry


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    return float(raw) if raw else default


ROOM = os.environ.get("LOADTEST_ROOM", "").strip() or "loadtest"
POLL_TIMEOUT = _env_int("LOADTEST_POLL_TIMEOUT", 25)
SEND_RATE = _env_float("LOADTEST_SEND_RATE", 1.0)
CHAT_INTERVAL = _env_float("LOADTEST_CHAT_INTERVAL", 20.0)
IMPORTANT_EVERY = _env_int("LOADTEST_IMPORTANT_EVERY", 0)
PUBLISHER_TOKEN = os.environ.get("LIVEROOM_PUBLISHER_TOKEN", "").strip()
LISTENER_WEIGHT = _env_int("LOADTEST_LISTENER_WEIGHT", 50)
SENDER_WEIGHT = _env_int("LOADTEST_SENDER_WEIGHT", 1)
SENDERS = _env_int("LOADTEST_SENDERS", 0)
SEND_AS_PUBLISHER = os.environ.get("LOADTEST_SEND_AS_PUBLISHER", "").strip() in ("1", "yes")
IMPORTANT_RATE = _env_float("LOADTEST_IMPORTANT_RATE", 0.0)
REPORT = os.environ.get("LOADTEST_REPORT", "").strip()
HOSTS = tuple(host.strip().rstrip("/") for host in os.environ.get("LOADTEST_HOSTS", "").split(",")
              if host.strip())

_OLD = [f"LIVEROOM_{name}" for name in (
    "ROOM", "SEND_RATE", "IMPORTANT_EVERY", "LISTENER_WEIGHT", "SENDER_WEIGHT", "SENDERS",
    "SEND_AS_PUBLISHER", "IMPORTANT_RATE", "REPORT", "HOSTS") if f"LIVEROOM_{name}" in os.environ]
if _OLD:
    # LIVEROOM_POLL_TIMEOUT is not among them: it is the server's --poll-timeout.
    raise ValueError(f"{', '.join(_OLD)}: the load test's variables are LOADTEST_* "
                     f"(LOADTEST_POLL_TIMEOUT is the poll's timeout)")
if not 1 <= POLL_TIMEOUT <= 60:
    raise ValueError(f"LOADTEST_POLL_TIMEOUT must be 1-60 seconds, not {POLL_TIMEOUT}")
if SEND_RATE <= 0:
    raise ValueError(f"LOADTEST_SEND_RATE must be above 0, not {SEND_RATE}")
if IMPORTANT_RATE < 0 or SENDERS < 0 or CHAT_INTERVAL < 0:
    raise ValueError("LOADTEST_IMPORTANT_RATE, LOADTEST_SENDERS and LOADTEST_CHAT_INTERVAL "
                     "cannot be negative")
CHATTERS = max(1, math.ceil(SEND_RATE * CHAT_INTERVAL))
"""The uids a sender speaks as, in turn: each sends once every CHAT_INTERVAL."""
for _host in HOSTS:
    if not _host.startswith(("http://", "https://")):
        raise ValueError(f"LOADTEST_HOSTS holds {_host!r}: give base URLs, http://HOST:PORT")

ROOM_PATH = f"/v1/rooms/{quote(ROOM, safe='')}"
MAX_BACKOFF = 10.0
"""Longest pause after a failed poll or send (seconds), whatever Retry-After says."""

_polls: list[tuple[int, float, float, float, int, int, int]] = []
"""With LOADTEST_REPORT: (listener, sent, answered, pause since its previous
answer, normal messages, important messages, interval_ms) of every 200 poll
(time.time() seconds; pause -1 for a first poll)."""
_important: list[tuple[int, float, float]] = []
"""With LOADTEST_REPORT: (listener, received, the sender's sent_at) of every
important message delivered live (not in a first-poll or reset answer)."""
_important_sent: list[float] = []
"""With LOADTEST_REPORT: sent_at of every important send the server took (201)."""

_RUN = secrets.token_hex(3)
"""Tells apart the uids of locust runs on several hosts (``--master``/``--worker``)."""
_uid_numbers = itertools.count(1)
_listener_numbers = itertools.count()
_host_turns = itertools.count()


def _base() -> str:
    """The base URL the next user talks to: one of LOADTEST_HOSTS in turn, or
    "" (locust's ``--host``)."""
    return HOSTS[next(_host_turns) % len(HOSTS)] if HOSTS else ""

logger = logging.getLogger("liveroom.loadtest")


def _new_uid(kind: str) -> str:
    # The pid as well: ``--processes N`` forks after importing this file, so the
    # forked workers share _RUN and the counter's start.
    return f"{kind}-{_RUN}-{os.getpid()}-{next(_uid_numbers)}"


def _retry_after(headers: Any) -> float:
    """Seconds to wait before trying again, from a Retry-After header or 1 s."""
    try:
        value = float(headers.get("Retry-After") or 1.0)
    except (TypeError, ValueError, AttributeError):
        value = 1.0
    return min(max(value, 0.1), MAX_BACKOFF)


def _describe(response: Any) -> str:
    """A short failure text, so locust groups failures by kind, not by detail."""
    status = response.status_code
    if not status:
        return f"no answer: {type(getattr(response, 'error', None)).__name__}"
    try:
        code = response.json().get("error")
    except Exception:  # not JSON, or not an object: the status alone says enough
        code = None
    return f"status {status} {code}" if isinstance(code, str) else f"status {status}"


def _fire(
    environment: Environment, request_type: str, name: str, time_ms: float, length: int
) -> None:
    """Record a figure that is not an HTTP request as a row of locust's statistics."""
    environment.events.request.fire(  # type: ignore[no-untyped-call]
        request_type=request_type,
        name=name,
        response_time=time_ms,
        response_length=length,
        exception=None,
        context={},
    )


class ListenerUser(FastHttpUser):
    """A viewer: long-polls the room and records how late each message arrives."""

    weight = LISTENER_WEIGHT
    host = HOSTS[0] if HOSTS else None  # with LOADTEST_HOSTS, --host may be left out
    # Above the hold: the poll timeout plus the adaptive hold's interval plus slack.
    network_timeout = max(75.0, POLL_TIMEOUT + 50.0)

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.uid = _new_uid("listener")
        self.cursor: dict[str, str] | None = None
        """epoch, seq, iseq, ctx and pseq of the last answer (and its spread, in
        a vip room); None before the first poll."""
        self.pause = 0.0
        self.number = next(_listener_numbers)
        self.path = f"{_base()}{ROOM_PATH}/poll?"
        self.answered_at = 0.0
        """When the last answer came back (time.time()); 0 before the first."""

    def wait_time(self) -> float:
        # Poll again at once after an answer; back off only after a failure.
        pause, self.pause = self.pause, 0.0
        return pause

    @task
    def poll(self) -> None:
        params: dict[str, str] = {"uid": self.uid}
        first = self.cursor is None
        if self.cursor is not None:
            params.update(self.cursor)
            params["timeout"] = str(POLL_TIMEOUT)
        name = "/poll [first]" if first else "/poll"
        url = self.path + urlencode(params)
        sent = time.time()
        with self.client.get(url, name=name, catch_response=True) as response:
            if response.status_code != 200:
                response.failure(_describe(response))
                self._after_failure(response.status_code, response.headers)
                return
            try:
                answer = response.json()
                cursor = {key: str(answer[key]) for key in ("epoch", "seq", "iseq")}
                if answer.get("ctx") is not None:
                    cursor["ctx"] = str(answer["ctx"])
                if answer.get("pseq") is not None:  # the personal cursor
                    cursor["pseq"] = str(answer["pseq"])
                # A vip room's routing hint, echoed so a load balancer hashing
                # room and hint spreads the room's listeners over the nodes.
                if answer.get("spread") is not None:
                    cursor["spread"] = str(answer["spread"])
            except (ValueError, KeyError, TypeError) as exc:
                response.failure(f"malformed answer: {exc!r}")
                self.cursor = None
                self.pause = 1.0
                return
            response.success()
        answered = time.time()
        self.cursor = cursor
        self._record(answer, backlog=first)
        interval_ms = answer.get("interval_ms")
        interval_ms = interval_ms if isinstance(interval_ms, int) else -1
        if interval_ms >= 0:
            _fire(self.environment, "HOLD", "interval_ms", float(interval_ms), 0)
        if REPORT:
            pause = sent - self.answered_at if self.answered_at else -1.0
            _polls.append((self.number, sent, answered, pause,
                           len(answer.get("messages") or ()),
                           len(answer.get("important") or ()), interval_ms))
        self.answered_at = answered

    def _after_failure(self, status: int, headers: Any) -> None:
        if 400 <= status < 500 and status != 429:
            # The server refused our cursors or names: start over with a first poll.
            self.cursor = None
            self.pause = 1.0
        else:
            # Connection error (status 0), 503 or the like: same cursors, a bit later.
            self.pause = _retry_after(headers)

    def _record(self, answer: dict[str, Any], *, backlog: bool) -> None:
        environment = self.environment
        reset = bool(answer.get("reset"))
        if reset:
            _fire(environment, "RESET", "poll", 0.0, 0)
        for kind, key in (("normal", "gap"), ("important", "igap")):
            skipped = answer.get(key)
            if isinstance(skipped, int) and skipped > 0:
                _fire(environment, "GAP", kind, 0.0, skipped)
        if backlog or reset:
            return
        now = time.time()
        for kind, key in (("important", "important"), ("normal", "messages")):
            # One row per answer, not per message: at the top tier an answer
            # carries ~90 messages, and a row per message was most of the
            # listener's CPU (bench_locust.py).
            delivered = 0
            oldest = now
            for message in answer.get(key) or ():
                body = message.get("body") if isinstance(message, dict) else None
                sent_at = body.get("sent_at") if isinstance(body, dict) else None
                if isinstance(sent_at, int | float) and not isinstance(sent_at, bool):
                    delivered += 1
                    oldest = min(oldest, sent_at)
                    if REPORT and kind == "important":
                        _important.append((self.number, now, float(sent_at)))
            if delivered:
                _fire(environment, "DELIVER", kind, (now - oldest) * 1000.0, delivered)


class _Sender(FastHttpUser):
    """What both senders share: their uids, a count, and one send."""

    abstract = True
    host = HOSTS[0] if HOSTS else None
    chatters = 1

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.uids = [_new_uid("sender") for _ in range(self.chatters)]
        self.sent = 0
        self.path = f"{_base()}{ROOM_PATH}/messages"

    def _post(self, *, important: bool) -> None:
        sent_at = time.time()
        uid = self.uids[self.sent % len(self.uids)]
        payload: dict[str, Any] = {
            "uid": uid,
            "body": {"text": f"message {self.sent} from {uid}", "sent_at": sent_at},
        }
        headers: dict[str, str] = {}
        if important:
            payload["important"] = True
        if important or SEND_AS_PUBLISHER:
            headers["Authorization"] = f"Bearer {PUBLISHER_TOKEN}"
        name = "/messages [important]" if important else "/messages"
        with self.client.post(
            self.path,
            json=payload,
            headers=headers,
            name=name,
            catch_response=True,
        ) as response:
            if response.status_code == 201:
                response.success()
                if REPORT and important:
                    _important_sent.append(sent_at)
            elif response.status_code == 429:
                # A rate limit saying no, as it should: an answer, in a row of
                # its own (request_meta is locust's public record of the request).
                response.request_meta["name"] = f"{name} [429]"
                response.success()
            else:
                response.failure(_describe(response))


class SenderUser(_Sender):
    """Chatters: send at LOADTEST_SEND_RATE, every LOADTEST_IMPORTANT_EVERY-th
    important, as CHATTERS uids in turn, so that each uid sends once every
    LOADTEST_CHAT_INTERVAL, as a person chats (the server limits each uid)."""

    weight = SENDER_WEIGHT
    chatters = CHATTERS
    fixed_count = SENDERS
    wait_time = constant_throughput(SEND_RATE)

    @task
    def send(self) -> None:
        self.sent += 1
        important = IMPORTANT_EVERY > 0 and self.sent % IMPORTANT_EVERY == 0
        self._post(important=important)


class ImportantSenderUser(_Sender):
    """The business backend's system signals: one user sending only important
    messages at LOADTEST_IMPORTANT_RATE a second (not run when that is 0)."""

    abstract = IMPORTANT_RATE <= 0
    fixed_count = 1

    def on_start(self) -> None:
        # Both senders start together and keep their pace: on the chat
        # sender's phase every important message would land with a normal one
        # (one answer for two). So this one keeps its own phase, a quarter to
        # three quarters of a chat period later (constant_throughput would
        # snap back to the user's start).
        gevent.sleep(random.uniform(0.25, 0.75) / SEND_RATE)
        self.next_send = time.time()

    def wait_time(self) -> float:
        self.next_send += 1.0 / (IMPORTANT_RATE or 1.0)
        return max(0.0, self.next_send - time.time())

    @task
    def send(self) -> None:
        self.sent += 1
        self._post(important=True)


def _check_settings(environment: Environment, **_kwargs: Any) -> None:
    if (IMPORTANT_EVERY > 0 or IMPORTANT_RATE > 0 or SEND_AS_PUBLISHER) and not PUBLISHER_TOKEN:
        logger.warning(
            "important sends (LOADTEST_IMPORTANT_EVERY, LOADTEST_IMPORTANT_RATE) or "
            "LOADTEST_SEND_AS_PUBLISHER without LIVEROOM_PUBLISHER_TOKEN: "
            "those sends will fail with 401"
        )


def _write_report(environment: Environment, **_kwargs: Any) -> None:
    if not REPORT:
        return
    path = f"{REPORT}.{os.getpid()}" if isinstance(environment.runner, WorkerRunner) else REPORT
    fields = ["listener", "sent", "answered", "pause", "messages", "important", "interval_ms"]
    with open(path, "w") as out:
        json.dump({"room": ROOM, "pid": os.getpid(), "poll_fields": fields, "polls": _polls,
                   "important_fields": ["listener", "received", "sent_at"],
                   "important": _important, "important_sent": _important_sent},
                  out)


def _print_summary(environment: Environment, **_kwargs: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        return  # the master holds the merged figures
    entries = environment.stats.entries
    empty = StatsEntry(environment.stats, "", "")
    lines = [f"liveroom load test on room {ROOM!r} (poll timeout {POLL_TIMEOUT} s):"]
    for kind in ("important", "normal"):
        # entries.get, not stats.get: the latter would add empty rows to the CSV.
        deliver = entries.get((kind, "DELIVER"), empty)
        gap = entries.get((kind, "GAP"), empty)
        line = f"  {kind:9}  delivered {deliver.total_content_length}"
        if deliver.num_requests:
            line += (
                f" in {deliver.num_requests} answers, latency of an answer's oldest ms"
                f" median {deliver.get_response_time_percentile(0.5):.0f}"
                f" p99 {deliver.get_response_time_percentile(0.99):.0f}"
                f" max {deliver.max_response_time:.0f}"
            )
        line += f"; skipped (gap) {gap.total_content_length} in {gap.num_requests} answers"
        lines.append(line)
    resets = entries.get(("poll", "RESET"), empty)
    lines.append(f"  resets     {resets.num_requests}")
    for kind, name in (("normal", "/messages"), ("important", "/messages [important]")):
        sent = entries.get((name, "POST"), empty)
        limited = entries.get((f"{name} [429]", "POST"), empty)
        if sent.num_requests or limited.num_requests:
            lines.append(f"  sent {kind:9}  {sent.num_requests - sent.num_failures} stored (201), "
                         f"{limited.num_requests} refused by a rate limit (429), "
                         f"{sent.num_failures} failed")
    print("\n".join(lines))


events.test_start.add_listener(_check_settings)  # type: ignore[no-untyped-call]
events.quitting.add_listener(_print_summary)  # type: ignore[no-untyped-call]
events.quitting.add_listener(_write_report)  # type: ignore[no-untyped-call]
