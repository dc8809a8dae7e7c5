"""What the server answers, as frozen dataclasses (each built from the
answer's JSON document by the client)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a room, as a poll delivers it."""

    seq: int
    uid: str
    important: bool
    ts: int
    """Milliseconds since the Unix epoch, when the server accepted it."""
    body: Any
    """``None`` once recalled."""
    recalled: bool = False
    """A moderator (or its sender) recalled it: its body is gone (``None``);
    show it as recalled, or not at all."""
    extra: Mapping[str, Any] | None = None
    """What the backend's send hook attached to it (a small object: a
    badge, a translation...); ``None``: nothing."""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Message:
        return cls(int(doc["seq"]), str(doc["uid"]), bool(doc["important"]),
                   int(doc["ts"]), doc["body"], bool(doc.get("recalled", False)),
                   doc.get("extra"))


@dataclass(frozen=True, slots=True)
class PersonalMessage:
    """A message for this listener alone (``"to"``: its uid), always important."""

    pseq: int
    """Its position in the room's personal sequence (shared by every listener's)."""
    n: int
    """Its ordinal among this listener's personal messages in the room (1, 2, ...)."""
    uid: str
    """Who sent it."""
    to: str
    ts: int
    body: Any
    """``None`` once recalled."""
    recalled: bool = False
    """The backend recalled it: its body is gone (``None``)."""
    extra: Mapping[str, Any] | None = None
    """What the backend's send hook attached to it; ``None``: nothing."""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> PersonalMessage:
        return cls(int(doc["pseq"]), int(doc["n"]), str(doc["uid"]), str(doc["to"]),
                   int(doc["ts"]), doc["body"], bool(doc.get("recalled", False)),
                   doc.get("extra"))


@dataclass(frozen=True, slots=True)
class TopGivers:
    """The room's top givers as a poll answer carries them (``ranking``): at
    most three, best first, in its current broadcast."""

    version: int
    """A checksum of ``top``, the same on every node: the next polls echo it,
    and the answers carry the ranking again only when it changed."""
    top: tuple[tuple[str, int], ...]
    """``(uid, score)``; empty once the broadcast ended."""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> TopGivers:
        return cls(int(doc["version"]),
                   tuple((str(g["uid"]), int(g["score"])) for g in doc["top"]))


