"""The webhooks' failed events from a terminal: ``liveroom webhooks failed``
lists the events given up after ``--webhook-retry-for``, ``liveroom webhooks
replay [ID...]`` puts them back in the outbox (every one without an id),
through a running server or, with --store, in the store itself (whichever
node delivers sends them)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from .calls import operate
from .options import operators_options
from .times import when

if TYPE_CHECKING:
    from ..client import FailedEvent, FailedEvents
    from ..store.base import Failed, Store

EVENT_SHOWN = 160
"""Characters of an event's own fields a listing line shows."""


def _check_ids(ctx: click.Context, param: click.Parameter,
               value: tuple[str, ...]) -> tuple[str, ...]:
    from ..store.base import check_event_id

    try:
        return tuple(check_event_id(event_id) for event_id in value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _failed_line(failed: FailedEvent) -> str:
    """One failed event, one line: id, when given up, why, type, room, its fields."""
    own = {k: v for k, v in failed.event.items() if k not in ("id", "type", "at_ms", "room")}
    fields = json.dumps(own, ensure_ascii=False, separators=(",", ":"))
    if len(fields) > EVENT_SHOWN:
        fields = fields[:EVENT_SHOWN - 1] + "…"
    return (f"{failed.id}  {when(failed.failed_ms)}  ({failed.why})  {failed.type} "
            f"room {failed.room}: {fields}")


def _stored_failed(stored: list[Failed], count: int) -> FailedEvents:
    from ..client import FailedEvent, FailedEvents

    events = []
    for item in stored:
        try:
            doc = json.loads(item.data)
        except ValueError:
            doc = {}
        events.append(FailedEvent(item.event_id, str(doc.get("type", "")),
                                  str(doc.get("room", "")), item.failed_ms, item.why, doc))
    return FailedEvents(count, tuple(events))


@click.group()
def webhooks() -> None:
    """The webhooks' events given up: list them, send them again.

    An event the backend did not take (a 2xx answer) within the server's
    --webhook-retry-for (24h by default) of its action is given up and kept
    (100 000 at most, the oldest forgotten) until it is replayed.
    """


@webhooks.command("failed")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="Failed events to list, oldest first.")
@operators_options
def webhooks_failed(limit: int, url: str, admin_token: str | None, store: str | None) -> None:
    """Print the events given up, oldest first, one a line: its id, when it
    was given up, why (the last attempt's failure), its type, room and
    fields."""

    async def through_store(s: Store) -> FailedEvents:
        listed, count = await s.outbox.failed(limit)
        return _stored_failed(listed, count)

    found = operate(url, admin_token, store, lambda c: c.failed_events(limit), through_store)
    click.echo(f"{found.count} events given up" + (
        f" (the oldest {len(found.failed)} shown)" if len(found.failed) < found.count else ""))
    for failed in found.failed:
        click.echo(_failed_line(failed))


@webhooks.command("replay")
@click.argument("ids", nargs=-1, metavar="[ID...]", callback=_check_ids)
@operators_options
def webhooks_replay(ids: tuple[str, ...], url: str, admin_token: str | None,
                    store: str | None) -> None:
    """Send the failed events ID... again (every failed event without an
    ID), each under its own id: the backend dedupes one it kept. Prints
    how many were replayed; an ID not in the failed list is said."""
    wanted = list(ids) or None

    async def through_store(s: Store) -> tuple[str, ...]:
        return tuple(await s.outbox.replay(wanted))

    done = operate(url, admin_token, store, lambda c: c.replay_events(wanted), through_store)
    click.echo(f"{len(done)} events replayed")
    for missing in [i for i in ids if i not in done]:
        click.echo(f"{missing}: not in the failed list", err=True)
