"""Moderation from a terminal: ``liveroom recall`` a message, ``mute`` and
``unmute``, ``ban`` and ``unban`` a uid, put a room in ``slow`` mode, and read
its ``moderation`` (the state and the broadcast's audit). Every one but
``recall`` is an operators' command, made through a running server or, with
--store, in the store itself."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from ..clock import SystemClock
from ..settings import env_of
from .calls import clear, operate, store_events
from .credentials import flags_first, left_aside_note
from .options import (
    TICKET_ENV,
    F,
    check_optional_uid,
    check_room,
    check_uid,
    operators_options,
    url_option,
)
from .times import Duration, duration_text, when

if TYPE_CHECKING:
    from ..client import AuditEntry, RoomModeration, Sanction
    from ..store.base import Store


@click.command()
@click.argument("room_name", metavar="ROOM", callback=check_room)
@click.argument("seq", type=click.IntRange(1))
@click.option("--uid", callback=check_optional_uid, default=None,
              help="Recall as this sender, one of its own messages, on a server in open "
                   "mode (within the server's --recall-window, 120 s, of sending it); "
                   "the admin token is not used then, nor a ticket from the environment.")
@click.option("--personal", is_flag=True,
              help="SEQ is a personal message's pseq (as `liveroom send --to` prints it): "
                   "the backend's call (the admin or publisher token, or a ticket minted "
                   "with --publish); its addressee is told.")
@click.option("--ticket", envvar=TICKET_ENV, show_envvar=True,
              help="A ticket (servers run with --auth ticket): its uid recalls its own "
                   "messages within the window, one minted with --publish any message. "
                   "Given as a flag, it wins over the environment's admin token.")
@click.option("--admin-token", envvar=env_of("admin_token"), show_envvar=True,
              help="The server's admin token (or the publisher token): recalls any "
                   "message the room keeps.")
@url_option
def recall(room_name: str, seq: int, uid: str | None, personal: bool, ticket: str | None,
           admin_token: str | None, url: str) -> None:
    """Recall message SEQ of ROOM: its body is gone for good, and every
    listener is told.

    The admin token (from the environment, as for the other operators'
    commands), the publisher token or a ticket minted with --publish recall
    any message the room still keeps, normal or important; a sender recalls
    its own within the server's --recall-window (120 s): --uid UID on a
    server in open mode, or its --ticket. Listeners learn of it in their next
    answer (`liveroom listen` notes `-- recalled: SEQ`), and every later
    answer, on every node, carries the message without its body. Recalling
    twice answers the same; a message the room no longer keeps is an error
    (HTTP 404). With --personal, SEQ is a personal message's pseq: its
    addressee is told (`-- recalled: pPSEQ`). Prints one line: which message,
    whose.
    """
    from ..client import Client, ClientError

    ctx = click.get_current_context()
    if uid is not None and personal:
        raise click.UsageError("a personal message is the backend's: --uid cannot recall "
                               "one (give the admin or publisher token, or a publishing "
                               "--ticket)")
    if uid is not None:
        if ctx.get_parameter_source("admin_token") is ParameterSource.COMMANDLINE:
            raise click.UsageError("--uid recalls as that sender, --admin-token as a "
                                   "moderator: give one of them")
        admin_token = None  # the sender speaks, not the environment's token
        if ctx.get_parameter_source("ticket") is ParameterSource.ENVIRONMENT:
            ticket = None  # nor the environment's ticket: an open server takes no ticket
    flags, aside = flags_first(ctx, ("ticket", "admin_token"))
    if "ticket" in aside:
        ticket = None
    if "admin_token" in aside:
        admin_token = None
    if not (uid or ticket or admin_token):
        raise click.UsageError(
            f"who recalls? Give --admin-token (or set {env_of('admin_token')}) to recall "
            f"any message, --uid UID to recall UID's own (open mode), or --ticket")

    async def run() -> str:
        async with Client(url, ticket=ticket, token=admin_token) as client:
            if personal:
                mine = await client.recall_personal(room_name, seq)
                return (f"room {mine.room}: personal message p{mine.pseq} of {mine.uid} to "
                        f"{mine.to} recalled ({mine.to} is told)")
            done = await client.recall(room_name, seq, uid=uid)
            return (f"room {done.room}: message {done.seq} of {done.uid} recalled (every "
                    f"listener is told)")

    try:
        said = asyncio.run(run())
    except ClientError as exc:
        if aside:
            click.echo(left_aside_note(ctx, flags, aside), err=True)
        raise clear(exc) from None
    click.echo(said)


def _reason_option(command: F) -> F:
    return click.option(
        "--reason", default="", metavar="TEXT",
        help="Why (at most 200 characters), kept in the room's audit "
             "(`liveroom moderation`).")(command)


async def _act_in_store(store: Store, room: str, action: str, target: str, seconds: int,
                        reason: str) -> tuple[int, Any]:
    """One moderation action taken in the store itself (``--store``): every
    node reads it from the store's journal within about a second. The time
    it was taken and the room's moderation after it (``None``: none left)."""
    from ..events import SANCTION_EVENTS
    from ..store.base import AuditEntry as StoredEntry

    kind = SANCTION_EVENTS.get(action)
    ahead = None if kind is None else await (await store_events(store)).ahead(
        kind, room, uid=target, seconds=seconds, reason=reason, by="admin")
    now_ms = int(SystemClock().time() * 1000)
    try:
        await store.moderation.act(room, StoredEntry(now_ms, "admin", action, target, seconds,
                                                     reason), now_ms,
                                   event=None if ahead is None else ahead.event)
    except ValueError as exc:  # what the store refuses (a reason too long, a full room)
        raise click.ClickException(str(exc)) from None
    return now_ms, (await store.moderation.rooms([room], now_ms)).get(room)