@dataclass(frozen=True, slots=True)
class Answer:
    """One poll's answer."""

    room: str
    epoch: str
    seq: int
    """The last normal position delivered or counted."""
    iseq: int
    """The last important position delivered or counted."""
    important: tuple[Message, ...]
    messages: tuple[Message, ...]
    gap: int
    """Normal messages this listener had not read that are gone (evicted or skipped)."""
    igap: int
    """Important messages likewise gone."""
    reset: bool
    """The cursors did not fit the room (a new epoch, an ended broadcast): this
    answer is like a first poll."""
    ctx: str
    online: int
    interval_ms: int
    """Longest the server's pacing may hold this listener's next poll now."""
    likes: int = 0
    """The room's likes in its current broadcast (0 from an older server)."""
    spread: int | None = None
    """In a vip room, the routing hint the next poll echoes (``None``: none)."""
    pseq: int = 0
    """The personal cursor the next poll echoes."""
    personal: tuple[PersonalMessage, ...] = ()
    """This listener's own messages, delivered ahead of the room's."""
    pgap: int = 0
    """Its own messages gone before it came back for them."""
    ranking: TopGivers | None = None
    """The room's top givers, only when they changed since the version the
    listener echoed (``None``: unchanged, no gifts, or an older server)."""
    recalled: tuple[int, ...] = ()
    """The seqs of messages recalled since the listener's cursor: remove the
    ones it shows, or mark them (those still in this answer come as
    tombstones, :attr:`Message.recalled`)."""
    slow: int = 0
    """The room's slow mode: each uid may send one normal message per
    ``slow`` seconds (0: off)."""
    precalled: tuple[int, ...] = ()
    """The pseqs of this listener's personal messages recalled since its
    personal cursor (those still in this answer come as tombstones,
    :attr:`PersonalMessage.recalled`)."""

    @property
    def delivered(self) -> tuple[Message, ...]:
        """Every message of the answer in delivery order: important ones first."""
        return self.important + self.messages

    @property
    def empty(self) -> bool:
        """Nothing to report: no message, no gap, no reset, no new ranking, no
        recall (a timed-out hold)."""
        return not (self.important or self.messages or self.gap or self.igap or self.reset
                    or self.personal or self.pgap or self.ranking is not None
                    or self.recalled or self.precalled)

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Answer:
        return cls(
            room=str(doc["room"]), epoch=str(doc["epoch"]), seq=int(doc["seq"]),
            iseq=int(doc["iseq"]),
            important=tuple(Message.from_doc(m) for m in doc["important"]),
            messages=tuple(Message.from_doc(m) for m in doc["messages"]),
            gap=int(doc["gap"]), igap=int(doc["igap"]), reset=bool(doc["reset"]),
            ctx=str(doc["ctx"]), online=int(doc["online"]),
            interval_ms=int(doc["interval_ms"]), likes=int(doc.get("likes", 0)),
            spread=None if doc.get("spread") is None else int(doc["spread"]),
            pseq=int(doc.get("pseq", 0)),
            personal=tuple(PersonalMessage.from_doc(m) for m in doc.get("personal", ())),
            pgap=int(doc.get("pgap", 0)),
            ranking=None if doc.get("ranking") is None else TopGivers.from_doc(doc["ranking"]),
            recalled=tuple(int(seq) for seq in doc.get("recalled", ())),
            slow=int(doc.get("slow", 0)),
            precalled=tuple(int(pseq) for pseq in doc.get("precalled", ())))


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a listener stands: pass it to :meth:`Client.listen` to resume."""

    epoch: str
    seq: int
    iseq: int
    ctx: str = ""
    pseq: int | None = None
    """The personal cursor (``None``: from where the room's personal sequence
    stands at the next poll)."""


@dataclass(frozen=True, slots=True)
class Sent:
    """A send's answer: the message's place in the room's log (a personal
    message's: in the room's personal sequence, ``seq`` 0); or, for a send
    held for review, its id in the room's review queue (``held``; ``seq``
    0, ``epoch`` ``""``)."""

    seq: int
    epoch: str
    pseq: int | None = None
    """A personal message's position (``None`` for a room message)."""
    private: bool | None = None
    """A personal message: whether only its addressee can read it (false on
    a server in open mode, where any client can); ``None`` for a room message."""
    held: str | None = None
    """A word filter or the send hook kept it back for a moderator (202): not
    stored yet, and nobody else sees it; show it as pending. Approved, it
    comes like any message (then with its sender's uid and a ``seq``);
    denied, never."""


@dataclass(frozen=True, slots=True)
class RoomStats:
    room: str
    online: int
    viewers: int
    """Distinct listeners of the current broadcast (never goes down)."""
    viewers_exact: bool
    """False once the viewers are estimated (a HyperLogLog)."""
    vip: bool
    seq: int
    """The room's head: the seq of its last message."""
    likes: int = 0
    """The room's likes in its current broadcast, read now: the store's total
    and the taps the node answering has not written yet (0 from an older
    server)."""


@dataclass(frozen=True, slots=True)
class Members:
    room: str
    online: int
    members: tuple[str, ...]
    """One page of the online uids, sorted."""


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    t: int
    """Start of the step, Unix seconds."""
    avg: float
    max: int


@dataclass(frozen=True, slots=True)
class OnlineSeries:
    room: str
    step: int
    """Seconds each point covers."""
    points: tuple[SeriesPoint, ...]


@dataclass(frozen=True, slots=True)
class Broadcast:
    """An ended broadcast of a room."""

    broadcast: int
    ended_at: int
    """Milliseconds since the Unix epoch."""
    viewers: int
    viewers_exact: bool


@dataclass(frozen=True, slots=True)
class SectMove:
    """A room changed sect."""

    at: int
    """Milliseconds since the Unix epoch."""
    to: str
    """``vip`` or ``normal``."""
    reason: str
    """``auto`` (the rule), ``pin`` or ``operator``."""


@dataclass(frozen=True, slots=True)
class RoomSect:
    """Which sect serves a room, and why (``GET /v1/admin/vip``)."""

    room: str
    vip: bool
    pinned: str | None
    """``vip`` or ``normal`` when an operator pinned it there; ``None``: the
    automatic rule decides."""
    since: int | None
    """When it entered its sect (ms since the Unix epoch; ``None``: never moved)."""
    reason: str | None
    """Why it is there (its last move's reason)."""
    candidate_since: int | None
    """Since when the rule has seen it across a threshold (``None``: not)."""
    moves: tuple[SectMove, ...]
    """Its last moves, oldest first."""

    @property
    def mode(self) -> str:
        """``pinned`` or ``auto``."""
        return "pinned" if self.pinned else "auto"

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> RoomSect:
        """From the API's document of a room's sect."""
        return cls(str(doc["room"]), bool(doc["vip"]), _text_or_none(doc["pinned"]),
                   _int_or_none(doc["since"]), _text_or_none(doc["reason"]),
                   _int_or_none(doc["candidate_since"]),
                   tuple(SectMove(int(m["at"]), str(m["to"]), str(m["reason"]))
                         for m in doc["moves"]))


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True, slots=True)
class VipChange:
    room: str
    vip: bool
    changed: bool
    """False when the room was in that sect already."""
    sect: RoomSect | None = None
    """The room's sect after the change."""


