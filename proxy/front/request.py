"""One request as the front reads it: what its routes read of its head and
its body, and what answers it once dispatched (:class:`Held`: work a
handler holds)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

    from ..reply import Reply


class Held:
    """A request its handler holds until something answers it (a long poll):
    the connection lets go of it through these when its client leaves."""

    __slots__ = ()

    def holding(self) -> bool:
        """Whether it waits now (a half-close then answers it at once)."""
        raise NotImplementedError

    def release(self) -> None:
        """Answer now what waiting would have answered when it ran out: the
        client half-closed and waits for nothing more."""
        raise NotImplementedError

    def cancel(self) -> None:
        """The client left: forget it, answer nothing."""
        raise NotImplementedError


class Request:
    """One request as it arrives. Class attributes are the defaults, so a
    request only pays for what it sets (most carry three headers)."""

    url = b""
    method = b""
    http10 = False
    """An HTTP/1.0 request (its keep-alive answer says so)."""
    headers = 0
    header_bytes = 0
    accept = ""
    content_type = ""
    content_length: int | None = None
    content_encoding: str | None = None
    authorization: bytes | None = None
    """As it arrived: decoded only by a route that reads it."""
    expect = False
    seen = 0
    """The framing and identity headers met so far (bits of :data:`~.headers.ONCE`)."""
    kind = 0
    room = ""
    query = ""
    keep_alive = True
    close_after = False
    body: bytearray | None = None
    """A send's body as llhttp's callbacks gather it (None: dropped, or read whole)."""
    whole: bytes | None = None
    """The body of a request read whole (:func:`~.whole.read_whole`).
    Not one attribute typed ``bytearray | bytes | None``: mypyc drops the
    class default of such a union (docs/development.md, "Compiled modules")."""
    discarded = 0
    error: Reply | None = None
    work: Held | asyncio.Task[Reply] | asyncio.Handle | None = None
    """What answers it, once the connection dispatched it (not the reader's)."""
    forwarded: bytes | None = None
    """``X-Forwarded-For`` (every copy, in order), kept only on a trusted
    proxy's connection."""

    def content(self) -> bytes:
        """A send's (or a like's) body, however it was read."""
        whole = self.whole
        if whole is not None:
            return whole
        assert self.body is not None  # refused before it is answered otherwise
        return bytes(self.body)