def _stored_sanction(room: str, kind: str, uid: str, now_ms: int,
                     state: Any) -> Sanction | None:
    """``uid``'s mute or ban (``kind``: ``muted``, ``banned``) in a room's
    moderation as the store reads it, as the client shows it."""
    from ..client import Sanction

    given = None if state is None else next(
        (s for s in getattr(state, kind) if s.uid == uid), None)
    if given is None:
        return None
    left = None if not given.until_ms else max(0, -(-(given.until_ms - now_ms) // 1000))
    return Sanction(room, uid, given.until_ms, left, given.reason, given.by, given.at_ms)


def _sanctioned(room: str, uid: str, kind: str, seconds: int, sanction: Sanction | None,
                reason: str) -> str:
    """The line saying a mute or ban was given."""
    verb = "muted in" if kind == "muted" else "banned from"
    how = "until lifted"
    if seconds:
        how = f"for {duration_text(seconds)}"
        if sanction is not None:
            how += f" (until {when(sanction.until_ms)})"
    return f"{uid} is {verb} room {room} {how}" + (f": {reason}" if reason else "")


@click.command()
@click.argument("room_name", metavar="ROOM", callback=check_room)
@click.argument("uid", callback=check_uid)
@click.option("--for", "seconds", type=Duration(1), required=True, metavar="DURATION",
              help="How long: 30s, 10m, 2h, 1d, 1h30m, or plain seconds; at most 30d.")
@_reason_option
@operators_options
def mute(room_name: str, uid: str, seconds: int, reason: str, url: str,
         admin_token: str | None, store: str | None) -> None:
    """Mute UID in ROOM for a while: its sends are refused (HTTP 403 muted,
    saying for how long); it still listens.

    Muting it again replaces the mute; `liveroom unmute` lifts it early.
    Every node applies it within about a second. Prints one line: who, for
    how long (until when), why.
    """

    async def through_store(s: Store) -> Sanction | None:
        now_ms, state = await _act_in_store(s, room_name, "mute", uid, seconds, reason)
        return _stored_sanction(room_name, "muted", uid, now_ms, state)

    sanction = operate(url, admin_token, store,
                       lambda c: c.mute(room_name, uid, seconds, reason), through_store)
    click.echo(_sanctioned(room_name, uid, "muted", seconds, sanction, reason))


@click.command()
@click.argument("room_name", metavar="ROOM", callback=check_room)
@click.argument("uid", callback=check_uid)
@operators_options
def unmute(room_name: str, uid: str, url: str, admin_token: str | None,
           store: str | None) -> None:
    """Lift UID's mute in ROOM: it may send again at once (a uid that was not
    muted is no error)."""

    async def through_store(s: Store) -> None:
        await _act_in_store(s, room_name, "unmute", uid, 0, "")

    operate(url, admin_token, store, lambda c: c.unmute(room_name, uid), through_store)
    click.echo(f"{uid}'s mute in room {room_name} is lifted")


@click.command()
@click.argument("room_name", metavar="ROOM", callback=check_room)
@click.argument("uid", callback=check_uid)
@click.option("--for", "seconds", type=Duration(1), default=None, metavar="DURATION",
              help="How long: 30s, 10m, 2h, 1d, 1h30m, or plain seconds; at most 30d "
                   "[default: until lifted].")
@_reason_option
@operators_options
def ban(room_name: str, uid: str, seconds: int | None, reason: str, url: str,
        admin_token: str | None, store: str | None) -> None:
    """Ban UID from ROOM, until lifted or --for a while: its polls and sends
    are refused (HTTP 403 banned).

    Its polls held on any node are answered so within about a second, and it
    leaves the room's online list (within a few seconds). Banning it again
    replaces the ban; `liveroom unban` lifts it. Prints one line: who, for
    how long, why.
    """
    given = seconds or 0

    async def through_store(s: Store) -> Sanction | None:
        now_ms, state = await _act_in_store(s, room_name, "ban", uid, given, reason)
        return _stored_sanction(room_name, "banned", uid, now_ms, state)

    sanction = operate(url, admin_token, store,
                       lambda c: c.ban(room_name, uid, given, reason), through_store)
    click.echo(_sanctioned(room_name, uid, "banned", given, sanction, reason))


@click.command()
@click.argument("room_name", metavar="ROOM", callback=check_room)
@click.argument("uid", callback=check_uid)
@operators_options
def unban(room_name: str, uid: str, url: str, admin_token: str | None,
          store: str | None) -> None:
    """Lift UID's ban from ROOM: it may listen and send again at once (a uid
    that was not banned is no error)."""

    async def through_store(s: Store) -> None:
        await _act_in_store(s, room_name, "unban", uid, 0, "")

    operate(url, admin_token, store, lambda c: c.unban(room_name, uid), through_store)
    click.echo(f"{uid}'s ban from room {room_name} is lifted")


def _slow_text(seconds: int) -> str:
    return f"slow mode, one message per {seconds} s" if seconds else "slow mode off"


@click.command()
@click.argument("room_name", metavar="ROOM", callback=check_room)
@click.argument("seconds", type=Duration(0), metavar="SECONDS")
@operators_options
def slow(room_name: str, seconds: int, url: str, admin_token: str | None,
         store: str | None) -> None:
    """Put ROOM in slow mode: each uid may send one normal message per
    SECONDS (0 lifts it; 30s, 10m... read as durations, at most 30d).

    A send past it gets HTTP 429 with Retry-After; important messages and
    the backend's tokens are exempt. Listeners' answers carry it (`liveroom
    listen` notes `-- slow mode: one message per S s`). Prints the room's
    slow mode now.
    """

    async def through_store(s: Store) -> int:
        _, state = await _act_in_store(s, room_name, "slow", "", seconds, "")
        return 0 if state is None else int(state.slow)

    now = operate(url, admin_token, store, lambda c: c.slow(room_name, seconds),
                  through_store)
    click.echo(f"room {room_name}: {_slow_text(now)} per uid" if now
               else f"room {room_name}: slow mode off")


def _action_text(entry: AuditEntry) -> str:
    """One action of the audit, in words."""
    action, target, seconds = entry.action, entry.target, entry.seconds
    if action in ("mute", "ban"):
        text = f"{action} {target} " + (f"for {duration_text(seconds)}" if seconds
                                        else "until lifted")
    elif action == "slow":
        text = _slow_text(seconds)
    elif action == "recall":
        lane, _, seq = target.partition(":")
        text = {"room": f"recall message {seq}",
                "personal": f"recall personal message p{seq}"}.get(lane, f"recall {target}")
    elif action in ("approve", "deny"):  # the reason is why it was held
        uid, _, held_id = target.partition(":")
        return f"{action} held message {held_id} of {uid}" + (
            f" (held for: {entry.reason})" if entry.reason else "")
    else:
        text = f"{action} {target}".rstrip()
    return text + (f": {entry.reason}" if entry.reason else "")


@click.command()
@click.argument("room_name", metavar="ROOM", callback=check_room)
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="Actions of the audit to print, newest first.")
@operators_options
def moderation(room_name: str, limit: int, url: str, admin_token: str | None,
               store: str | None) -> None:
    """Print ROOM's moderation: slow mode, how many uids are muted and
    banned, then the current broadcast's actions, newest first, one a line
    (when, who, what, why).

    `liveroom room end` archives the audit with the broadcast; mutes, bans
    and slow mode stay with the room.
    """

    async def through_store(s: Store) -> RoomModeration:
        from ..client import AuditEntry, RoomModeration

        now_ms = int(SystemClock().time() * 1000)
        state = (await s.moderation.rooms([room_name], now_ms)).get(room_name)
        entries = await s.moderation.audit(room_name, limit)
        return RoomModeration(
            room_name, 0 if state is None else state.slow,
            0 if state is None else len(state.muted), 0 if state is None else len(state.banned),
            tuple(AuditEntry(e.at_ms, e.by, e.action, e.target, e.seconds, e.reason)
                  for e in entries))

    state = operate(url, admin_token, store, lambda c: c.moderation(room_name, limit),
                    through_store)
    click.echo(f"room {state.room}: {_slow_text(state.slow)}; {state.muted} muted, "
               f"{state.banned} banned")
    width = max((len(e.by) for e in state.audit), default=0)
    for entry in state.audit:
        click.echo(f"{when(entry.at_ms)}  {entry.by:<{width}}  {_action_text(entry)}")
    if not state.audit:
        click.echo("no moderation in this broadcast yet")