@dataclass(frozen=True, slots=True)
class BroadcastStarted:
    """A room an operator opened (``POST /v1/admin/rooms/{room}/start``)."""

    room: str
    epoch: str
    broadcast: int
    """The room's current broadcast."""
    created: bool
    """False when the room was open already (nothing changed but its lifetime)."""


@dataclass(frozen=True, slots=True)
class BroadcastEnded:
    room: str
    epoch: str
    """The new epoch: the room's log starts empty in it (seqs go on)."""
    broadcast: int
    """The number of the broadcast that started."""


@dataclass(frozen=True, slots=True)
class LiveRoom:
    """One of the biggest rooms now (``GET /v1/admin/rooms``)."""

    room: str
    online: int
    interval_ms: int
    """The adaptive hold's interval for this many listeners (0: plain long polls)."""
    vip: bool
    messages_per_minute: float | None
    """None when the node listing the room did not hold its messages."""


@dataclass(frozen=True, slots=True)
class LiveNode:
    """A node over the store, as it last announced itself (``GET /v1/admin/nodes``)."""

    node: str
    announced_at: int
    """Milliseconds since the Unix epoch."""
    expires_at: int
    rooms_cached: int
    held_polls: int
    members: int
    rooms_merged: int
    rooms_listed: int


@dataclass(frozen=True, slots=True)
class Retry:
    """Why the client waits before trying again (see ``on_retry``)."""

    delay: float
    """Seconds it waits."""
    status: int | None
    """The HTTP status (429, 503), or None for a network error."""
    reason: str


@dataclass(frozen=True, slots=True)
class Given:
    """A gift's place: the giver's rank and score in the broadcast, and the room's total."""

    room: str
    uid: str
    rank: int
    score: int
    total: int


@dataclass(frozen=True, slots=True)
class Ranking:
    """A room's top givers in its current broadcast, best first."""

    room: str
    top: tuple[tuple[str, int], ...]
    """``(uid, score)``."""
    total: int
    """The sum of the broadcast's gifts."""
    count: int
    """Gifts given in the broadcast."""


@dataclass(frozen=True, slots=True)
class Recalled:
    """A recall's answer: the message's body is gone from the store, and
    every listener is told (its next answer lists ``seq`` in ``recalled``)."""

    room: str
    seq: int
    uid: str
    """Who had sent it."""
    notice: int
    """The seq of the important notice that tells the listeners."""


@dataclass(frozen=True, slots=True)
class RecalledPersonal:
    """A personal message's recall: its body is gone from the store, and its
    addressee is told (its next answer lists ``pseq`` in ``precalled``)."""

    room: str
    pseq: int
    uid: str
    """Who had sent it."""
    to: str
    """Whom it was for."""
    notice: int
    """The pseq of the notice that tells the addressee."""


@dataclass(frozen=True, slots=True)
class Sanction:
    """A mute or a ban of one uid in a room."""

    room: str
    uid: str
    until_ms: int
    """When it ends (Unix ms); 0: until lifted."""
    seconds_left: int | None
    """Seconds it has left when the server answered; ``None``: until lifted."""
    reason: str
    by: str
    """Who gave it: ``admin``, ``publisher`` or ``uid:<uid>``."""
    at_ms: int
    """When it was given (Unix ms)."""

    @classmethod
    def from_doc(cls, room: str, doc: Mapping[str, Any]) -> Sanction:
        return cls(room, str(doc["uid"]), int(doc["until_ms"]),
                   _int_or_none(doc["seconds_left"]), str(doc["reason"]), str(doc["by"]),
                   int(doc["at_ms"]))


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One moderation action in a room's audit."""

    at_ms: int
    """When (Unix ms)."""
    by: str
    """Who: ``admin``, ``publisher`` or ``uid:<uid>`` (a sender's own recall)."""
    action: str
    """``mute``, ``unmute``, ``ban``, ``unban``, ``slow``, ``recall``, or
    ``approve`` and ``deny`` (a held message's review)."""
    target: str
    """The uid; for a recall the message, ``room:<seq>``; for an approval or
    a denial the held message, ``<uid>:<id>``; ``""`` for slow."""
    seconds: int
    """A mute's or ban's duration (0: a ban until lifted), slow mode's
    seconds (0: lifted); 0 for the others."""
    reason: str

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> AuditEntry:
        return cls(int(doc["at_ms"]), str(doc["by"]), str(doc["action"]), str(doc["target"]),
                   int(doc["seconds"]), str(doc["reason"]))


