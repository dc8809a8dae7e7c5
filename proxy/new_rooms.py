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

**Counted where they are admitted.** A send takes its place in all three
windows *before* its append goes to the store (:meth:`NewRooms.admit`) and
gives it back (:meth:`NewRooms.give_back`) when the append did not create
the room: the room existed, the ``client_msg_id`` was seen, a rate window
refused it, the store failed. So sends in flight together never pass a
bound: 2 000 sends of one uid to 2 000 new rooms, all in flight at once,
create exactly its window's limit of rooms, the others get 429. The cost of
counting early: while a uid's sends to rooms that exist are in flight they
hold places, and a send of that uid to a new room at that moment may be
refused although its windows end up with room to spare (it may retry after
the ``Retry-After``; a sender at its limit only).

**The node's window is a backstop, the address's is what keeps one client
from exhausting it**: made-up uids (``open`` mode) or many tickets from one
client share its address's window (default a sixth of the node's), so one
client address alone cannot fill the node's window and lock every other
sender out of new rooms. The address is the peer the node sees: behind a
reverse proxy or load balancer it is the proxy's for every client, and
its window then bounds all clients of that proxy together (raise it to the
node's, or ``off``, there).

Limits: the counts are this node's (a uid spread over N nodes creates at most
N times its windows; room-affine routing does not change that, since every
room hashes elsewhere).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from liveroom.errors import RateLimited
from liveroom.ratelimit import Counts, Window, count_send, prune, refused_until, span, uncount_send

SWEEP_EVERY_MS = 60_000
"""How often uids and addresses whose windows all passed are forgotten."""


@dataclass(frozen=True, slots=True)
class Place:
    """A new room counted for a send before its append: given back unless the
    append created the room."""

    uid: str
    address: str
    ms: int
    """When it was counted (the send's ts: its buckets)."""


class NewRooms:
    """The new-room windows of one node."""

    def __init__(self, per_uid: Sequence[Window], per_node: Sequence[Window],
                 per_address: Sequence[Window] = ()) -> None:
        self._per_uid = tuple(per_uid)
        self._per_address = tuple(per_address)
        self._per_node = tuple(per_node)
        self._uids: dict[str, Counts] = {}
        self._addresses: dict[str, Counts] = {}
        self._node: Counts = {}
        self._swept_ms = 0

    def admit(self, uid: str, address: str, now_ms: int) -> Place | RateLimited:
        """A place for a room a send by ``uid`` from ``address`` may create at
        ``now_ms`` (counted now, in every window), or why it may not create
        one (the full window that frees last): its append may then only go
        to a room that exists."""
        worst: tuple[str, Window, int] | None = None
        for who, counts, windows in (("node", self._node, self._per_node),
                                     (f"address {address}", self._addresses.get(address),
                                      self._per_address),
                                     (f"uid {uid}", self._uids.get(uid), self._per_uid)):
            if counts:
                full = refused_until(counts, windows, now_ms)
                if full is not None and (worst is None or full[1] > worst[2]):
                    worst = who, *full
        if worst is not None:
            who, window, free_ms = worst
            retry_after = (free_ms - now_ms) / 1000
            return RateLimited(f"{who} over {window.limit} new rooms per "
                               f"{span(window.seconds)}; sends to rooms that exist still go; "
                               f"retry in {retry_after:g} s", retry_after=retry_after)
        for counts, windows in self._counted(uid, address, create=True):
            count_send(counts, windows, now_ms)
            prune(counts, windows, now_ms)
        if now_ms - self._swept_ms >= SWEEP_EVERY_MS:
            self._sweep(now_ms)
        return Place(uid, address, now_ms)

    def give_back(self, place: Place) -> None:
        """The send that took ``place`` created no room: its count goes (a
        bucket pruned meanwhile has nothing left to give back)."""
        for counts, windows in self._counted(place.uid, place.address, create=False):
            uncount_send(counts, windows, place.ms)

    def _counted(self, uid: str, address: str, *,
                 create: bool) -> list[tuple[Counts, tuple[Window, ...]]]:
        """The counts a new room of ``uid`` from ``address`` goes to, with their
        windows (only levels that have windows)."""
        found: list[tuple[Counts, tuple[Window, ...]]] = []
        if self._per_node:
            found.append((self._node, self._per_node))
        for per, windows, key in ((self._addresses, self._per_address, address),
                                  (self._uids, self._per_uid, uid)):
            if windows:
                counts = per.setdefault(key, {}) if create else per.get(key)
                if counts is not None:
                    found.append((counts, windows))
        return found

    def _sweep(self, now_ms: int) -> None:
        self._swept_ms = now_ms
        for per, windows in ((self._uids, self._per_uid),
                             (self._addresses, self._per_address)):
            for key, counts in list(per.items()):
                prune(counts, windows, now_ms)
                if not counts:
                    del per[key]
