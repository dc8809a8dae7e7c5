"""The review queue from a terminal: ``liveroom review ROOM`` lists the
messages held for a moderator, ``--approve ID`` stores one as its sender's,
``--deny ID`` drops it. Through a running server only (an approval is a
send: the node checks its sender's mute or ban and delivers it)."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

import click

from ..settings import env_of
from .calls import clear
from .options import DEFAULT_URL, URL_ENV, check_room
from .times import when

if TYPE_CHECKING:
    from ..client import Approved, HeldMessage

BODY_SHOWN = 120
"""Characters of a held message's body a listing line shows."""


def _held_line(held: HeldMessage) -> str:
    """One held message, one line: id, when, sender, lane, why, body."""
    lane = {"important": " [important]", "personal": f" [to {held.to}]"}.get(held.kind, "")
    body = held.body if isinstance(held.body, str) else json.dumps(held.body,
                                                                  ensure_ascii=False)
    if len(body) > BODY_SHOWN:
        body = body[:BODY_SHOWN - 1] + "…"
    why = f" ({held.why})" if held.why else ""
    return f"{held.id:>4}  {when(held.at_ms)}  {held.uid}{lane}{why}: {body}"


def _approved_line(done: Approved) -> str:
    where = {"important": f"important message {done.seq}",
             "personal": f"personal message p{done.seq} to {done.to}"}.get(
                 done.kind, f"message {done.seq}")
    return (f"room {done.room}: held message {done.id} of {done.uid} approved, sent as "
            f"{where}")


def _held_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not (value.isascii() and value.isdigit() and 0 < len(value) <= 16
                                  and int(value) > 0):
        raise click.BadParameter(f"{value!r}: a held message's id is its number, as "
                                 f"`liveroom review ROOM` lists it")
    return value


@click.command()
@click.argument("room_name", metavar="ROOM", callback=check_room)
@click.option("--approve", "approve", metavar="ID", default=None, callback=_held_id,
              help="Approve held message ID: it is sent now as its sender's, every "
                   "listener gets it (refused while its sender is muted or banned).")
@click.option("--deny", "deny", metavar="ID", default=None, callback=_held_id,
              help="Deny held message ID: it is dropped, nobody ever sees it.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="Held messages to list, oldest first.")
@click.option("--admin-token", envvar=env_of("admin_token"), show_envvar=True,
              help="The server's admin token.")
@click.option("--url", default=DEFAULT_URL, show_default=True, envvar=URL_ENV,
              show_envvar=True, help="A running liveroom server (any node over the store).")
def review(room_name: str, approve: str | None, deny: str | None, limit: int,
           admin_token: str | None, url: str) -> None:
    """List ROOM's messages held for review (a word filter or the send hook
    kept them back), oldest first, one a line: its id, when it was sent,
    its sender, why, its body. Or decide one: --approve ID or --deny ID.

    Nobody but its sender (told its id) and the moderators sees a held
    message. Approving one sends it now as its sender's, without its rate
    limits; approving or denying twice answers the same, and either is
    recorded in the room's audit (`liveroom moderation`). A room holds the
    server's --review-max (1000) at most: past it the oldest is dropped.
    Prints one line a message, or what was decided.
    """
    from ..client import Client, ClientError

    if approve is not None and deny is not None:
        raise click.UsageError("give --approve or --deny, not both")

    async def run() -> list[str]:
        async with Client(url, token=admin_token) as client:
            if approve is not None:
                return [_approved_line(await client.approve(room_name, approve))]
            if deny is not None:
                done = await client.deny(room_name, deny)
                return [f"room {done.room}: held message {done.id} of {done.uid} denied "
                        f"(dropped)"]
            queue = await client.held(room_name, limit)
            lines = [f"room {queue.room}: {queue.count} held for review"
                     + (f" (the oldest {len(queue.held)} shown)"
                        if len(queue.held) < queue.count else "")]
            return lines + [_held_line(held) for held in queue.held]

    try:
        lines = asyncio.run(run())
    except ClientError as exc:
        raise clear(exc, None if admin_token else
                    f"give --admin-token or set {env_of('admin_token')}") from None
    for line in lines:
        click.echo(line)