@dataclass(frozen=True, slots=True)
class RoomModeration:
    """A room's moderation (``GET /v1/admin/rooms/{room}/moderation``)."""

    room: str
    slow: int
    """Slow mode's seconds (0: off)."""
    muted: int
    """How many mutes are in force."""
    banned: int
    """How many bans are in force."""
    audit: tuple[AuditEntry, ...]
    """The current broadcast's actions, newest first."""


@dataclass(frozen=True, slots=True)
class HeldMessage:
    """A message waiting in a room's review queue."""

    id: str
    """Its id in the room's queue."""
    uid: str
    """Its sender."""
    kind: str
    """``normal``, ``important`` or ``personal``."""
    body: Any
    at_ms: int
    """When its send was accepted (Unix ms)."""
    why: str
    """Why it was held (a word filter's or the send hook's words)."""
    to: str | None = None
    """A personal message's addressee."""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> HeldMessage:
        return cls(str(doc["id"]), str(doc["uid"]), str(doc["kind"]), doc["body"],
                   int(doc["at_ms"]), str(doc["why"]), _text_or_none(doc.get("to")))


@dataclass(frozen=True, slots=True)
class ReviewQueue:
    """A room's held messages (``GET /v1/admin/rooms/{room}/review``)."""

    room: str
    count: int
    """How many wait in all."""
    held: tuple[HeldMessage, ...]
    """The oldest first, as many as asked for."""


@dataclass(frozen=True, slots=True)
class FailedEvent:
    """A webhook event given up after ``--webhook-retry-for``."""

    id: str
    type: str
    room: str
    failed_ms: int
    """When it was given up (Unix ms)."""
    why: str
    """The last attempt's failure: a status, ``timeout`` or ``error``."""
    event: Mapping[str, Any]
    """The event as it is posted."""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> FailedEvent:
        return cls(str(doc["id"]), str(doc.get("type") or ""), str(doc.get("room") or ""),
                   int(doc["failed_ms"]), str(doc["why"]), dict(doc.get("event") or {}))


@dataclass(frozen=True, slots=True)
class FailedEvents:
    """The events given up (``GET /v1/admin/webhooks/failed``)."""

    count: int
    """How many are kept in all."""
    failed: tuple[FailedEvent, ...]
    """The oldest first, as many as asked for."""


@dataclass(frozen=True, slots=True)
class Approved:
    """An approval's answer: where the held message was stored, as its
    sender's."""

    room: str
    id: str
    uid: str
    """Its sender."""
    epoch: str
    seq: int
    """Its seq (a personal message's: its position in the room's personal
    sequence)."""
    kind: str
    """``normal``, ``important`` or ``personal``."""
    to: str | None = None
    """A personal message's addressee."""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Approved:
        """From the server's answer: ``seq``, ``iseq`` (important) or
        ``pseq`` (personal)."""
        kind = "personal" if "pseq" in doc else "important" if "iseq" in doc else "normal"
        seq = doc.get("pseq", doc.get("iseq", doc.get("seq")))
        return cls(str(doc["room"]), str(doc["id"]), str(doc["uid"]), str(doc["epoch"]),
                   int(seq), kind, _text_or_none(doc.get("to")))


@dataclass(frozen=True, slots=True)
class Denied:
    """A denial's answer: the held message is dropped."""

    room: str
    id: str
    uid: str
    """Its sender."""


@dataclass(frozen=True, slots=True)
class WordList:
    """One list of the server's word filter."""

    name: str
    action: str
    """``block``, ``hold`` or ``mask``."""
    rooms: tuple[str, ...]
    """The rooms it applies to; empty: every room."""
    words: tuple[str, ...]
    version: int
    """The filters' version at its last put."""
    at_ms: int
    """When it was put (Unix ms)."""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> WordList:
        return cls(str(doc["name"]), str(doc["action"]), tuple(str(r) for r in doc["rooms"]),
                   tuple(str(w) for w in doc["words"]), int(doc["version"]), int(doc["at_ms"]))
