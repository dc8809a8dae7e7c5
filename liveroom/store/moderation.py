"""Rooms' moderation in the store (:class:`ModerationStore`): mutes, bans and
slow mode, each room's audit of them, and the system-wide journal of changes
that lets every node keep a copy.

One of the store's interfaces (:mod:`.base`): every engine implements it, and
every method may raise :class:`~liveroom.errors.StoreUnavailable` and nothing
else from the driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..model import MAX_INT, is_digits, is_name, is_room

MODERATION_ACTIONS = ("mute", "unmute", "ban", "unban", "slow", "recall", "approve", "deny")
"""What :meth:`ModerationStore.act` does (``AuditEntry.action``)."""
SANCTION_SECONDS_MAX = 30 * 86_400
"""The longest mute or ban (and slow mode's longest gap), in seconds: 30 days."""
REASON_MAX = 200
"""The longest reason, in characters."""
AUDIT_KEPT = 1_000
"""Audit entries a room keeps per broadcast (the newest), and
:meth:`ModerationStore.audit`'s largest ``limit``."""
SANCTIONS_MAX = 10_000
"""Mutes a room holds at most, and bans apart (expired ones do not count):
:meth:`ModerationStore.act` refuses one more (:class:`SanctionsFull`)."""
JOURNAL_PRUNED = 100
"""Rooms whose moderation ended one :meth:`ModerationStore.act` takes out of the
journal, at most (the oldest ends first): an act's cost stays bounded."""

SANCTIONED_BY_ROLE = ("admin", "publisher")
"""Who gives a sanction (``Sanction.by``), besides ``"uid:<sender>"``."""


@dataclass(frozen=True, slots=True)
class Sanction:
    """A mute or a ban of one uid in one room."""

    uid: str
    until_ms: int
    """When it ends (the caller's clock, Unix ms); 0: until lifted."""
    reason: str
    by: str
    """Who gave it: ``"admin"``, ``"publisher"`` or ``"uid:<sender>"``."""
    at_ms: int
    """When it was given (its audit entry's ``at_ms``)."""


@dataclass(frozen=True, slots=True)
class RoomModeration:
    """A room's moderation now, as :meth:`ModerationStore.rooms` reads it."""

    muted: tuple[Sanction, ...]
    """Sorted by uid; expired ones (``until_ms`` not 0 and at most the
    reader's ``now_ms``) left out."""
    banned: tuple[Sanction, ...]
    """The same, for bans."""
    slow: int
    """Seconds between two normal messages of one uid; 0: off."""
    version: int
    """The system's moderation version at the room's last change (0: never,
    or not yet known: see :meth:`ModerationStore.act` on a cluster)."""


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One moderation action, as given to :meth:`ModerationStore.act` and as the
    room's audit keeps it."""

    at_ms: int
    """When it was taken (the caller's clock, Unix ms)."""
    by: str
    """Who: ``"admin"``, ``"publisher"`` or ``"uid:<sender>"``."""
    action: str
    """One of :data:`MODERATION_ACTIONS`."""
    target: str
    """The uid; for ``"recall"`` the message's ``"<lane>:<seq>"``; for
    ``"approve"`` and ``"deny"`` the held message's ``"<uid>:<id>"`` (its
    sender, its id in the room's review queue); ``""`` for ``"slow"``."""
    seconds: int
    """The duration given: a mute's or ban's (0: a ban until lifted), slow
    mode's gap (0: lifted); 0 for ``unmute``, ``unban``, ``recall``,
    ``approve`` and ``deny``."""
    reason: str


class SanctionsFull(ValueError):
    """The room holds :data:`SANCTIONS_MAX` mutes (or bans) in force: one
    more uid was refused and nothing was stored. Not bad input but the
    room's state (a ``ValueError`` all the same): the caller answers 409,
    and lifting some makes room."""


def check_room(room: object) -> str:
    """Return ``room`` if it is a valid room name, else raise ``ValueError``."""
    if not isinstance(room, str) or not is_room(room):
        raise ValueError(f"room must match [A-Za-z0-9_.-]{{1,64}} (not only dots): {room!r}")
    return room


def _check_int(what: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{what} must be an int in {low}..{high}, not {value!r}")


_TARGETS = {"slow": "''", "recall": "'<lane>:<seq>'", "approve": "'<uid>:<id>'",
                    "deny": "'<uid>:<id>'"}
"""The actions whose target is no uid, and what it is."""


def check_act(room: str, entry: AuditEntry, now_ms: int) -> None:
    """Raise ``ValueError`` unless :meth:`ModerationStore.act` may apply ``entry``
    to ``room`` (its rules are the ones listed there)."""
    check_room(room)
    if not isinstance(entry, AuditEntry):
        raise ValueError(f"an action must be an AuditEntry, not {entry!r}")
    _check_int("now_ms", now_ms, 0, MAX_INT)
    _check_int("at_ms", entry.at_ms, 0, MAX_INT)
    action, target, seconds, by = entry.action, entry.target, entry.seconds, entry.by
    if action not in MODERATION_ACTIONS:
        raise ValueError(f"action must be one of {', '.join(MODERATION_ACTIONS)}, "
                         f"not {action!r}")
    if not isinstance(by, str) or not (
            by in SANCTIONED_BY_ROLE or (by.startswith("uid:") and is_name(by[4:]))):
        raise ValueError(f"by must be 'admin', 'publisher' or 'uid:<uid>', not {by!r}")
    if action == "slow":
        ok_target = target == ""
    elif action in _TARGETS:
        name, sep, number = target.partition(":") if isinstance(target, str) else ("", "", "")
        ok_target = bool(sep) and is_name(name) and is_digits(number)
    else:
        ok_target = isinstance(target, str) and is_name(target)
    if not ok_target:
        raise ValueError(f"target of {action} must be "
                         + _TARGETS.get(action, "a uid, [A-Za-z0-9_.-]{1,64}")
                         + f", not {target!r}")
    low = 1 if action == "mute" else 0
    high = SANCTION_SECONDS_MAX if action in ("mute", "ban", "slow") else 0
    _check_int(f"seconds of {action}", seconds, low, high)
    reason = entry.reason
    if not isinstance(reason, str) or len(reason) > REASON_MAX:
        raise ValueError(f"reason must be text of at most {REASON_MAX} characters")
    try:
        reason.encode()
    except UnicodeEncodeError:
        raise ValueError("reason must be text UTF-8 can hold (no lone surrogate)") from None


def check_audit_limit(limit: int) -> None:
    """Raise ``ValueError`` unless ``limit`` is an int in 1..:data:`AUDIT_KEPT`."""
    _check_int("limit", limit, 1, AUDIT_KEPT)


def check_since(since: int) -> None:
    """Raise ``ValueError`` unless ``since`` is a version (an int of at least 0)."""
    _check_int("since", since, 0, 2**63 - 1)


def sanction_until(entry: AuditEntry, now_ms: int) -> int:
    """When a mute or ban given at ``now_ms`` ends: ``seconds`` later, or 0
    (until lifted) for a ban of 0 seconds."""
    return now_ms + entry.seconds * 1000 if entry.seconds else 0


def in_force(sanction: Sanction, now_ms: int) -> bool:
    """Whether ``sanction`` still holds at ``now_ms``: until lifted, or ending
    after it."""
    return sanction.until_ms == 0 or sanction.until_ms > now_ms


def moderation_lives_ms(ttl_ms: int, last_until_ms: int | None, now_ms: int) -> int | None:
    """How long a room's moderation is kept after a write at ``now_ms``:
    ``ttl_ms`` (``LogPolicy.history_ttl_ms``), or until its last sanction in
    force ends (``last_until_ms``, 0: a ban until lifted: ``None``, kept
    until lifted) when that is later. The rule of ``moderation_act.lua``."""
    if last_until_ms == 0:
        return None
    if last_until_ms is None:
        return ttl_ms
    return max(ttl_ms, last_until_ms - now_ms)


class ModerationStore(Protocol):
    """Each room's mutes, bans and slow mode, its audit, and the system-wide
    journal of changes that lets every node keep a copy of them.

    - **Atomic per room.** :meth:`act` applies one action and records it in
      the room's audit in one atomic step (on one Redis: with the journal
      too; on a Redis Cluster, see below).
    - **The journal.** Every act bumps the system's moderation *version* (one
      counter) and notes the room as changed at it. Nodes call
      :meth:`changed` every ~250 ms with the version they last saw and read
      the rooms it names with :meth:`rooms`: a change is noted only after
      the room's state holds it, so a node never misses one. A room leaves
      the journal when its moderation is no longer kept (see expiry), at the
      first act after that (any room's, at most :data:`JOURNAL_PRUNED` rooms
      each): until then :meth:`changed` may still name it, and :meth:`rooms`
      finds nothing.
    - **Expiry.** Sanctions end by the caller's clock (``now_ms``, as the
      rest of the store): an ended one is absent from :meth:`rooms` at once
      and pruned from the store by the room's next act. A room's moderation
      (sanctions, slow mode, audit) is kept ``LogPolicy.history_ttl_ms``
      after its last act, or until its last sanction ends when that is
      later, or for as long as it holds a ban until lifted (the store's own
      expiry, like every other key's): slow mode set and never touched
      again ends with it.
    - **Broadcasts.** ``Operators.end_broadcast`` archives the room's audit
      with the ended broadcast (``PastBroadcast.moderation``) and starts an
      empty one; mutes, bans and slow mode are the room's and stay.
    - **Limits.** At most :data:`SANCTIONS_MAX` mutes in force per room and as
      many bans (:class:`SanctionsFull` beyond); the newest
      :data:`AUDIT_KEPT` audit entries per broadcast. Input that breaks a
      rule raises ``ValueError`` and stores nothing.
    - **Redis Cluster.** A room's state is in its slot and the journal in the
      global one, so :meth:`act` is three steps: the room's script, then the
      journal's (the version and the note, together), then the version
      stamped into the room's state. A step that fails raises
      :class:`~liveroom.errors.StoreUnavailable` with the steps before it
      done: the change applied but not yet noted (nodes learn it at the
      room's next act), or noted with the room's ``version`` behind.
      Retrying the act is harmless: the same state again (a mute or ban
      counted from the retry's ``now_ms``), a new version, and no second
      audit entry (an entry equal to the audit's newest is not recorded
      again, on every engine).
    """

    async def act(self, room: str, entry: AuditEntry, now_ms: int, *,
                  event: bytes | None = None) -> int:
        """Apply one action to ``room`` and record ``entry`` in its audit, at
        ``now_ms`` (the caller's clock); return the new moderation version.

        - ``mute`` and ``ban`` set ``entry.target``'s mute (ban), replacing
          one in force: ``Sanction(until_ms=now_ms + seconds * 1000, reason,
          by, at_ms=entry.at_ms)``; a ban of 0 seconds lasts until lifted, a
          mute needs at least 1 second. A mute and a ban of one uid are
          apart: lifting one leaves the other.
        - ``unmute`` and ``unban`` lift it (nothing to lift is no error; the
          act is recorded all the same).
        - ``slow`` sets the room's slow mode to ``seconds`` (0 lifts it).
        - ``recall`` changes nothing but the audit (``target`` names the
          message, ``"<lane>:<seq>"``: the caller removes it).
        - ``approve`` and ``deny`` change nothing but the audit either
          (``target`` names a held message, ``"<uid>:<id>"``: the caller
          decides it in the room's review queue).

        ``event``: the webhook event of the action (``Events.ahead``'s JSON;
        ``None``: none), kept in the room's list of events (``Outbox``) in
        the same atomic step when the act took effect: a mute or ban not
        a retry of the newest audit entry, an unmute or unban that lifted
        a sanction in force.

        Raises ``ValueError``, storing nothing, for: a room or uid that is not
        a name (``[A-Za-z0-9_.-]{1,64}``, a room not only dots), an action not
        in :data:`MODERATION_ACTIONS`, ``by`` not ``"admin"``,
        ``"publisher"`` or ``"uid:<uid>"``, a recall's target not
        ``"<lane>:<seq>"`` (a name, digits), an approval's or denial's not
        ``"<uid>:<id>"``, slow's not ``""``, ``seconds`` out of
        0..:data:`SANCTION_SECONDS_MAX` (1.. for a mute, 0 for ``unmute``,
        ``unban``, ``recall``, ``approve`` and ``deny``), a reason over
        :data:`REASON_MAX` characters, ``at_ms`` or ``now_ms`` not an int
        in 0..2**53-1. Raises :class:`SanctionsFull` (a ``ValueError``,
        storing nothing) for a new uid's mute (ban) when the room holds
        :data:`SANCTIONS_MAX` in force."""

    async def rooms(self, rooms: Sequence[str], now_ms: int) -> dict[str, RoomModeration]:
        """The moderation of each room at ``now_ms``: sanctions in force and
        slow mode; a room with none is absent from the answer. One round trip
        (one per cluster node on a cluster, sent together); read-only.
        Raises ``ValueError`` for a room that is not a name."""

    async def changed(self, since: int) -> tuple[int, list[str]]:
        """The current version and the rooms changed after version ``since``,
        oldest change first (each once, at its last change); ``since`` 0
        lists every room in the journal: each whose moderation is kept. A
        ``since`` above the current version (the store lost its journal:
        a flushed or replaced Redis) answers as 0 does. One round trip,
        atomic; read-only."""

    async def audit(self, room: str, limit: int) -> list[AuditEntry]:
        """The room's audit in its current broadcast, newest first, at most
        ``limit`` (1..:data:`AUDIT_KEPT`; ``ValueError`` otherwise) entries.
        One round trip; read-only."""
