"""The ``liveroom`` command: the :func:`main` group and its commands, one
module a family.

``liveroom serve`` runs every role in one process. Every option also reads an
environment variable (shown in ``--help``), so a container can be configured
without flags.

The commands: :mod:`.serve`; :mod:`.secrets`, a deployment's fresh secrets;
:mod:`.ticket`, a ticket signed as the backend signs them; :mod:`.operators`,
the ``vip`` and ``room`` groups; :mod:`.listen`; :mod:`.send` (with ``like``,
``gift`` and ``leaderboard``); :mod:`.moderation` (``recall``, ``mute``...
``moderation``); :mod:`.review` (``review``, the held messages);
:mod:`.filters` (the word filter's lists); :mod:`.webhooks` (the events
given up, their replay). What they share:
:mod:`.options`, :mod:`.credentials`, :mod:`.calls` and :mod:`.times`. Each
command imports what only it needs when it runs: ``ticket`` signs without
aiohttp, ``send`` and ``listen`` are clients (aiohttp's) that load nothing of
the server, and only ``serve`` imports the roles
(tests/faces/test_packaging.py).
"""

from __future__ import annotations

import click

from .. import __version__
from . import (
    filters,
    listen,
    moderation,
    operators,
    review,
    secrets,
    send,
    serve,
    ticket,
    webhooks,
)
from .options import DEFAULT_URL, TICKET_ENV, UID_ENV, URL_ENV
from .times import MODERATION_SECONDS_MAX, duration_text, seconds_of

__all__ = ["DEFAULT_URL", "MODERATION_SECONDS_MAX", "TICKET_ENV", "UID_ENV", "URL_ENV",
           "duration_text", "main", "seconds_of"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="liveroom")
def main() -> None:
    """liveroom: a long-polling live-room message server.

    Listeners long-poll GET /v1/rooms/ROOM/poll, senders POST
    /v1/rooms/ROOM/messages; important messages are never lost and huge rooms
    are served from one cached snapshot. Start with `liveroom serve`, then
    watch a room with `liveroom listen ROOM` and talk in it with `liveroom
    send ROOM TEXT`. The API is described at /openapi.json on every server.
    """


for command in (serve.serve, secrets.secrets_command, ticket.ticket, operators.vip,
                operators.room, listen.listen, send.send, send.like, send.gift,
                send.leaderboard, moderation.recall, moderation.mute, moderation.unmute,
                moderation.ban, moderation.unban, moderation.slow, moderation.moderation,
                review.review, filters.filters, webhooks.webhooks):
    main.add_command(command)
