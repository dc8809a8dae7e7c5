"""The client's errors::

    ClientError
    ├── ApiError       the server refused a call (status, code, message, retry_after)
    ├── Unreachable    no answer: a network error or a timeout
    └── ClientClosed   the client (or the session it was given) is closed
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import aiohttp

from liveroom.model import is_name, is_room


class ClientError(Exception):
    """Base of the client's errors."""


class ApiError(ClientError):
    """The server refused a call: its status, its error code (the ``error``
    field: ``bad_request``, ``unauthorized``, ``rate_limited``...) and message."""

    def __init__(self, status: int, code: str, message: str, *,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{message} (HTTP {status} {code})")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        """Seconds the server asked to wait (429, 503), when it said."""


class Unreachable(ClientError):
    """The server could not be reached, or did not answer in time."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach {url}: {reason}")
        self.url = url
        self.reason = reason


class ClientClosed(ClientError):
    """A call on a closed :class:`~liveroom.client.Client`, or one its closing
    cut short. Its listenings are not told so: closing stops them, and their
    loops end without an error."""

    def __init__(self, url: str) -> None:
        super().__init__(f"the client of {url} is closed")
        self.url = url


def retry_after_of(headers: Mapping[str, str]) -> float | None:
    raw = headers.get("Retry-After")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:  # an HTTP date: the server never sends one
        return None


async def refusal(resp: aiohttp.ClientResponse) -> ApiError:
    """The error a non-2xx answer stands for (``{"error", "message"}``, or
    whatever a proxy in front of the server said)."""
    text = await resp.text(errors="replace")
    code, message = "http_error", text.strip()[:200] or (resp.reason or "")
    with contextlib.suppress(ValueError):
        doc = await resp.json(content_type=None)
        if isinstance(doc, dict):
            code = str(doc.get("error", code))
            message = str(doc.get("message", message))
    return ApiError(resp.status, code, message, retry_after=retry_after_of(resp.headers))


def checked_name(kind: str, value: str) -> str:
    """A room or uid, checked before it goes into a URL."""
    if not isinstance(value, str) or not is_name(value):
        raise ValueError(f"{kind} must match [A-Za-z0-9_.-]{{1,64}}, not {value!r}")
    if kind == "room" and not is_room(value):
        raise ValueError(f"room must not be made only of dots, not {value!r}")
    return value
