"""Bearer tokens: the publisher token (important sends) and the admin token
(operators; it can also publish). Compared in constant time.

:func:`bearer` reads the token of an ``Authorization`` header for every
credential the server knows (these tokens, tickets, the metrics token): a
header that is missing, of another scheme, or not UTF-8 is a 401.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from liveroom.errors import Forbidden, Unauthorized


class Right(Enum):
    PUBLISH = "publish"
    ADMIN = "admin"


def bearer(authorization: str | bytes | None) -> str:
    """The token of ``Authorization: Bearer <token>``; 401 when there is none.

    ``bytes`` are the header as it arrived (the front decodes only here);
    a ``str`` is aiohttp's reading, where a byte that is not UTF-8 became a
    lone surrogate. Either way such a header is refused, never a 500.
    """
    if authorization is None:
        raise Unauthorized("send Authorization: Bearer <token>")
    if isinstance(authorization, bytes):
        try:
            text = authorization.decode()
        except UnicodeDecodeError:
            raise Unauthorized("the Authorization header is not UTF-8") from None
    else:
        text = authorization
        if not text.isascii():
            try:
                text.encode()
            except UnicodeEncodeError:
                raise Unauthorized("the Authorization header is not UTF-8") from None
    scheme, _, token = text.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer":
        raise Unauthorized("send Authorization: Bearer <token>")
    if not token:
        # Most often "Bearer $TOKEN" with the variable unset.
        raise Unauthorized("the bearer token is empty (is the variable that holds it set?)")
    return token


VERIFIED_MAX: Final = 16
"""Authorization headers (as they arrived) whose token was verified, kept to
skip the check next time: a backend sends the same header on every request.
Only headers that carried one of the tokens are kept, so no client can fill
it."""


@dataclass(frozen=True, slots=True)
class Tokens:
    admin: str
    publisher: str
    _verified: dict[bytes, Right] = field(default_factory=dict, compare=False, repr=False)
    """Raw headers already verified, and the right they carry (see :data:`VERIFIED_MAX`)."""

    def right_of(self, token: str) -> Right | None:
        """What ``token`` may do: ADMIN (everything), PUBLISH, or None (not ours)."""
        given = token.encode()
        is_admin = hmac.compare_digest(given, self.admin.encode())
        is_publisher = hmac.compare_digest(given, self.publisher.encode())
        if is_admin:
            return Right.ADMIN
        return Right.PUBLISH if is_publisher else None

    def require(self, authorization: str | bytes | None, right: Right) -> None:
        """Raise 401 for a missing or unknown token, 403 for one without ``right``."""
        if isinstance(authorization, bytes):
            held = self._verified.get(authorization)
            if held is None:
                held = self.right_of(bearer(authorization))
                if held is not None and len(self._verified) < VERIFIED_MAX:
                    self._verified[authorization] = held
        else:
            held = self.right_of(bearer(authorization))
        if held is Right.ADMIN or held is right:
            return
        if held is Right.PUBLISH:
            raise Forbidden("the publisher token cannot do this")
        raise Unauthorized("unknown token")
