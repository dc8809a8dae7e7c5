"""The listener's context (``ctx``): what the server tells itself across polls.

A ``ctx`` is 84 characters of base64url: a version byte, three 64-bit
integers (the important counts at the answer's cursors, so ``gap``/``igap``
stay exact for a listener older than what a node keeps; the time of the
last non-empty answer, for the adaptive hold), two 32-bit ones (the
listener's ordinal among its personal messages at its ``pseq`` plus one, 0
when unknown, so ``pgap`` is exact, see :mod:`liveroom.personal`; and the
low 32 bits of that message's ``ts``, 0 when unknown), one more 64-bit
integer (the ``ts`` of the message at the answer's ``seq``, 0 when unknown),
so that a node whose copy of the room holds another message at either
place, the store having lost the one the listener got, resets it), a
48-bit mark of the figures the answer showed beside its messages (its
likes, slow mode and top givers, :func:`news_mark`; 0 when unknown), so a
poll that missed a change between its answer and its next poll is told it
(:mod:`.news`), and a 16-byte MAC: keyed
BLAKE2s over those bytes and what the context is bound to (room, uid, epoch,
and the answer's cursors), under a secret every node over one store shares.
The bound values are in the request already, so they are not repeated in the
context. A context that fails its MAC or does not match the request is
ignored. The keyed state is made once and copied for each MAC: signing or
checking a context costs well under a microsecond of hashing (an HMAC through
OpenSSL costs three).
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import struct
from typing import Final, NamedTuple

from liveroom.personal import PTS_MASK

_VERSION: Final = 6
_FIELDS: Final = struct.Struct(">BQQQIIQHI")
"""The last two (16 and 32 bits) are the news mark's 48: a context of 63
bytes is a whole number of base64 characters, none with bits a forger
could flip unseen."""
# Bound once: compiled, a module's attribute is looked up at every call.
_PACK: Final = _FIELDS.pack
_B2A: Final = binascii.b2a_base64
_A2B: Final = binascii.a2b_base64
_MAC: Final = 16
_PN_MAX: Final = 0xFFFFFFFF
"""Ordinals from this on are signed as unknown (one plus the ordinal is kept in 32 bits)."""
_SIZE: Final = _FIELDS.size + _MAC
_LENGTH: Final = (_SIZE * 4 + 2) // 3
"""Characters of a context (base64url, no padding)."""
_TO_URL: Final = bytes.maketrans(b"+/", b"-_")
_FROM_URL: Final = bytes.maketrans(b"-_", b"+/")
_PAD: Final = "=" * (-_LENGTH % 4)
_ANCHOR_AT: Final = struct.calcsize(">BQQQII")
"""The anchor's first byte: its 8 bytes follow the version, three counts
and the personal ordinal and ``ts`` (33, a multiple of 3, so a base64 group
begins there)."""
_ANCHOR_CHARS: Final = slice(_ANCHOR_AT // 3 * 4, _ANCHOR_AT // 3 * 4 + 12)
"""The characters of the base64 groups holding the anchor (and the news mark's first byte)."""


class Context(NamedTuple):
    seq_ic: int
    iseq_ic: int
    last_ms: int
    """When this listener last got a non-empty answer (ms since the epoch)."""
    pn: int | None = None
    """Its personal messages in the room up to its ``pseq`` (``None``: unknown)."""
    anchor: int = 0
    """The ``ts`` of the message at its ``seq`` (0: unknown)."""
    news: int = 0
    """The :func:`news_mark` of the figures its answer showed (0: unknown)."""
    pts: int = 0
    """The low 32 bits (:data:`~liveroom.personal.PTS_MASK`) of the ``ts``
    of its personal message of ordinal ``pn`` (0: unknown)."""


_MARKS: Final = 1 << 48


def news_mark(likes: int, slow: int, ranking: int = 0) -> int:
    """A 48-bit mark of what a listener has after an answer, beside its
    messages: its likes total, its slow mode and the version of its top
    givers (``ranking``, a CRC-32; the listener has the room's current one,
    shown or echoed). Never 0 (the mark of an unknown). Two different
    figures may share a mark (about one in 2**48; never likes a thousand
    apart with the same ranking): such a change then reaches the listener
    with its next answer, as it did before marks."""
    return 1 + (likes * 0x9E3779B97F4A7C15 + ranking * 0xC2B2AE3D27D4EB4F + slow) \
        % (_MARKS - 1)


class NewsMarks:
    """:func:`news_mark`, remembering the last figures it marked: the
    listeners a message wakes in one room are answered one after another
    with the same figures, so the mark (big-integer arithmetic, about a
    third of a microsecond compiled) is made once per message, not once per
    listener. Another room's figures in between only cost the mark again."""

    __slots__ = ("_likes", "_mark", "_ranking", "_slow")

    def __init__(self) -> None:
        self._likes = -1  # no figures yet: a count is never negative
        self._slow = 0
        self._ranking = 0
        self._mark = 0

    def of(self, likes: int, slow: int, ranking: int = 0) -> int:
        """``news_mark(likes, slow, ranking)``."""
        if likes == self._likes and slow == self._slow and ranking == self._ranking:
            return self._mark
        mark = news_mark(likes, slow, ranking)
        self._likes, self._slow, self._ranking, self._mark = likes, slow, ranking, mark
        return mark


class ContextSigner:
    def __init__(self, secret: str) -> None:
        self._keyed = hashlib.blake2s(key=hashlib.sha256(secret.encode()).digest(),
                                      digest_size=_MAC)

    def _mac(self, fields: bytes, room: str, uid: str, epoch: str, seq: int,
             iseq: int) -> bytes:
        mac = self._keyed.copy()
        mac.update(fields)  # two updates hash what one of the two joined would
        mac.update(f"{room}\x00{uid}\x00{epoch}\x00{seq}\x00{iseq}".encode())
        return mac.digest()

    def sign(self, room: str, uid: str, epoch: str, seq: int, iseq: int, seq_ic: int,
             iseq_ic: int, last_ms: int, pn: int | None = None, anchor: int = 0,
             news: int = 0, pts: int = 0) -> str:
        """The context of an answer at ``(seq, iseq)`` of ``epoch`` (see :class:`Context`)."""
        return self.sign_ascii(room, uid, epoch, seq, iseq, seq_ic, iseq_ic, last_ms, pn,
                               anchor, news, pts).decode()

    def sign_ascii(self, room: str, uid: str, epoch: str, seq: int, iseq: int, seq_ic: int,
                   iseq_ic: int, last_ms: int, pn: int | None = None, anchor: int = 0,
                   news: int = 0, pts: int = 0) -> bytes:
        """:meth:`sign`'s context as ASCII bytes, as a JSON answer splices it in."""
        # An ordinal past 32 bits (never reached: a uid's personal messages
        # in one room) is unknown rather than an error.
        fields = _PACK(_VERSION, seq_ic, iseq_ic, last_ms,
                       pn + 1 if pn is not None and pn < _PN_MAX else 0, pts & PTS_MASK,
                       anchor, news >> 32, news & 0xFFFFFFFF)
        raw = fields + self._mac(fields, room, uid, epoch, seq, iseq)
        return _B2A(raw, newline=False)[:_LENGTH].translate(_TO_URL)

    @staticmethod
    def claimed_anchor(token: str | None) -> int:
        """The ``anchor`` a context says it holds, not verified (0: none, or
        not a context): a few bytes decoded, no MAC. Where only a claim that
        differs from what the node holds matters, the claim is compared
        first and only a context that claims another message is verified."""
        if not token or len(token) != _LENGTH:
            return 0
        chars = token[_ANCHOR_CHARS]
        if "-" in chars or "_" in chars:
            chars = chars.replace("-", "+").replace("_", "/")
        try:
            raw = _A2B(chars, strict_mode=True)
        except (binascii.Error, ValueError):  # not base64, or not ASCII
            return 0
        return int.from_bytes(raw[:8], "big")

    def verify(self, token: str | None, room: str, uid: str, epoch: str, seq: int,
               iseq: int) -> Context | None:
        """The context in ``token`` if it is genuine and for exactly this request."""
        if not token or len(token) != _LENGTH:
            return None
        try:
            raw = binascii.a2b_base64((token + _PAD).encode().translate(_FROM_URL),
                                      strict_mode=True)
        except (binascii.Error, UnicodeEncodeError):
            return None
        fields = raw[:_FIELDS.size]
        if raw[0] != _VERSION or not hmac.compare_digest(
                raw[_FIELDS.size:], self._mac(fields, room, uid, epoch, seq, iseq)):
            return None
        _, seq_ic, iseq_ic, last_ms, pn, pts, anchor, news_high, news_low = \
            _FIELDS.unpack(fields)
        return Context(seq_ic, iseq_ic, last_ms, pn - 1 if pn else None, anchor,
                       news_high << 32 | news_low, pts)
