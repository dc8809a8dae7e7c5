"""A room from a terminal, for its senders and givers: ``liveroom send`` (a
message), ``like`` (taps), ``gift`` (the backend's call) and ``leaderboard``
(the room's top givers)."""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from ..settings import default_text, env_of
from .calls import clear
from .credentials import flags_first, left_aside_note
from .options import TICKET_ENV, UID_ENV, check_optional_uid, check_room, ticket_option, url_option

if TYPE_CHECKING:
    from ..client import Retry, Sent


@click.command()
@click.argument("room_name", metavar="ROOM", callback=check_room)
@click.argument("text")
@click.option("--uid", callback=check_optional_uid, envvar=UID_ENV, show_envvar=True,
              help="Who sends (open mode, or for the --token holder) [default: a "
                   "made-up sender-XXXXXX, said on stderr; with --ticket, the ticket's].")
@click.option("--important", is_flag=True,
              help="An important message (a system signal: never lost, delivered first); "
                   "needs --token or a ticket minted with --publish.")
@click.option("--to", callback=check_optional_uid, default=None, metavar="UID",
              help="A personal message for UID alone (important; needs --token or a "
                   "ticket minted with --publish); prints its pseq, its position among "
                   "the room's personal messages (not a seq).")
@click.option("--json", "as_json", is_flag=True,
              help="TEXT is a JSON value (an object, a number...), sent as the body as is.")
@click.option("--client-msg-id", default=None, metavar="ID",
              help="Sending twice with one id within the server's --dedup-ttl "
                   f"({default_text('dedup_ttl')} s unless told otherwise) stores it once "
                   "[default: made up].")
@ticket_option
@click.option("--token", envvar=env_of("publisher_token"), show_envvar=True,
              help="The publisher (or admin) token: your backend speaking for --uid, "
                   "exempt from moderation and rate limits; needed for --important and --to "
                   "without a publishing ticket. From the environment it is used for "
                   "those only, or where the server takes no uid without a ticket (a chat "
                   "line for --uid is that uid's own); not at all when --ticket is given "
                   "as a flag.")
@url_option
def send(room_name: str, text: str, uid: str | None, important: bool, to: str | None,
         as_json: bool, client_msg_id: str | None, ticket: str | None, token: str | None,
         url: str) -> None:
    """Send TEXT to ROOM and print its seq (with --to, a line saying its pseq;
    held for review by a word filter or the send hook, a line saying so).

    The body is TEXT as a string (or, with --json, the JSON value TEXT is). A
    rate limit (429) or a busy server (503) is waited out (its Retry-After) and
    the send tried again, up to 3 times, with one client_msg_id, so it is
    stored once. A refusal exits with status 1 and the server's message.

    Who speaks, flags first, then the environment: a --ticket or --token given
    as a flag is used, and LIVEROOM_TICKET or LIVEROOM_PUBLISHER_TOKEN from the
    environment is not (with a --ticket flag, nor is LIVEROOM_UID: the ticket
    names the uid). Given both the same way, the token speaks, for --uid
    (without --uid, a normal message goes as the ticket's uid).
    The environment's token speaks only for --important and --to: a normal
    message for --uid goes as that uid's own, moderated and rate limited
    (give --token as a flag for the backend to speak for it; it says so); a
    server in ticket mode, which takes no uid without a ticket, gets it with
    the environment's token after all, and the command says so.
    """
    from ..client import ApiError, Client, ClientError

    ctx = click.get_current_context()
    flags, aside = flags_first(ctx, ("ticket", "token"))
    if "ticket" in aside:
        ticket = None
    if "token" in aside:
        token = None
    if "uid" in aside:
        uid = None
    if uid is None and ticket is not None and not (important or to):
        token = None  # the token speaks for a --uid; without one, the ticket names its own
    fallback = None
    if token is not None and ticket is None and not (important or to) \
            and ctx.get_parameter_source("token") is not ParameterSource.COMMANDLINE:
        # The environment's publisher token (the README's exports) speaks only
        # where the backend must: a chat line for --uid is that uid's, muted,
        # banned, slowed and rate limited as its own (issue 46). A server that
        # takes no uid without a ticket (--auth ticket) gets it with the token
        # after all, said on stderr; --token as a flag speaks at once, and says so.
        fallback, token = token, None
    if client_msg_id is None:
        client_msg_id = secrets.token_hex(8)  # one id if the token must send it again
    if uid is None and ticket is None:
        uid = f"sender-{secrets.token_hex(3)}"
        click.echo(f"-- sending as {uid} (give --uid to choose)", err=True)
    body: Any = text
    if as_json:
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="TEXT") from None

    def retrying(retry: Retry) -> None:
        why = f"HTTP {retry.status}" if retry.status else "network"
        click.echo(f"-- {why}: {retry.reason}; again in {retry.delay:.1f} s", err=True)

    async def sent_by(token: str | None) -> Sent:
        async with Client(url, ticket=ticket, token=token) as client:
            sent = await client.send(room_name, body, uid=uid, important=important,
                                     client_msg_id=client_msg_id, to=to, on_retry=retrying)
            if token is not None and not (important or to):
                click.echo(f"-- sent with the publisher token: the backend speaking for {uid}, "
                           "exempt from moderation and rate limits", err=True)
            return sent

    async def run() -> str:
        try:
            sent = await sent_by(token)
        except ApiError as exc:
            if fallback is None or exc.status != 401:
                raise
            sent = await sent_by(fallback)  # a ticket server: the backend's token, said
        if sent.held is not None:
            return (f"held for review as message {sent.held} of {room_name}'s queue: not "
                    f"sent until a moderator approves it (`liveroom review {room_name}`)")
        if sent.private is False:
            click.echo(f"-- not private: the server runs --auth open, where any client "
                       f"can read {to}'s personal messages (--auth ticket makes them "
                       f"{to}'s alone)", err=True)
        if sent.held is not None:
            return f"held for review ({sent.held}): the word filter sent it to the moderators"
        if sent.pseq is None:
            return str(sent.seq)
        return (f"personal message to {to}: pseq {sent.pseq}, its position among "
                f"{room_name}'s personal messages (numbered apart from the room's seq)")

    try:
        said = asyncio.run(run())
    except ClientError as exc:
        if aside:
            click.echo(left_aside_note(ctx, flags, aside), err=True)
        hint = (f"give --token or set {env_of('publisher_token')}"
                if (important or to) and not token
                else None if ticket or token else f"give --ticket or set {TICKET_ENV}")
        raise clear(exc, hint) from None
    click.echo(said)


