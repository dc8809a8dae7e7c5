"""The signature of what a node posts to the business backend (the send
hook's calls; the webhooks' later), and its check.

A request carries ``Liveroom-Signature: t=<unix seconds>,v1=<hex>``, the hex
HMAC-SHA256, keyed with the shared secret, of ``"<t>.<raw body>"`` (the
body's bytes as sent, before any parsing). The backend recomputes it over
the bytes it received and compares in constant time (:func:`verify`); ``t``
bounds a replay: a signature older than the tolerance is refused.

Limits: the signature covers the body and the time, not the URL or the
method (one secret per backend endpoint if that matters); a header may carry
several ``v1`` values (one per secret, while a secret is rotated) and
:func:`verify` takes any of them.
"""

from __future__ import annotations

import hmac
from typing import Final

HEADER: Final = "Liveroom-Signature"
"""The request header that carries the signature."""
TOLERANCE: Final = 300.0
"""Seconds a signature is good for, either side of the verifier's clock."""


def signature(secret: str | bytes, body: bytes, t: int) -> str:
    """The hex HMAC-SHA256 with ``secret`` (its UTF-8 bytes) of ``"<t>.<body>"``."""
    key = secret.encode() if isinstance(secret, str) else secret
    # hmac.digest: one call into OpenSSL, no HMAC object (a third of hmac.new's cost).
    return hmac.digest(key, b"%d.%b" % (t, body), "sha256").hex()


def sign(secret: str | bytes, body: bytes, t: int) -> str:
    """The :data:`HEADER` value of ``body`` posted at Unix second ``t``."""
    return f"t={t},v1={signature(secret, body, t)}"


def verify(secret: str, header: str | None, body: bytes, now: float, *,
           tolerance: float = TOLERANCE) -> bool:
    """Whether ``header`` (a :data:`HEADER` value, or None) signs ``body``
    with ``secret`` at a ``t`` within ``tolerance`` seconds of ``now``."""
    if not header:
        return False
    t: int | None = None
    given: list[str] = []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and value.isascii() and value.isdigit():
            t = int(value)
        elif key == "v1":
            given.append(value)
    if t is None or abs(now - t) > tolerance:
        return False
    expected = signature(secret, body, t)
    return any(hmac.compare_digest(expected, value) for value in given)
