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
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from liveroom.settings import flag_of
from liveroom.settings_docs import spliced


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
    known: str = ""
    """A way it is known to pass its bounds (issue 44's findings), until fixed."""


_ANYONE: Final = "anyone (open mode); a ticket for the room (ticket mode)"
_BACKEND: Final = "the publisher or admin token; a ticket with publish for the room"
_ADMIN: Final = "the admin token"
_NOTHING: Final = "nothing"
_FILE: Final = "nothing: a file the node holds in memory from its start"

COSTS: Final = (
    # -- the listener routes (the front, and aiohttp on connections handed over) --
    RouteCost(
        "GET /v1/rooms/{room}/poll", _ANYONE,
        "node: a held poll (its connection and hold, about 3.4 KiB) until its timeout; "
        "the room in its sect's cache while read; the uid's presence until --online-ttl "
        "after its last poll. Store: presence shards and viewers history, written in "
        "batches by statsvr (a poll itself touches no store)",
        ("connections_max", "connections_per_ip", "holds_per_listener", "holds_per_uid",
         "held_max", "rooms_max", "poll_timeout_max", "answer_bytes_max", "online_ttl")),
    RouteCost(
        "POST /v1/rooms/{room}/messages", "anyone naming its uid (open mode); a ticket "
        "(ticket mode); the publisher or admin token for the backend",
        "store: one log entry (the room's log is capped; important ones kept their "
        "window, personal ones to the room's cap), its client_msg_id for --dedup-ttl, "
        "and a new room's keys until --empty-room-ttl (its sender's alone) or "
        "--room-ttl. Node: the message in the room's cache",
        ("rate_limits", "room_rate_limit", "rooms_per_uid", "rooms_per_address",
         "rooms_per_node", "max_message_bytes", "log_cap", "personal_hard_cap",
         "personal_node_cap", "dedup_ttl", "room_ttl", "empty_room_ttl"),
        known="a reset while the append is in flight frees the new-room place (Redis)"),
    RouteCost(
        "POST /v1/rooms/{room}/likes", "anyone naming its uid (open mode); a ticket",
        "store: the room's likes total and series, --history-ttl after the last write. "
        "Node: the room's pending taps until the next flush, the uid's windows, the room "
        "kept fresh for a minute after it was last asked about",
        ("likes_requests", "likes_taps", "likes_rooms_max", "likes_uids_max",
         "likes_flush", "history_ttl"),
        known="any room name, existing or not, outside the new-room windows; made-up "
              "uids fill the node's uid table (open mode)"),
    # -- the rest of the listener and backend API (aiohttp) ----------------------
    RouteCost(
        "POST /v1/rooms/{room}/gifts", _BACKEND,
        "store: the giver's score and the room's gift total, --history-ttl after the "
        "last write; an important message when the gift is worth --gift-important",
        ("gift_important", "history_ttl", "max_message_bytes")),
    RouteCost("GET /v1/rooms/{room}/leaderboard", "anyone", _NOTHING),
    RouteCost(
        "GET /v1/rooms/{room}/online", "anyone (open mode); a ticket for the room or the "
        "admin token (ticket mode)",
        "node: the room's merged online view, kept while it is read", ("online_ttl",)),
    RouteCost("GET /v1/rooms/{room}/stats", "anyone",
              "node: the room's merged online view, kept while it is read"),
    RouteCost("GET /v1/rooms/{room}/stats/online", "anyone", _NOTHING),
    RouteCost("GET /v1/rooms/{room}/stats/likes", "anyone", _NOTHING),
    RouteCost("GET /v1/rooms/{room}/broadcasts", "anyone", _NOTHING),
    RouteCost(
        "DELETE /v1/rooms/{room}/messages/{seq}", "its sender within --recall-window; "
        "moderators and the backend",
        "store: the message's tombstone in place of its body and a notice to every "
        "listener (one step: a reset mid-recall leaves both or neither), an audit entry "
        "(the room keeps its newest 1 000)",
        ("recall_window",),
        known="no rate limit: one sender can push the moderators' entries out of the "
              "audit; a reset after the recall and before its audit entry leaves it "
              "unaudited"),
    RouteCost(
        "DELETE /v1/rooms/{room}/personal/{seq}", "the publisher or admin token",
        "store: the personal message's tombstone and a notice to its addressee (one "
        "step), an audit entry", ()),
    # -- health, metrics and pages -----------------------------------------------
    RouteCost("GET /healthz", "anyone",
              "nothing: the store is asked at most once a second, whatever the rate"),
    RouteCost("GET /metrics", "the metrics token (anyone with --metrics-public)", _NOTHING,
              ("metrics_token", "metrics_public")),
    RouteCost("GET /", "anyone", _FILE),
    RouteCost("GET /openapi.json", "anyone", _FILE),
    RouteCost("GET /admin", "anyone (the page; its calls need the admin token)", _FILE),
    RouteCost("GET /rooms/{room}", "anyone", _FILE),
    RouteCost("GET /static/{name}", "anyone", _FILE),
    RouteCost("GET /static/vendor/{lib}/{name}", "anyone", _FILE),
    # -- the operators' and moderators' API ----------------------------------------
    RouteCost("GET /v1/admin/nodes", _ADMIN, _NOTHING),
    RouteCost("GET /v1/admin/rooms", _ADMIN, _NOTHING),
    RouteCost("GET /v1/admin/vip", _ADMIN, _NOTHING),
    RouteCost("GET /v1/admin/vip/{room}", _ADMIN, _NOTHING),
    RouteCost("PUT /v1/admin/vip/{room}", _ADMIN,
              "store: the room's sect record until removed", ()),
    RouteCost("DELETE /v1/admin/vip/{room}", _ADMIN, "store: the sect record's removal"),
    RouteCost("PUT /v1/admin/vip/{room}/pin", _ADMIN,
              "store: the room's pin until unpinned", ()),
    RouteCost("DELETE /v1/admin/vip/{room}/pin", _ADMIN, "store: the pin's removal"),
    RouteCost("POST /v1/admin/rooms/{room}/start", _ADMIN,
              "store: a new broadcast's log, --empty-room-ttl until its first message",
              ("empty_room_ttl",)),
    RouteCost("POST /v1/admin/rooms/{room}/end", _ADMIN,
              "store: the ended broadcast's archive (viewers, likes, gifts, its top 100 "
              "givers, the audit) for --history-ttl", ("history_ttl",)),
    RouteCost("GET /v1/admin/rooms/{room}/messages", _ADMIN, _NOTHING),
    RouteCost("GET /v1/admin/rooms/{room}/moderation", _ADMIN, _NOTHING),
    RouteCost("GET /v1/admin/rooms/{room}/muted", _ADMIN, _NOTHING),
    RouteCost("GET /v1/admin/rooms/{room}/banned", _ADMIN, _NOTHING),
    RouteCost("PUT /v1/admin/rooms/{room}/muted/{uid}", _ADMIN,
              "store: a sanction (a room holds at most 10 000) until it ends, and an audit "
              "entry", ("history_ttl",)),
    RouteCost("DELETE /v1/admin/rooms/{room}/muted/{uid}", _ADMIN,
              "store: an audit entry", ("history_ttl",)),
    RouteCost("PUT /v1/admin/rooms/{room}/banned/{uid}", _ADMIN,
              "store: a sanction (a room holds at most 10 000) until it ends, and an audit "
              "entry; node: the uid's held polls answered 403", ("history_ttl",)),
    RouteCost("DELETE /v1/admin/rooms/{room}/banned/{uid}", _ADMIN,
              "store: an audit entry", ("history_ttl",)),
    RouteCost("PUT /v1/admin/rooms/{room}/slow", _ADMIN,
              "store: the room's slow mode and an audit entry", ("history_ttl",)),
)
"""Every route of a node, one row each."""

BEGIN: Final = ("<!-- route costs: made by python -m proxy.route_costs; edit "
                "proxy/route_costs.py -->")
END: Final = "<!-- route costs: end -->"
OPERATIONS: Final = Path(__file__).resolve().parent.parent / "docs" / "operations.md"


def table() -> str:
    """The table as docs/operations.md shows it, between its markers."""
    lines = [BEGIN, "", "| route | who | may create, and for how long | bounded by |",
             "| --- | --- | --- | --- |"]
    for row in COSTS:
        bounds = ", ".join(f"`{flag_of(name)}`" for name in row.bounds) or "-"
        creates = row.creates + (f". **Known to pass its bounds:** {row.known}."
                                 if row.known else "")
        lines.append(f"| `{row.route}` | {row.who} | {creates} | {bounds} |")
    lines += ["", END]
    return "\n".join(lines)


def operations_page(page: str) -> str:
    """docs/operations.md with the table between its markers made anew."""
    return spliced(page, BEGIN, END, table())


if __name__ == "__main__":
    OPERATIONS.write_text(operations_page(OPERATIONS.read_text()))
    print(f"wrote {OPERATIONS.relative_to(OPERATIONS.parent.parent)}", file=sys.stderr)