@click.command()
@click.argument("room_name", metavar="ROOM", callback=check_room)
@click.option("--count", type=click.IntRange(1, 100), default=1, show_default=True,
              help="Taps in this request (a client batches its taps).")
@click.option("--uid", callback=check_optional_uid, envvar=UID_ENV, show_envvar=True,
              help="Who taps (open mode) [default: a made-up fan-XXXXXX; with --ticket, the "
                   "ticket's].")
@ticket_option
@url_option
def like(room_name: str, count: int, uid: str | None, ticket: str | None, url: str) -> None:
    """Tap COUNT likes in ROOM and print the room's total as the node knows it.

    Each uid may send a few like requests a second (the server's
    --likes-requests and --likes-taps): past them the node answers 429 and this
    exits with status 1 and its message. A --ticket given as a flag speaks
    for the uid it names: LIVEROOM_UID from the environment is not used."""
    from ..client import Client, ClientError

    ctx = click.get_current_context()
    flags, aside = flags_first(ctx, ("ticket",))
    if "ticket" in aside:
        ticket = None
    if "uid" in aside:
        uid = None
    if uid is None and ticket is None:
        uid = f"fan-{secrets.token_hex(3)}"
        click.echo(f"-- tapping as {uid} (give --uid to choose)", err=True)

    async def run() -> int:
        async with Client(url, ticket=ticket) as client:
            return await client.like(room_name, count, uid=uid)

    try:
        total = asyncio.run(run())
    except ClientError as exc:
        if aside:
            click.echo(left_aside_note(ctx, flags, aside), err=True)
        raise clear(exc, None if ticket else f"give --ticket or set {TICKET_ENV}") from None
    click.echo(f"{room_name}: {total} {'like' if total == 1 else 'likes'}")


@click.command()
@click.argument("room_name", metavar="ROOM", callback=check_room)
@click.option("--uid", callback=check_optional_uid, required=True, help="The giver.")
@click.option("--value", type=click.IntRange(1, 10**12), required=True,
              help="What the gift is worth, in your backend's unit.")
@click.option("--gift", "name", default="gift", show_default=True, help="The gift's name.")
@ticket_option
@click.option("--token", envvar=env_of("publisher_token"), show_envvar=True,
              help="The publisher (or admin) token: gifts are your backend's call (or a "
                   "ticket minted with --publish).")
@url_option
def gift(room_name: str, uid: str, value: int, name: str, ticket: str | None,
         token: str | None, url: str) -> None:
    """Give UID's gift worth VALUE in ROOM and print the giver's rank and score.

    The room's ranking is for its current broadcast (`liveroom leaderboard
    ROOM`); ending the broadcast freezes it. A --ticket or --token given as a
    flag speaks: the other from the environment is not used."""
    from ..client import Client, ClientError

    ctx = click.get_current_context()
    flags, aside = flags_first(ctx, ("ticket", "token"))
    if "ticket" in aside:
        ticket = None
    if "token" in aside:
        token = None

    async def run() -> str:
        async with Client(url, ticket=ticket, token=token) as client:
            given = await client.gift(room_name, uid, value, name)
        return (f"{room_name}: {uid} is number {given.rank} with {given.score} "
                f"(the room's gifts: {given.total})")

    try:
        said = asyncio.run(run())
    except ClientError as exc:
        if aside:
            click.echo(left_aside_note(ctx, flags, aside), err=True)
        raise clear(exc, None if token or ticket
                    else f"give --token or set {env_of('publisher_token')}") from None
    click.echo(said)


@click.command()
@click.argument("room_name", metavar="ROOM", callback=check_room)
@click.option("--limit", type=click.IntRange(1, 100), default=10, show_default=True,
              help="Givers to list.")
@url_option
def leaderboard(room_name: str, limit: int, url: str) -> None:
    """Print ROOM's top givers in its current broadcast, best first, and its gift total."""
    from ..client import Client, ClientError

    async def run() -> list[str]:
        async with Client(url) as client:
            ranking = await client.leaderboard(room_name, limit=limit)
        lines = [f"{place:>3}. {uid}  {score}" for place, (uid, score)
                 in enumerate(ranking.top, 1)]
        return [*lines, f"{room_name}: {ranking.count} gifts, {ranking.total} in all"]

    try:
        lines = asyncio.run(run())
    except ClientError as exc:
        raise clear(exc, None) from None
    for line in lines:
        click.echo(line)
