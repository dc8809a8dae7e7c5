"""Which sect serves a room: its record, the automatic rule, and pins.

A room is in the **normal** sect unless its record says vip. The record is
kept in the store (``Operators.vip_records``) and changed only by a swap that
names the record it replaces (``Operators.vip_swap``): every node may apply
the rule, and when two nodes decide at once one swap wins, the other finds
the record changed and decides again from it on its next pass. Nothing here
does I/O: these are the pure steps the nodes (:mod:`liveroom.whitelist`) and
the operators' calls apply.

**The rule** (:func:`observe`), with hysteresis: a normal room whose merged
online count stays at or above ``promote`` for ``promote_after`` seconds moves
to the vip sect; a vip room whose count stays below ``demote`` for
``demote_after`` seconds moves back. "Stays" is kept in the record as
``candidate_ms``, the first observation of the current crossing; an
observation on the other side of the threshold clears it. A room the rule
moved is not moved by it again for ``settle`` seconds: at most one automatic
move per room per ``settle``, however its count swings (a crossing that lasted
meanwhile moves it as soon as the period is over). An operator's move (a pin,
an unpin, a ``vip remove``) gives the room back to the rule at once.

**Pins** (:func:`pin`) beat the rule: a room pinned ``vip`` or ``normal``
stays there until unpinned; unpinning leaves it where it is and gives it back
to the rule.

A record keeps its last :data:`MOVES_KEPT` moves (when, which way, why), for
the dashboard's marks and ``vip list``. A record with nothing left to say (a
normal room, no pin, no candidate, no move within :data:`MOVES_FOR_MS`) is
dropped (:func:`forgotten`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import orjson

Sect = Literal["vip", "normal"]
Reason = Literal["auto", "pin", "operator"]
"""Why a room moved: the rule, a pin, or an operator's ``vip remove``."""

MOVES_KEPT = 20
"""Moves a record remembers."""
MOVES_FOR_MS = 86_400_000
"""A normal room's record with no move for this long, and nothing else, is dropped."""


@dataclass(frozen=True, slots=True)
class Move:
    """A room changed sect at ``at_ms`` (the deciding node's clock)."""

    at_ms: int
    vip: bool
    """True: into the vip sect."""
    reason: Reason


@dataclass(frozen=True, slots=True)
class VipRule:
    """The automatic rule's thresholds (room online counts, seconds)."""

    promote: int = 50_000
    promote_after: float = 60.0
    demote: int = 20_000
    demote_after: float = 600.0
    settle: float = 600.0
    """Seconds after a move of its own during which the rule moves the room no more."""

    def __post_init__(self) -> None:
        if self.demote > self.promote:
            raise ValueError("the demote threshold must not exceed the promote threshold")


@dataclass(frozen=True, slots=True)
class VipRecord:
    """A room's sect as the store keeps it."""

    vip: bool = False
    pinned: Sect | None = None
    since_ms: int = 0
    """When the room entered its current sect (0: never moved)."""
    candidate_ms: int | None = None
    """First observation of the current crossing of a threshold (the rule)."""
    moves: tuple[Move, ...] = ()

    @property
    def reason(self) -> Reason | None:
        """Why the room is in its sect (``None``: it never moved)."""
        return self.moves[-1].reason if self.moves else None

    def moved(self, vip: bool, now_ms: int, reason: Reason) -> VipRecord:
        """This record after a move (none when already in that sect)."""
        if vip == self.vip:
            return self
        return replace(self, vip=vip, since_ms=now_ms, candidate_ms=None,
                       moves=(*self.moves, Move(now_ms, vip, reason))[-MOVES_KEPT:])


NONE = VipRecord()
"""The record of a room that has none: normal, unpinned, never moved."""
LEGACY = VipRecord(vip=True, pinned="vip")
"""A room whitelisted before records existed: pinned vip by an operator."""


