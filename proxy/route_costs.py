"""What each route may cost a node and its store: one table, every route.

Each row of :data:`COSTS` names a route (``METHOD /path`` as aiohttp's router
spells it; the front serves three of them too), who may call it, what it may
create in the store and in the node and for how long, and the settings that
bound that creation. ``tests/hostile/test_route_costs.py`` holds the table to
the node's routes both ways (a new route without its row fails) and each
bound to a declared setting; docs/operations.md shows it, made by
``python -m proxy.route_costs``.

This is the first part of issue 44 ("bounded by construction"): the table
says what each route is allowed; the suite that attacks every route from it,
and limits enforced from it, come next. Where a route is known to create more
than its row allows, the row says so under ``known``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from liveroom.settings import flag_of
from liveroom.settings_docs import spliced


@dataclass(frozen=True, slots=True)
class Sample:
    """A request a route takes, as the hostile suite sends it: ``{uid}`` in
    the query and the body's strings stands for a uid; the path's
    parameters take a room, a uid, ``1`` for a seq (and for a held
    message's id), a file the node serves, and the room's name for any
    other ``{name}`` (a word list's). ``token``: the credential it carries
    where it has one to give: ``listener`` (a uid of its own: the query's or
    body's in ``open`` mode, a ticket in ``ticket`` mode), ``publisher``,
    ``admin`` or ``metrics`` ("": none)."""

    query: str = ""
    body: Mapping[str, object] | None = None
    token: str = ""


@dataclass(frozen=True, slots=True)
class RouteCost:
    """One route's row (see the module's docstring)."""

    route: str
    """``METHOD /path``, as aiohttp's router spells it."""
    who: str
    """Who may call it: anyone, a ticket, the publisher token, the admin token."""
    creates: str
    """What it may create in the store and in the node, and for how long
    ("nothing": a read)."""
    bounds: tuple[str, ...] = ()
    """The settings (``liveroom.settings``) that bound what it creates or costs."""
    room: str = ""
    """What the route asks of the room its path names (``""``: it names none):
    :data:`EXISTS` (refused 404 unless the room exists, before anything is
    created: the node enforces it from this row), :data:`CREATES` (it may
    create the room, within the new-room windows), or :data:`ANY` (a made-up
    name costs what a real one does, within its row's bounds)."""
    known: str = ""
    """A way it is known to pass its bounds, until fixed."""
    sample: Sample = Sample()
    """A request the route takes (the hostile suite sends it, and variants)."""
    cpu_us: int = 1000
    """µs of the node's CPU one request may cost, at most, its connection's
    accept and close included (a hostile client opens one a request): the
    pure build, under a flood of made-up rooms (``loadtest/bench_hostile.py``
    measures it, 200 to 500 µs a route on the 2-core machine of the figures
    in docs/performance.md)."""
    keeps: int = 0
    """Bytes of node memory one request may leave behind once answered,
    at most: a made-up room's entry in the room cache, say (within that
    cache's bound). The hostile suite measures it, per request, over a
    flood of made-up rooms and uids."""

    @property
    def method(self) -> str:
        return self.route.partition(" ")[0]

    @property
    def finishes(self) -> bool:
        """Whether the route, once its request is read whole, runs to its end
        whatever the client does then (a reset, a close): every route that
        writes. Its answer may go nowhere, but what it counted, created and
        told is never left half done (the front and aiohttp alike enforce it
        from this row)."""
        return self.method in _WRITES


EXISTS: Final = "exists"
"""The route's room must exist: a 404 ``no_such_room`` otherwise, asked of the
node's room cache as a first poll asks it (no store write)."""
CREATES: Final = "creates"
"""The route may create its room, within the new-room windows."""
ANY: Final = "any"
"""The route takes any room name: a made-up one costs what a real one does."""
_WRITES: Final = frozenset(("POST", "PUT", "DELETE"))

_AS_ADMIN: Final = Sample(token="admin")
_CACHED: Final = 1536
"""A made-up room's place in the room cache (its absent snapshot, about 1.3
KiB), kept within ``--rooms-max`` (the least recently read idle room goes)."""
_HOT: Final = 600
"""The listener path's budget (a poll, a send, a like): tighter than the rest's."""
_NEW_ROOM: Final = 4096
"""A room a send created (its log in the node, on the memory engine), within
the new-room windows."""
_ANYONE: Final = "anyone (open mode); a ticket for the room (ticket mode)"
_BACKEND: Final = "the publisher or admin token; a ticket with publish for the room"
_ADMIN: Final = "the admin token"
_NOTHING: Final = "nothing"
_FILE: Final = "nothing: a file the node holds in memory from its start"
_EVENT: Final = (
    "; with --webhook, its event (a few hundred bytes) in the room's list until moved to the "
    "outbox (at once, or by the delivering node's sweep within a minute), there until "
    "delivered or given up after --webhook-retry-for (1 000 000 waiting at most; the newest "
    "100 000 given up kept)")
"""What an action with a webhook event adds to its row (liveroom/events.py)."""

COSTS: Final = (
    # -- the listener routes (the front, and aiohttp on connections handed over) --
    RouteCost(
        "GET /v1/rooms/{room}/poll", _ANYONE,
        "node: a held poll (its connection and hold, about 3.4 KiB) until its timeout; "
        "the room in its sect's cache while read; the uid's presence until --online-ttl "
        "after its last poll. Kernel: what its answers fill of the connection's send "
        "buffer (twice --send-buffer at most), until a client that does not read them is "
        "cut. Store: presence shards and viewers history, written in batches by statsvr (a "
        "poll itself touches no store)",
        ("connections_max", "connections_per_ip", "holds_per_listener", "holds_per_uid",
         "held_max", "rooms_max", "poll_timeout_max", "answer_bytes_max", "online_ttl",
         "send_buffer", "write_timeout"), room=ANY,
        sample=Sample("uid={uid}&timeout=1", token="listener"), keeps=_CACHED, cpu_us=_HOT),
    RouteCost(
        "POST /v1/rooms/{room}/messages", "anyone naming its uid (open mode); a ticket "
        "(ticket mode); the publisher or admin token for the backend",
        "store: one log entry (the room's log is capped; important ones kept their "
        "window, personal ones to the room's cap), its client_msg_id for --dedup-ttl, "
        "and a new room's keys until --empty-room-ttl (its sender's alone) or "
        "--room-ttl; or, held for review (a word filter's or the send hook's call), one "
        "message in the room's review queue (its oldest dropped past --review-max) until "
        "--room-ttl. Node: the message in the room's cache. With --send-hook, a send that is "
        "not the backend's waits for the backend's verdict, --send-hook-timeout at most (its "
        "place in the next call's batch, and a share of one of --send-hook-calls keep-alive "
        "calls), then the verdict's extra stored with it; a sender the store refused for its "
        "rate limits is remembered until its windows free (about 200 B, 100 000 senders at "
        "most)" + _EVENT + " (a hold's, and a message pushed out of a full queue's)",
        ("rate_limits", "room_rate_limit", "rooms_per_uid", "rooms_per_address",
         "rooms_per_node", "max_message_bytes", "log_cap", "personal_hard_cap",
         "personal_node_cap", "dedup_ttl", "room_ttl", "empty_room_ttl", "review_max",
         "send_hook_timeout", "send_hook_batch", "send_hook_calls", "send_hook_extra_bytes",
         "webhook_retry_for"),
        room=CREATES,
        sample=Sample(body={"uid": "{uid}", "body": "hi"}, token="listener"), keeps=_NEW_ROOM,
        cpu_us=_HOT),
    RouteCost(
        "POST /v1/rooms/{room}/likes", "anyone naming its uid (open mode); a ticket",
        "store: the room's likes total and series, --history-ttl after the last write. "
        "Node: the room's pending taps until the next flush, the uid's windows (past the "
        "table's bound a uid not seen in this window is evicted, else the newest), the "
        "room kept fresh for a minute (plus --poll-timeout-max) after it was last asked about",
        ("likes_requests", "likes_taps", "likes_rooms_max", "likes_uids_max",
         "likes_flush", "history_ttl", "rooms_max"), room=EXISTS,
        sample=Sample(body={"uid": "{uid}", "count": 1}, token="listener"), keeps=_CACHED,
        cpu_us=_HOT),
    # -- the rest of the listener and backend API (aiohttp) ----------------------
    RouteCost(
        "POST /v1/rooms/{room}/gifts", _BACKEND,
        "store: the giver's score and the room's gift total, --history-ttl after the "
        "last write; an important message when the gift is worth --gift-important"
        + _EVENT + " (a gift worth --webhook-gift-min)",
        ("gift_important", "history_ttl", "max_message_bytes", "webhook_gift_min",
         "webhook_retry_for"), room=EXISTS,
        sample=Sample(body={"uid": "{uid}", "value": 1, "gift": "rose"}, token="publisher"),
        keeps=_CACHED),
    RouteCost("GET /v1/rooms/{room}/leaderboard", "anyone", _NOTHING, room=ANY),
    RouteCost(
        "GET /v1/rooms/{room}/online", "anyone (open mode); a ticket for the room or the "
        "admin token (ticket mode)",
        "node: the room's merged online view, kept while it is read", ("online_ttl",), room=ANY,
        sample=Sample(token="listener"), keeps=_CACHED),
    RouteCost("GET /v1/rooms/{room}/stats", "anyone",
              "node: the room's merged online view, kept while it is read", room=ANY,
              keeps=_CACHED),
    RouteCost("GET /v1/rooms/{room}/stats/online", "anyone", _NOTHING, room=ANY),
    RouteCost("GET /v1/rooms/{room}/stats/likes", "anyone", _NOTHING, room=ANY),
    RouteCost("GET /v1/rooms/{room}/broadcasts", "anyone", _NOTHING, room=ANY),
    RouteCost(
        "DELETE /v1/rooms/{room}/messages/{seq}", "its sender (its own normal messages, "
        "within --recall-window, not banned or muted); moderators and the backend",
        "store: the message's tombstone in place of its body and a notice to every "
        "listener, in one step; a moderator's or the backend's recall also an audit entry "
        "(the room keeps its newest 1 000; a sender's own recall is none). Node: the "
        "sender's recall windows" + _EVENT,
        ("recall_window", "rate_limits", "webhook_retry_for"), room=EXISTS,
        sample=Sample("uid={uid}", token="listener"), keeps=_CACHED),
    RouteCost(
        "DELETE /v1/rooms/{room}/personal/{seq}", "the publisher or admin token",
        "store: the personal message's tombstone and a notice to its addressee (one "
        "step), an audit entry" + _EVENT, ("webhook_retry_for",), room=EXISTS,
        sample=Sample(token="publisher"), keeps=_CACHED),
    # -- health, metrics and pages -----------------------------------------------
    RouteCost("GET /healthz", "anyone",
              "nothing: the store is asked at most once a second, whatever the rate"),
    RouteCost("GET /metrics", "the metrics token (anyone with --metrics-public)", _NOTHING,
              ("metrics_token", "metrics_public"),
        sample=Sample(token="metrics")),
    RouteCost("GET /", "anyone", _FILE),
    RouteCost("GET /openapi.json", "anyone", _FILE),
    RouteCost("GET /admin", "anyone (the page; its calls need the admin token)", _FILE),
    RouteCost("GET /rooms/{room}", "anyone", _FILE, room=ANY),
    RouteCost("GET /static/{name}", "anyone", _FILE),
    RouteCost("GET /static/vendor/{lib}/{name}", "anyone", _FILE),
    # -- the operators' and moderators' API ----------------------------------------
    RouteCost("GET /v1/admin/nodes", _ADMIN, _NOTHING,
        sample=_AS_ADMIN),
    RouteCost("GET /v1/admin/rooms", _ADMIN, _NOTHING,
        sample=_AS_ADMIN),
    RouteCost("GET /v1/admin/vip", _ADMIN, _NOTHING,
        sample=_AS_ADMIN),
    RouteCost("GET /v1/admin/vip/{room}", _ADMIN, _NOTHING, room=ANY,
        sample=_AS_ADMIN),
    RouteCost("PUT /v1/admin/vip/{room}", _ADMIN,
              "store: the room's sect record until removed" + _EVENT,
              ("webhook_retry_for",), room=ANY,
        sample=_AS_ADMIN),
    RouteCost("DELETE /v1/admin/vip/{room}", _ADMIN, "store: the sect record's removal" + _EVENT,
              ("webhook_retry_for",), room=ANY,
        sample=_AS_ADMIN),
    RouteCost("PUT /v1/admin/vip/{room}/pin", _ADMIN,
              "store: the room's pin until unpinned" + _EVENT, ("webhook_retry_for",),
              room=ANY,
        sample=Sample("sect=vip", token="admin")),
    RouteCost("DELETE /v1/admin/vip/{room}/pin", _ADMIN, "store: the pin's removal" + _EVENT,
              ("webhook_retry_for",), room=ANY,
        sample=_AS_ADMIN),
    RouteCost("POST /v1/admin/rooms/{room}/start", _ADMIN,
              "store: a new broadcast's log, --empty-room-ttl until its first message"
              + _EVENT, ("empty_room_ttl", "webhook_retry_for"), room=CREATES,
        sample=_AS_ADMIN),
    RouteCost("POST /v1/admin/rooms/{room}/end", _ADMIN,
              "store: the ended broadcast's archive (viewers, likes, gifts, its top 100 "
              "givers, the audit) for --history-ttl" + _EVENT,
              ("history_ttl", "webhook_retry_for"), room=ANY,
        sample=_AS_ADMIN),
    RouteCost("GET /v1/admin/rooms/{room}/messages", _ADMIN, _NOTHING, room=ANY,
        sample=_AS_ADMIN),
    RouteCost("GET /v1/admin/rooms/{room}/moderation", _ADMIN, _NOTHING, room=ANY,
        sample=_AS_ADMIN),
    RouteCost("GET /v1/admin/rooms/{room}/muted", _ADMIN, _NOTHING, room=ANY,
        sample=_AS_ADMIN),
    RouteCost("GET /v1/admin/rooms/{room}/banned", _ADMIN, _NOTHING, room=ANY,
        sample=_AS_ADMIN),
    RouteCost("PUT /v1/admin/rooms/{room}/muted/{uid}", _ADMIN,
              "store: a sanction (a room holds at most 10 000) until it ends, and an audit "
              "entry" + _EVENT, ("history_ttl", "webhook_retry_for"), room=ANY,
        sample=Sample(body={"seconds": 60}, token="admin")),
    RouteCost("DELETE /v1/admin/rooms/{room}/muted/{uid}", _ADMIN,
              "store: an audit entry" + _EVENT, ("history_ttl", "webhook_retry_for"), room=ANY,
        sample=_AS_ADMIN),
    RouteCost("PUT /v1/admin/rooms/{room}/banned/{uid}", _ADMIN,
              "store: a sanction (a room holds at most 10 000) until it ends, and an audit "
              "entry; node: the uid's held polls answered 403" + _EVENT,
              ("history_ttl", "webhook_retry_for"), room=ANY,
        sample=Sample(body={}, token="admin")),
    RouteCost("DELETE /v1/admin/rooms/{room}/banned/{uid}", _ADMIN,
              "store: an audit entry" + _EVENT, ("history_ttl", "webhook_retry_for"), room=ANY,
        sample=_AS_ADMIN),
    RouteCost("PUT /v1/admin/rooms/{room}/slow", _ADMIN,
              "store: the room's slow mode and an audit entry", ("history_ttl",), room=ANY,
        sample=Sample(body={"seconds": 5}, token="admin")),
    RouteCost("GET /v1/admin/rooms/{room}/review", _ADMIN, _NOTHING, room=ANY,
        sample=_AS_ADMIN),
    RouteCost("POST /v1/admin/rooms/{room}/review/{id}/approve", _ADMIN,
              "store: the held message appended to the room's log as its sender's send (the "
              "room's keys if it had none, as a send's), its decision among the room's "
              "latest --review-max until --room-ttl, and an audit entry" + _EVENT,
              ("review_max", "room_ttl", "log_cap", "history_ttl", "webhook_retry_for"),
              room=CREATES,
        sample=_AS_ADMIN),
    RouteCost("POST /v1/admin/rooms/{room}/review/{id}/deny", _ADMIN,
              "store: the held message's decision (its body dropped) among the room's latest "
              "--review-max until --room-ttl, and an audit entry" + _EVENT,
              ("review_max", "room_ttl", "history_ttl", "webhook_retry_for"), room=ANY,
        sample=_AS_ADMIN),
    # -- the word filter ---------------------------------------------------------------
    RouteCost("GET /v1/admin/filters", _ADMIN, _NOTHING,
        sample=_AS_ADMIN),
    RouteCost("PUT /v1/admin/filters/{name}", _ADMIN,
              "store: the list until deleted (at most --filter-lists-max lists, each of "
              "--filter-words-max words of --filter-word-chars characters and 1 000 rooms at "
              "most: up to about 1.3 MB). Node, on every node: the list's automaton until it "
              "is deleted (about 3 MB for 10 000 words, built in a thread); its body (up to "
              "about 3.9 MB by default) while it is read. The operator's own put of 10 000 "
              "words costs its node about 30 to 50 ms of CPU",
              ("filter_lists_max", "filter_words_max", "filter_word_chars", "request_timeout"),
        sample=Sample(body={"words": ["spam"], "action": "mask"}, token="admin")),
    RouteCost("DELETE /v1/admin/filters/{name}", _ADMIN, "store: the list's removal",
        sample=_AS_ADMIN),
    # -- the webhooks ------------------------------------------------------------------
    RouteCost("GET /v1/admin/webhooks/failed", _ADMIN, _NOTHING,
        sample=_AS_ADMIN),
    RouteCost("POST /v1/admin/webhooks/replay", _ADMIN,
              "store: the failed events named (every one without ids, at most 100 000 "
              "kept) move back to the outbox, until delivered or given up again after "
              "--webhook-retry-for. Node: its body (up to about 68 KB: 1 000 ids) while it "
              "is read",
              ("webhook_retry_for", "request_timeout"),
        sample=Sample(body={"ids": ["ev_0123456789abcdef01234567"]}, token="admin")),
)
"""Every route of a node, one row each."""

_ROWS: Final = {row.route: row for row in COSTS}
_ROOM_TEXT: Final = {"": "-", EXISTS: "must exist (else 404)", CREATES: "may create it",
                     ANY: "any name"}


def row_of(method: str, path: str) -> RouteCost:
    """The row of ``METHOD path`` (``KeyError`` for a route without one: the
    node does not start)."""
    return _ROWS[f"{method} {path}"]


BEGIN: Final = ("<!-- route costs: made by python -m proxy.route_costs; edit "
                "proxy/route_costs.py -->")
END: Final = "<!-- route costs: end -->"
OPERATIONS: Final = Path(__file__).resolve().parent.parent / "docs" / "operations.md"


def table() -> str:
    """The table as docs/operations.md shows it, between its markers."""
    lines = [BEGIN, "", "| route | who | its room | may create, and for how long | node memory "
             "left per request, at most | node CPU per request, at most | bounded by |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in COSTS:
        bounds = ", ".join(f"`{flag_of(name)}`" for name in row.bounds) or "-"
        creates = row.creates + (f". **Known to pass its bounds:** {row.known}."
                                 if row.known else "")
        room = _ROOM_TEXT[row.room] + ("; runs to its end once read" if row.finishes else "")
        keeps = f"{row.keeps} B" if row.keeps else "nothing"
        lines.append(f"| `{row.route}` | {row.who} | {room} | {creates} | {keeps} | "
                     f"{row.cpu_us} µs | {bounds} |")
    lines += ["", END]
    return "\n".join(lines)


def operations_page(page: str) -> str:
    """docs/operations.md with the table between its markers made anew."""
    return spliced(page, BEGIN, END, table())


if __name__ == "__main__":
    OPERATIONS.write_text(operations_page(OPERATIONS.read_text()))
    print(f"wrote {OPERATIONS.relative_to(OPERATIONS.parent.parent)}", file=sys.stderr)
