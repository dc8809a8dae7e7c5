"""The operators' groups: ``liveroom vip``, which rooms the vip sect serves,
and ``liveroom room``, a room's broadcast opened and ended; each change made
through a running server or, with --store, in the store itself."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import click

from .. import sects
from ..clock import SystemClock
from ..sects import Sect
from ..settings import DEFAULTS
from .calls import operate, store_events
from .options import check_room, operators_options
from .times import when

if TYPE_CHECKING:
    from ..client import Client, RoomSect, VipChange
    from ..store.base import Store
    from ..whitelist import SectChange


def _sect_change(call: Callable[[Store, int], Awaitable[SectChange]]
                 ) -> Callable[[Store], Awaitable[VipChange]]:
    """A sect change made directly in the store (``--store``)."""

    async def through_store(store: Store) -> VipChange:
        from ..client import VipChange

        change = await call(store, int(SystemClock().time() * 1000))
        return VipChange(change.room, change.after.vip, change.moved)

    return through_store


async def _pin(store: Store, room: str, sect: Sect | None, now_ms: int) -> SectChange:
    """``room`` pinned to ``sect`` (``None``: unpinned) in the store itself."""
    from ..whitelist import pin_room

    return await pin_room(store.operators, store.log, room, sect, now_ms,
                          events=await store_events(store))


async def _release(store: Store, room: str, now_ms: int) -> SectChange:
    """``room`` unpinned and moved to the normal sect in the store itself."""
    from ..whitelist import release_room

    return await release_room(store.operators, room, now_ms, events=await store_events(store))


def _said(change: VipChange, pinned: str | None = None) -> str:
    sect = "vip" if change.vip else "normal"
    if pinned is not None:
        return f"room {change.room} is pinned to the {sect} sect" + \
            ("" if change.changed else " (it was there already)")
    if change.changed:
        return f"room {change.room} is now vip" if change.vip else \
            f"room {change.room} is no longer vip"
    return f"room {change.room} was already vip" if change.vip else \
        f"room {change.room} was not vip"


@click.group()
def vip() -> None:
    """The sects: which rooms the vip sect serves.

    A vip room gets recvsvr caches and a pull budget of its own on every node
    (a storm in it cannot slow the pulls of other rooms), its online list is
    split over --vip-shards keys, and its answers carry a routing hint that
    spreads its listeners over the nodes (--vip-spread). Rooms move by
    themselves (--auto-vip: in at --vip-promote online, out below
    --vip-demote); a pinned room stays where it is pinned. Every node picks a
    change up within its --vip-refresh; the node that made it at once.
    """


@vip.command("add")
@click.argument("room", callback=check_room)
@operators_options
def vip_add(room: str, url: str, admin_token: str | None, store: str | None) -> None:
    """Pin ROOM to the vip sect (as `vip pin ROOM vip`)."""
    change = operate(url, admin_token, store, lambda c: c.vip_add(room),
                     _sect_change(lambda s, now: _pin(s, room, "vip", now)))
    click.echo(_said(change))


@vip.command("remove")
@click.argument("room", callback=check_room)
@operators_options
def vip_remove(room: str, url: str, admin_token: str | None, store: str | None) -> None:
    """Unpin ROOM and move it to the normal sect now (the automatic rule may
    promote it again when it grows)."""
    change = operate(url, admin_token, store, lambda c: c.vip_remove(room),
                     _sect_change(lambda s, now: _release(s, room, now)))
    click.echo(_said(change))


@vip.command("pin")
@click.argument("room", callback=check_room)
@click.argument("sect", type=click.Choice(["vip", "normal"]))
@operators_options
def vip_pin(room: str, sect: Sect, url: str, admin_token: str | None,
            store: str | None) -> None:
    """Pin ROOM to SECT (vip or normal), moving it there now: the automatic
    rule leaves it there until `vip unpin`."""
    change = operate(url, admin_token, store, lambda c: c.vip_pin(room, sect),
                     _sect_change(lambda s, now: _pin(s, room, sect, now)))
    click.echo(_said(change, sect))


@vip.command("unpin")
@click.argument("room", callback=check_room)
@operators_options
def vip_unpin(room: str, url: str, admin_token: str | None, store: str | None) -> None:
    """Give ROOM back to the automatic rule; it stays in its sect for now."""
    change = operate(url, admin_token, store, lambda c: c.vip_unpin(room),
                     _sect_change(lambda s, now: _pin(s, room, None, now)))
    sect = "vip" if change.vip else "normal"
    click.echo(f"room {room} is unpinned (in the {sect} sect; the automatic rule decides)")


async def _sects_of_store(store: Store) -> list[RoomSect]:
    from ..client import RoomSect
    from ..whitelist import read_sects

    records = await read_sects(store.operators)
    return [RoomSect.of(sects.document(room, records[room])) for room in sorted(records)]


async def _sects_of_server(client: Client) -> list[RoomSect]:
    return list(await client.vip_sects())


@vip.command("list")
@operators_options
def vip_list(url: str, admin_token: str | None, store: str | None) -> None:
    """Print the rooms in the vip sect, the pinned ones and those the rule is
    watching: one a line, with the sect, pinned or auto, and since when."""
    found = [s for s in operate(url, admin_token, store, _sects_of_server, _sects_of_store)
             if s.vip or s.pinned or s.candidate_since is not None]
    width = max((len(s.room) for s in found), default=0)
    for s in found:
        line = f"{s.room:<{width}}  {'vip' if s.vip else 'normal':<6}  {s.mode:<6}  " \
               f"since {when(s.since)}"
        if s.candidate_since is not None:
            line += f"  (moving to {'normal' if s.vip else 'vip'} if it stays, " \
                    f"since {when(s.candidate_since)})"
        click.echo(line)
    if not found:
        click.echo("no vip rooms", err=True)


@click.group()
def room() -> None:
    """Operations on one room."""


@room.command("start")
@click.argument("room_name", metavar="ROOM", callback=check_room)
@operators_options
def room_start(room_name: str, url: str, admin_token: str | None, store: str | None) -> None:
    """Open ROOM before its first message.

    Listeners who join before the first chat line are then counted online and
    as viewers from their first poll, and the room lives --room-ttl while it is
    read. A room that is open already is left as it is.
    """

    async def through_store(store: Store) -> tuple[str, int, bool]:
        ahead = await (await store_events(store)).ahead("broadcast.started", room_name)
        started = await store.operators.start_broadcast(
            room_name, event=None if ahead is None else ahead.event)
        return started.epoch, started.broadcast, started.created

    async def through_server(c: Client) -> tuple[str, int, bool]:
        started = await c.start_broadcast(room_name)
        return started.epoch, started.broadcast, started.created

    epoch, broadcast, created = operate(url, admin_token, store, through_server,
                                        through_store)
    state = "opened" if created else "was open already"
    click.echo(f"room {room_name} {state}: broadcast {broadcast} (epoch {epoch})")


@room.command("end")
@click.argument("room_name", metavar="ROOM", callback=check_room)
@operators_options
def room_end(room_name: str, url: str, admin_token: str | None, store: str | None) -> None:
    """End ROOM's broadcast and start the next one.

    The room's log starts empty in a new epoch: every listener resets into it
    with no recent messages (the ended broadcast's messages are dropped; seqs
    go on). Its viewers count starts a new history, at once counting everyone
    online (who polled in the last --online-ttl, 90 s: tabs closed in that
    time included, by design); the ended broadcast's viewers stay readable at
    GET /v1/rooms/ROOM/broadcasts.
    """

    async def through_store(store: Store) -> tuple[str, int]:
        ahead = await (await store_events(store)).ahead("broadcast.ended", room_name)
        ended = await store.operators.end_broadcast(
            room_name, int(SystemClock().time() * 1000), int(DEFAULTS.history_ttl * 1000),
            event=None if ahead is None else ahead.event)
        return ended.epoch, ended.broadcast

    async def through_server(c: Client) -> tuple[str, int]:
        ended = await c.end_broadcast(room_name)
        return ended.epoch, ended.broadcast

    epoch, broadcast = operate(url, admin_token, store, through_server, through_store)
    click.echo(f"room {room_name}: broadcast {broadcast - 1} ended, broadcast {broadcast} "
               f"started (epoch {epoch})")
