"""Bearer tokens: the publisher token (important sends) and the admin token
(operators; it can also publish). Compared in constant time."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from enum import Enum

from liveroom.errors import Forbidden, Unauthorized


class Right(Enum):
    PUBLISH = "publish"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class Tokens:
    admin: str
    publisher: str

    def require(self, authorization: str | None, right: Right) -> None:
        """Raise 401 for a missing or unknown token, 403 for one without ``right``."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("send Authorization: Bearer <token>")
        is_admin = hmac.compare_digest(token.encode(), self.admin.encode())
        is_publisher = hmac.compare_digest(token.encode(), self.publisher.encode())
        if is_admin:
            return
        if is_publisher:
            if right is Right.PUBLISH:
                return
            raise Forbidden("the publisher token cannot do this")
        raise Unauthorized("unknown token")