def observe(record: VipRecord, online: int, now_ms: int, rule: VipRule) -> VipRecord:
    """The record after the rule saw ``online`` members at ``now_ms``."""
    if record.pinned is not None:
        return record
    if record.vip:
        crossing, after = online < rule.demote, rule.demote_after
    else:
        crossing, after = online >= rule.promote, rule.promote_after
    if not crossing:
        return replace(record, candidate_ms=None) if record.candidate_ms is not None \
            else record
    if record.candidate_ms is None or record.candidate_ms > now_ms:
        return replace(record, candidate_ms=now_ms)
    if now_ms - record.candidate_ms >= after * 1000 and settled(record, now_ms, rule):
        return record.moved(not record.vip, now_ms, "auto")
    return record


def settled(record: VipRecord, now_ms: int, rule: VipRule) -> bool:
    """Whether the rule may move the room: its last move was not the rule's,
    or was at least ``rule.settle`` seconds ago."""
    last = record.moves[-1] if record.moves else None
    return last is None or last.reason != "auto" or now_ms - last.at_ms >= rule.settle * 1000


def pin(record: VipRecord, sect: Sect | None, now_ms: int) -> VipRecord:
    """The record pinned to ``sect`` (moving it there), or unpinned (``None``:
    it stays where it is, and the rule decides again from now on)."""
    if sect is None:
        return replace(record, pinned=None, candidate_ms=None)
    return replace(record.moved(sect == "vip", now_ms, "pin"), pinned=sect,
                   candidate_ms=None)


def released(record: VipRecord, now_ms: int) -> VipRecord:
    """An operator's ``vip remove``: unpinned and back to the normal sect now."""
    return replace(record.moved(False, now_ms, "operator"), pinned=None, candidate_ms=None)


def forgotten(record: VipRecord, now_ms: int) -> bool:
    """Whether the record says nothing worth keeping any more."""
    return (not record.vip and record.pinned is None and record.candidate_ms is None
            and (not record.moves or now_ms - record.moves[-1].at_ms > MOVES_FOR_MS))


def document(room: str, record: VipRecord) -> dict[str, object]:
    """A room's sect as the API shows it (``GET /v1/admin/vip``)."""
    return {"room": room, "vip": record.vip, "pinned": record.pinned,
            "mode": "pinned" if record.pinned else "auto",
            "since": record.since_ms or None, "reason": record.reason,
            "candidate_since": record.candidate_ms,
            "moves": [{"at": m.at_ms, "to": "vip" if m.vip else "normal", "reason": m.reason}
                      for m in record.moves]}


# -- as the store keeps it ---------------------------------------------------------------

def encode(record: VipRecord) -> bytes:
    """The record's bytes (compact JSON); ``b""`` for :data:`NONE`: no record."""
    if record == NONE:
        return b""
    return orjson.dumps({
        "v": int(record.vip), "p": record.pinned or "", "s": record.since_ms,
        "c": record.candidate_ms,
        "m": [[m.at_ms, int(m.vip), m.reason] for m in record.moves]})


def decode(data: bytes) -> VipRecord:
    """The record ``data`` holds (``b""``: :data:`LEGACY`, a whitelisted room
    with no record). Raises ``ValueError`` on bytes that are not a record."""
    if not data:
        return LEGACY
    try:
        doc = orjson.loads(data)
        pinned = doc["p"] or None
        if pinned not in (None, "vip", "normal"):
            raise ValueError(f"unknown pin {pinned!r}")
        moves = tuple(Move(int(at), bool(vip), _reason(reason))
                      for at, vip, reason in doc["m"])
        candidate = doc["c"]
        return VipRecord(bool(doc["v"]), pinned, int(doc["s"]),
                         None if candidate is None else int(candidate), moves)
    except (KeyError, TypeError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"not a vip record: {data[:80]!r}") from exc


_REASONS: dict[str, Reason] = {"auto": "auto", "pin": "pin", "operator": "operator"}


def _reason(text: str) -> Reason:
    try:
        return _REASONS[text]
    except KeyError:
        raise ValueError(f"unknown reason {text!r}") from None
