"""The review queue's way in: :class:`ReviewQueue`, where the send path puts
a message that a word filter ("hold") or the backend's send hook held for a
moderator, instead of storing it.

The node builds one (``liveroom/node.py``) over its store's
:class:`~liveroom.store.review.ReviewStore` and hands it to the proxy, whose
sender path and moderators' routes share it: the send path calls
:meth:`ReviewQueue.hold` and answers its sender 202 ``{"held": id}``; the
moderators list, approve and deny through ``/v1/admin/rooms/{room}/review``
(``proxy/moderation/review.py``).

A held message is nobody's to read but the moderators': it is not in the
room's log, so no poll, first poll or admin page of messages shows it. Its
sender was told its id and may show it as pending.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .events import NO_EVENTS, Events
from .metrics import Metrics
from .model import NewMessage
from .store.base import Held, ReviewStore, held_kind

logger = logging.getLogger("liveroom.review")

OnDropped = Callable[[str, Held], None]
"""Told ``(room, held)`` of each held message a full queue dropped."""


class ReviewQueue:
    """The rooms' review queues as the send path sees them: one per node.

    **Dropped messages.** A room's queue holds ``--review-max`` messages: one
    more drops the oldest, whichever node held it. The node whose hold
    dropped it counts it (``liveroom_review_dropped_total``), logs one line,
    calls every :attr:`on_dropped` listener and writes its
    ``message.dropped`` event, once.
    """

    def __init__(self, store: ReviewStore, *, metrics: Metrics | None = None,
                 events: Events = NO_EVENTS) -> None:
        self.store = store
        self.events = events
        """Where a hold writes its ``message.held`` event (the moderators'
        decisions write theirs through the same)."""
        """The store's review queues (the moderators' routes decide through it)."""
        self._metrics = metrics
        self.on_dropped: list[OnDropped] = []
        """Listeners told of each message a full queue dropped (the webhooks
        hear of it through :attr:`events`)."""

    async def hold(self, room: str, message: NewMessage, why: str) -> str:
        """Hold ``message`` (as the sender path made it, its ``ts`` the time
        its send was accepted) in ``room``'s queue for ``why`` (at most
        :data:`~liveroom.store.review.WHY_MAX` characters: the filter's
        word, the hook's reason); its id in the room, which the sender is
        told (202 ``{"held": id}``). A send held before under the same
        ``client_msg_id`` answers that one's id and holds nothing.

        Nothing is checked here that the send path checked (the sender's
        right to send it, its size, its rate limits: a held send counts in
        them like a stored one, as the caller decides). Raises
        ``ValueError`` for what the store refuses (a ``why`` too long) and
        :class:`~liveroom.errors.StoreUnavailable` when the store is away
        (then nothing is held: the sender is answered 503 and retries)."""
        # The store keeps the events with the hold: message.held (unless
        # held before), and a message.dropped for each pushed out.
        ahead = await self.events.ahead("message.held", room, uid=message.uid,
                                        kind=held_kind(message), to=message.to,
                                        body=message.body, why=why)
        try:
            holding = await self.store.hold(
                room, message, why, event=None if ahead is None else ahead.event,
                dropped=self.events.several("message.dropped", room))
        finally:
            await self.events.settle(ahead)
        metrics = self._metrics
        if not holding.again and metrics is not None:
            metrics.review_held.inc()
        for gone in holding.dropped:
            if metrics is not None:
                metrics.review_dropped.inc()
            logger.warning("review: the queue of room %s is full: held message %s of uid %s "
                           "(held for %r) dropped", room, gone.id, gone.uid, gone.why)
            for listener in self.on_dropped:
                try:
                    listener(room, gone)
                except Exception:  # a listener's fault is not the sender's
                    logger.exception("review: a listener of dropped messages failed")
        return holding.id
