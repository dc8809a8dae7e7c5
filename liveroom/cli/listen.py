"""``liveroom listen``: a room's messages printed as they arrive, one a line,
and what its answers say besides them (a reset, a gap, the top givers, a
recall, slow mode) as ``--`` lines on stderr."""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import sys
from typing import TYPE_CHECKING, Any

import click

from ..settings import DEFAULTS
from .calls import clear
from .credentials import flags_first, left_aside_note
from .options import TICKET_ENV, UID_ENV, check_optional_uid, check_room, ticket_option, url_option

if TYPE_CHECKING:
    from ..client import Answer, Message, PersonalMessage, Retry


def _body_text(body: Any) -> str:
    return body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)


def _message_line(message: Message) -> str:
    mark = " [important]" if message.important else ""
    if message.recalled:
        return f"{message.seq}{mark} [recalled] {message.uid}"
    return f"{message.seq}{mark} {message.uid}: {_body_text(message.body)}"


def _personal_line(message: PersonalMessage) -> str:
    if message.recalled:
        return f"p{message.pseq} [to {message.to}] [recalled] {message.uid}"
    return f"p{message.pseq} [to {message.to}] {message.uid}: {_body_text(message.body)}"


def _notes(answer: Answer, first: bool, slow: int = 0, likes: int = 0) -> list[str]:
    """What an answer says besides its messages, as ``--`` lines (stderr);
    ``slow`` and ``likes`` are the slow mode and the likes total the listener
    knew before it."""
    notes = []
    if first:
        notes.append(f"-- listening to {answer.room} (epoch {answer.epoch}, seq {answer.seq}, "
                     f"{answer.online} online)")
    elif answer.reset:
        notes.append(f"-- reset: the room goes on in epoch {answer.epoch} from seq "
                     f"{answer.seq} (a broadcast ended, or its log restarted)")
    if answer.gap or answer.igap:
        missed = [f"{answer.gap} message{'s' * (answer.gap != 1)}"] if answer.gap else []
        if answer.igap:
            missed.append(f"{answer.igap} important")
        notes.append(f"-- gap: missed {' and '.join(missed)} (gone before this listener "
                     f"read them)")
    if answer.pgap:
        notes.append(f"-- gap: missed {answer.pgap} personal message"
                     f"{'s' * (answer.pgap != 1)} (gone before this listener read them)")
    if answer.recalled or answer.precalled:
        recalled = [str(seq) for seq in answer.recalled]
        recalled += [f"p{pseq}" for pseq in answer.precalled]
        notes.append(f"-- recalled: {', '.join(recalled)}")
    if answer.slow != slow:
        notes.append(f"-- slow mode: one message per {answer.slow} s" if answer.slow
                     else "-- slow mode: off")
    if answer.ranking is not None:
        top = ", ".join(f"{uid} {score}" for uid, score in answer.ranking.top)
        notes.append(f"-- ranking: {top or 'no gifts (the broadcast ended)'}")
    if answer.likes != likes and not (first and not answer.likes):
        notes.append(f"-- likes: {answer.likes}")
    return notes


@click.command()
@click.argument("room_name", metavar="ROOM", callback=check_room)
@click.option("--uid", callback=check_optional_uid, envvar=UID_ENV, show_envvar=True,
              help="Who listens (open mode) [default: a made-up listener-XXXXXX; with "
                   "--ticket, the ticket's].")
@ticket_option
@url_option
@click.option("--recent", type=click.IntRange(0, DEFAULTS.recent_max), default=None,
              help=f"Normal messages to show from before now (0-{DEFAULTS.recent_max}) "
                   f"[default: the server's, {DEFAULTS.recent_default}].")
@click.option("--timeout", type=click.IntRange(1, DEFAULTS.poll_timeout_max),
              default=int(DEFAULTS.poll_timeout), show_default=True,
              help="Seconds the server holds each poll when nothing happens.")
@click.option("--json", "as_json", is_flag=True,
              help="Print each message as one JSON object a line (seq, uid, important, "
                   "ts, body; a personal one pseq, n, uid, to, important, ts, body; a "
                   "recalled one with a null body and \"recalled\": true), and each note "
                   "on stderr as {\"note\": TEXT}.")
def listen(room_name: str, uid: str | None, ticket: str | None, url: str,
           recent: int | None, timeout: int, as_json: bool) -> None:
    """Print ROOM's messages as they arrive, until Ctrl-C.

    Each message is one line on stdout, `SEQ UID: BODY` (a body that is not a
    string printed as JSON), important ones marked `[important]` and printed
    before the chat of the same answer; the listener's own personal messages
    come first, `pPSEQ [to UID] SENDER: BODY`. Lines starting with `--` on stderr say
    where listening began, when the room was reset (a broadcast ended), how
    many messages were missed (gap), the room's top givers when they change
    (`-- ranking: UID SCORE, ...`, best first), the room's likes total when
    it changes (`-- likes: N`), the messages a moderator (or
    their sender) recalled (`-- recalled: SEQ, ...`, `pPSEQ` for the
    listener's personal ones: hide them; a recalled message not yet shown
    comes as `SEQ [recalled] UID`, without its body),
    and slow mode when it starts or changes (`-- slow mode: one message per
    S s`; `-- slow mode: off` once lifted). Network errors and busy servers
    (429, 503) are retried; a refusal (a bad ticket) exits with status 1.
    Ctrl-C or SIGTERM stops at once, exit status 0.

    Flags first, then the environment: a --ticket given as a flag names the
    listener, and LIVEROOM_UID from the environment is not used.
    """
    from ..client import Client, ClientError

    ctx = click.get_current_context()
    flags, aside = flags_first(ctx, ("ticket",))
    if "uid" in aside:
        uid = None
    if uid is None and ticket is None:
        uid = f"listener-{secrets.token_hex(3)}"

    def note(line: str) -> None:
        if as_json:
            click.echo(json.dumps({"note": line.removeprefix("-- ")}), err=True)
        else:
            click.echo(line, err=True)

    def retrying(retry: Retry) -> None:
        why = f"HTTP {retry.status}" if retry.status else "network"
        note(f"-- {why}: {retry.reason}; again in {retry.delay:.1f} s")

    async def run() -> None:
        async with Client(url, ticket=ticket) as client:
            listening = client.listen(room_name, uid=uid, timeout=timeout, recent=recent,
                                      on_retry=retrying)
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, listening.stop)
            first = True
            slow = likes = 0
            async for answer in listening:
                for line in _notes(answer, first, slow, likes):
                    note(line)
                first = False
                slow, likes = answer.slow, answer.likes
                for mine in answer.personal:
                    click.echo(json.dumps({"pseq": mine.pseq, "n": mine.n, "uid": mine.uid,
                                           "to": mine.to, "important": True, "ts": mine.ts,
                                           "body": mine.body,
                                           **({"recalled": True} if mine.recalled else {})},
                                          ensure_ascii=False)
                               if as_json else _personal_line(mine))
                for message in answer.delivered:
                    click.echo(json.dumps({"seq": message.seq, "uid": message.uid,
                                           "important": message.important,
                                           "ts": message.ts, "body": message.body,
                                           **({"recalled": True} if message.recalled
                                              else {})},
                                          ensure_ascii=False)
                               if as_json else _message_line(message))
                sys.stdout.flush()

    try:
        asyncio.run(run())
    except ClientError as exc:
        if aside:
            note(left_aside_note(ctx, flags, aside))
        raise clear(exc, None if ticket else f"give --ticket or set {TICKET_ENV}") from None
