"""The listener's context (``ctx``): what the server tells itself across polls.

A ``ctx`` is ``base64url(msgpack payload) "." base64url(HMAC-SHA256[:16])``
under a secret every node over one store shares. It binds the room, uid, epoch
and the answer's cursors, and carries the important counts at those cursors
(so ``gap``/``igap`` stay exact for a listener older than what a node keeps)
and the time of the last non-empty answer (for the adaptive hold). A context
that fails its signature or does not match the request is ignored.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

import msgpack

_VERSION = 1


@dataclass(frozen=True, slots=True)
class Context:
    seq_ic: int
    iseq_ic: int
    last_ms: int
    """When this listener last got a non-empty answer (ms since the epoch)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class ContextSigner:
    def __init__(self, secret: str) -> None:
        self._key = hashlib.sha256(secret.encode()).digest()

    def _mac(self, payload: bytes) -> bytes:
        return hmac.digest(self._key, payload, "sha256")[:16]

    def sign(self, room: str, uid: str, epoch: str, seq: int, iseq: int,
             ctx: Context) -> str:
        payload = msgpack.packb((_VERSION, room, uid, epoch, seq, iseq,
                                 ctx.seq_ic, ctx.iseq_ic, ctx.last_ms))
        return f"{_b64(payload)}.{_b64(self._mac(payload))}"

    def verify(self, token: str | None, room: str, uid: str, epoch: str, seq: int,
               iseq: int) -> Context | None:
        """The context in ``token`` if it is genuine and for exactly this request."""
        if not token:
            return None
        try:
            body, _, mac = token.partition(".")
            payload = _unb64(body)
            if not hmac.compare_digest(self._mac(payload), _unb64(mac)):
                return None
            fields = msgpack.unpackb(payload)
            version, c_room, c_uid, c_epoch, c_seq, c_iseq, seq_ic, iseq_ic, last_ms = fields
        except Exception:  # anything malformed is simply not a context of ours
            return None
        if version != _VERSION or (c_room, c_uid, c_epoch, c_seq, c_iseq) != (
                room, uid, epoch, seq, iseq):
            return None
        return Context(int(seq_ic), int(iseq_ic), int(last_ms))
