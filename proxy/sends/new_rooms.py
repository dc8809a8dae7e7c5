"""What a send may create: new rooms per uid, per client address and per
node, in rate windows.

A room exists from its first accepted send, and a room costs store memory
(its log, then its series once polled): without a bound, one any-room ticket
could create thousands of rooms a second. So a send by a uid that is over
its windows of *new rooms* (``--rooms-per-uid``), from a client address over
its own (``--rooms-per-address``), or on a node over its own
(``--rooms-per-node``), may still go to a room that exists but may not
create one: the store refuses it in the same round trip as the append
(``may_create``), and the sender gets a 429 with ``Retry-After``. Sends of the
business backend (publisher or admin token) are not limited.

**Counted where they are admitted.** A send that may create a room takes a
place in all three windows *before* its append goes to the store
(:meth:`NewRooms.reserve`): a place *held*, which counts against the windows
like a room created. When the append returns (:meth:`NewRooms.settled`) the
place becomes a room counted in the windows if the append created the room,
and is freed otherwise (the room existed, the ``client_msg_id`` was seen, a
rate window refused it, the store failed). So sends in flight together never
pass a bound: 2 000 sends of one uid to 2 000 new rooms, all in flight at
once, create exactly its window's limit of rooms, the others get 429. The
cost: while sends to rooms that exist are in flight they hold places, so a
send to a new room by a sender at its limit (or on a node at its own) may be
refused although the windows end up with room to spare; with only held
places in the way its ``Retry-After`` is 1 s.

**The node's window is a backstop, the address's is what keeps one client
from exhausting it**: made-up uids (``open`` mode) or many tickets from one
client share its address's window (default a sixth of the node's; an IPv6
address counts by its /64, see :func:`~proxy.addresses.address_key`), so one
client address alone cannot fill the node's window and lock every other
sender out of new rooms. The address is the client as the front counts its
connection: behind a proxy of ``--trusted-proxies`` the one its
``X-Forwarded-For`` names (with ``--connections-per-ip`` on, its default),
else the peer the node sees; behind another reverse proxy or load balancer
that is the proxy's for every client, and its window then bounds all clients
of that proxy together (raise it to the node's, or ``off``, there).

Limits: the counts are this node's (a uid spread over N nodes creates at most
N times its windows; room-affine routing does not change that, since every
room hashes elsewhere).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from liveroom.errors import RateLimited
from liveroom.ratelimit import (
    Tally,
    Window,
    new_tally,
    refused_until,
    span,
    tally_count,
    tally_drop_unread,
    tally_empty,
    tally_refused,
)

from ..addresses import address_key

SWEEP_EVERY_MS: Final = 60_000
"""How often uids and addresses whose windows all passed are forgotten."""


@dataclass(frozen=True, slots=True)
class Place:
    """A new room a send in flight may create: held in the windows of its
    uid, its address and the node until :meth:`NewRooms.settled`."""

    uid: str
    address: str


class _Level:
    """One kind of window (per uid, per address, the node's): the rooms
    created by each key, and the places its sends in flight hold."""

    __slots__ = ("counts", "held", "what", "windows")

    def __init__(self, what: str, windows: Sequence[Window]) -> None:
        self.what = what
        self.windows = tuple(windows)
        self.counts: dict[str, Tally] = {}
        self.held: dict[str, int] = {}

    def refusal(self, key: str, now_ms: int) -> tuple[str, Window, int] | None:
        """The full window of ``key`` that frees last, and when (ms); None
        when every window has a place."""
        if not self.windows:
            return None
        counts = self.counts.get(key)
        held = self.held.get(key, 0)
        if counts is None:
            if not held:
                return None
            full = refused_until({}, self.windows, now_ms, held)
        else:
            full = tally_refused(counts, self.windows, now_ms, held)
        return None if full is None else (self.what.format(key), *full)

    def hold(self, key: str) -> None:
        if self.windows:
            self.held[key] = self.held.get(key, 0) + 1

    def settle(self, key: str, created_ms: int | None) -> None:
        if not self.windows:
            return
        left = self.held[key] - 1
        if left:
            self.held[key] = left
        else:
            del self.held[key]
        if created_ms is not None:
            counts = self.counts.get(key)
            if counts is None:
                counts = self.counts[key] = new_tally()
            tally_count(counts, self.windows, created_ms)
            tally_drop_unread(counts, created_ms)

    def sweep(self, now_ms: int) -> None:
        for key, counts in list(self.counts.items()):
            tally_drop_unread(counts, now_ms)
            if tally_empty(counts):
                del self.counts[key]


class NewRooms:
    """The new-room windows of one node."""

    def __init__(self, per_uid: Sequence[Window], per_node: Sequence[Window],
                 per_address: Sequence[Window] = ()) -> None:
        self._node = _Level("node", per_node)
        self._address = _Level("address {}", per_address)
        self._uid = _Level("uid {}", per_uid)
        self._swept_ms = 0

    def reserve(self, uid: str, address: str, now_ms: int) -> Place | RateLimited:
        """A place for the room a send by ``uid`` from ``address`` may create
        at ``now_ms``, held until :meth:`settled`; or why it may not create
        one (the full window that frees last): its append may then only go
        to a room that exists."""
        address = address_key(address)
        worst: tuple[str, Window, int] | None = None
        for level, key in ((self._node, ""), (self._address, address), (self._uid, uid)):
            full = level.refusal(key, now_ms)
            if full is not None and (worst is None or full[2] > worst[2]):
                worst = full
        if worst is not None:
            who, window, free_ms = worst
            retry_after = (free_ms - now_ms) / 1000
            return RateLimited(f"{who} over {window.limit} new rooms per "
                               f"{span(window.seconds)}; sends to rooms that exist still go; "
                               f"retry in {retry_after:g} s", retry_after=retry_after)
        self._node.hold("")
        self._address.hold(address)
        self._uid.hold(uid)
        return Place(uid, address)

    def settled(self, place: Place, created_ms: int | None) -> None:
        """The append that held ``place`` returned: it created a room at
        ``created_ms`` (counted in the windows), or none (``None``: freed)."""
        self._node.settle("", created_ms)
        self._address.settle(place.address, created_ms)
        self._uid.settle(place.uid, created_ms)
        if created_ms is not None and created_ms - self._swept_ms >= SWEEP_EVERY_MS:
            self._swept_ms = created_ms
            for level in (self._address, self._uid):
                level.sweep(created_ms)
