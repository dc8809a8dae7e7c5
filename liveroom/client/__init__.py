"""A Python client of the v1 HTTP API (aiohttp): listen to a room, send to it,
and the operators' calls.

::

    async with Client("http://127.0.0.1:8080") as client:
        await client.send("demo", {"text": "hello"}, uid="bob")
        async for answer in client.listen("demo", uid="alice"):
            for message in answer.delivered:      # important ones first
                print(message.seq, message.body)

**The listening loop** follows the contract (docs/design.md, "Listening"): a first
poll without cursors, then at once another with the ``epoch``, ``seq``,
``iseq`` and ``ctx`` of the last answer. It never sleeps between answers: in a
big room the server paces the listener (``interval_ms``) by holding its poll,
so polling again at once is right. Each answer it yields carries the important
messages before the normal ones, and says when cursors were reset (``reset``:
the log restarted, an ended broadcast) and how many messages the listener
missed (``gap``, ``igap``). In a room with gifts it keeps the top givers of
the last answer that carried them (:attr:`Listening.ranking`) and echoes
their version, so an answer carries ``ranking`` again only when they changed
(such an answer is never skipped as empty). An answer lists the messages
recalled since the listener's cursor (``recalled``: one that lists nothing
else is not skipped either), and a message recalled before it was delivered
comes as a tombstone (:attr:`Message.recalled`, no body); the same for the
listener's personal messages (``precalled``, :attr:`PersonalMessage.recalled`).
An answer whose slow mode (``slow``) differs from the last one's is never
skipped. A network error or a read that outlasts ``timeout`` +
``interval_ms`` + :data:`READ_MARGIN` is retried with the same cursors after
an exponential, jittered backoff (:data:`BACKOFF_FIRST` up to
:data:`BACKOFF_MAX` seconds); a 429 or 503 after its ``Retry-After``. Any
other refusal (a bad name, a missing ticket) ends the loop with
:class:`ApiError`:
retrying it would fail the same way.

**Stopping.** ``break`` out of the ``async for``, call :meth:`Listening.stop`
from elsewhere (the poll in flight is abandoned and its connection closed;
the iteration ends without an error), or cancel the task. Leaving ``async
with Client(...)`` (:meth:`Client.close`) stops every listening the client
made, as :meth:`Listening.stop` does: a task still iterating one sees its
``async for`` end without an error, and can be awaited; any later call on
the client raises :class:`ClientClosed`.

This package is part of the core: it imports no role, and nothing of the
server beyond the name rule. :mod:`.api` holds :class:`Client` (one call a
method), :mod:`.listening` the loop, :mod:`.answers` the typed answers
(frozen dataclasses) and :mod:`.errors` :class:`ApiError`,
:class:`Unreachable` and :class:`ClientClosed`; everything is importable
from ``liveroom.client``.
"""

from __future__ import annotations

from .answers import (
    Answer,
    Approved,
    AuditEntry,
    Broadcast,
    BroadcastEnded,
    BroadcastStarted,
    Cursor,
    Denied,
    FailedEvent,
    FailedEvents,
    Given,
    HeldMessage,
    LiveNode,
    LiveRoom,
    Members,
    Message,
    OnlineSeries,
    PersonalMessage,
    Ranking,
    Recalled,
    RecalledPersonal,
    Retry,
    ReviewQueue,
    RoomModeration,
    RoomSect,
    RoomStats,
    Sanction,
    SectMove,
    Sent,
    SeriesPoint,
    TopGivers,
    VipChange,
    WordList,
)
from .api import CALL_TIMEOUT, Client
from .errors import ApiError, ClientClosed, ClientError, Unreachable
from .listening import BACKOFF_FIRST, BACKOFF_MAX, READ_MARGIN, Backoff, Listening

__all__ = [
    "BACKOFF_FIRST",
    "BACKOFF_MAX",
    "CALL_TIMEOUT",
    "READ_MARGIN",
    "Answer",
    "ApiError",
    "Approved",
    "AuditEntry",
    "Backoff",
    "Broadcast",
    "BroadcastEnded",
    "BroadcastStarted",
    "Client",
    "ClientClosed",
    "ClientError",
    "Cursor",
    "Denied",
    "FailedEvent",
    "FailedEvents",
    "Given",
    "HeldMessage",
    "Listening",
    "LiveNode",
    "LiveRoom",
    "Members",
    "Message",
    "OnlineSeries",
    "PersonalMessage",
    "Ranking",
    "Recalled",
    "RecalledPersonal",
    "Retry",
    "ReviewQueue",
    "RoomModeration",
    "RoomSect",
    "RoomStats",
    "Sanction",
    "SectMove",
    "Sent",
    "SeriesPoint",
    "TopGivers",
    "Unreachable",
    "VipChange",
    "WordList",
]
