"""``liveroom ticket``: one ticket signed as the backend signs them, to try a
server run with --auth ticket. It mints with ``proxy.tickets``, the one role
module the core imports besides the node's (tests/node/test_architecture.py)."""

from __future__ import annotations

import os

import click

from ..settings import TICKET_KEY_MIN, TICKET_TTL, env_of
from .options import check_room, check_uid


def _rooms(ctx: click.Context, param: click.Parameter,
           value: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(check_room(ctx, param, room) for room in value)


@click.command()
@click.option("--uid", required=True, callback=check_uid,
              help="The uid the ticket names (its sub claim).")
@click.option("--room", "rooms", multiple=True, callback=_rooms, metavar="ROOM",
              help="A room the ticket is good for; repeat for several. Required unless "
                   "--any-room.")
@click.option("--any-room", is_flag=True,
              help="Mint a ticket good for every room (it can create rooms by sending, "
                   "within --rooms-per-uid; it cannot read member lists).")
@click.option("--ttl", default=TICKET_TTL, show_default=True, type=click.IntRange(1),
              help="Seconds the ticket is valid.")
@click.option("--publish", is_flag=True,
              help="The holder may send important messages in its rooms.")
@click.option("--key", default=None,
              help="The HS256 key to sign with [default: the first of "
                   f"{env_of('ticket_keys')}].")
def ticket(uid: str, rooms: tuple[str, ...], any_room: bool, ttl: int, publish: bool,
           key: str | None) -> None:
    """Print one ticket for UID, signed as your backend would sign it.

    For trying things out: a server started with --auth ticket and the same
    key takes the uid from it. Pass it as Authorization: Bearer TICKET, or as
    ?ticket=TICKET on a poll.
    """
    if key is None:
        key = os.environ.get(env_of("ticket_keys"), "").split(",")[0].strip() or None
    if key is None:
        raise click.UsageError(f"give --key or set {env_of('ticket_keys')}")
    if len(key.encode()) < TICKET_KEY_MIN:
        raise click.BadParameter(f"a ticket key must be at least {TICKET_KEY_MIN} bytes",
                                 param_hint="--key")
    if not rooms and not any_room:
        raise click.UsageError("name the rooms the ticket is good for with --room ROOM "
                               "(repeat it), or mint one for every room with --any-room")
    if rooms and any_room:
        raise click.UsageError("--room and --any-room exclude each other")
    from proxy.tickets import mint  # PyJWT: only this command needs it

    click.echo(mint(key, uid, rooms=None if any_room else rooms, ttl=ttl, publish=publish))
