"""The one error hierarchy of liveroom.

Every error a client can cause or a fault can raise is a :class:`LiveroomError`
with a stable ``code`` (the ``error`` field of the JSON answer), an HTTP
``status`` and whether it is ``temporary`` (worth retrying: the answer then
carries ``Retry-After``)::

    LiveroomError
    ├── BadRequest            400  malformed names, cursors, parameters, bodies
    │   └── BadBody           400  invalid JSON or msgpack, missing uid/body
    ├── Unauthorized          401  token missing or wrong
    ├── Forbidden             403  a valid token without the right
    │   ├── Muted             403  a muted uid's send (a moderator's mute)
    │   ├── Banned            403  a banned uid's poll or send
    │   ├── Filtered          403  a send holding a word of a block list (the word filter)
    │   └── Rejected          403  a send the backend's send hook rejected
    ├── NotFound              404  a message (to recall) the room does not keep
    ├── RequestTimeout        408  a request body not received in time
    ├── Conflict              409  the room's state refuses it (its mutes or bans are full)
    ├── TooLarge              413  body over the limit
    ├── UnsupportedMedia      415  neither JSON nor msgpack, or compressed
    ├── RateLimited           429  a sender limit (temporary)
    │   └── NewRoomRefused    429  a send that would create a room may not
    ├── StoreUnavailable      503  the KV store cannot be reached (temporary)
    ├── SendHookUnavailable   503  the send hook could not screen a send (temporary)
    ├── Overloaded            503  the node holds all the polls it may (temporary)
    └── ReviewUnavailable     503  a send a hold list matched, on a node without a review queue

Engines turn their driver's connection errors into :class:`StoreUnavailable` at
their boundary, so nothing above the store knows which engine runs. One
middleware in the proxy turns these errors into the JSON error answer.
"""

from __future__ import annotations


class LiveroomError(Exception):
    """Base of every error that becomes a JSON error answer."""

    code = "internal"
    status = 500
    temporary = False

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class BadRequest(LiveroomError):
    code = "bad_request"
    status = 400


class BadBody(BadRequest):
    code = "bad_body"


class Unauthorized(LiveroomError):
    code = "unauthorized"
    status = 401


class Forbidden(LiveroomError):
    code = "forbidden"
    status = 403


class Muted(Forbidden):
    """The uid may not send in this room for a while; it still listens."""

    code = "muted"


class Banned(Forbidden):
    """The uid may neither listen nor send in this room."""

    code = "banned"


class Filtered(Forbidden):
    """The message holds a word of a ``block`` list of the word filter that
    applies to its room: refused, nothing stored."""

    code = "filtered"
class Rejected(Forbidden):
    """The backend's send hook rejected the send (its reason is the message)."""

    code = "rejected"


class NotFound(LiveroomError):
    code = "not_found"
    status = 404


class NoSuchRoom(NotFound):
    """The room does not exist (no first message, no operator's start) where
    the route needs one that does."""

    code = "no_such_room"


class RequestTimeout(LiveroomError):
    code = "request_timeout"
    status = 408


class Conflict(LiveroomError):
    code = "conflict"
    status = 409


class TooLarge(LiveroomError):
    code = "too_large"
    status = 413


class UnsupportedMedia(LiveroomError):
    code = "unsupported_media_type"
    status = 415


class RateLimited(LiveroomError):
    code = "rate_limited"
    status = 429
    temporary = True


class NewRoomRefused(RateLimited):
    """The store refused a send that would have created its room (the caller
    said it may not create one); nothing was stored or counted."""

    def __init__(self, message: str = "this send would create a room", *,
                 retry_after: float | None = 60.0) -> None:
        super().__init__(message, retry_after=retry_after)


class StoreUnavailable(LiveroomError):
    """The KV store could not be reached; the operation may be retried."""

    code = "store_unavailable"
    status = 503
    temporary = True

    def __init__(self, message: str = "the message store is unavailable", *,
                 retry_after: float | None = 1.0) -> None:
        super().__init__(message, retry_after=retry_after)


class StoreRefused(StoreUnavailable):
    """The store refused a command as wrong (a script's error, a key of the
    wrong type): a bug or a foreign write, not an outage. Background loops that
    ride out outages ride this out too (it is a StoreUnavailable); a client is
    answered 500, not 503 with ``Retry-After``: retrying will not help."""

    code = "internal"
    status = 500
    temporary = False

    def __init__(self, message: str) -> None:
        super().__init__(message, retry_after=None)


class SendHookUnavailable(LiveroomError):
    """The send hook's backend was late, failing, or its circuit open, and
    ``--send-hook-failure reject`` refuses the send: nothing was stored."""

    code = "send_hook_unavailable"
    status = 503
    temporary = True

    def __init__(self, message: str, *, retry_after: float | None = 1.0) -> None:
        super().__init__(message, retry_after=retry_after)


class Overloaded(LiveroomError):
    """The node holds as many polls as it may: this one was not held."""

    code = "overloaded"
    status = 503
    temporary = True

    def __init__(self, message: str = "this node holds all the polls it can; retry later",
                 *, retry_after: float | None = 2.0) -> None:
        super().__init__(message, retry_after=retry_after)


class ReviewUnavailable(LiveroomError):
    """The message holds a word of a ``hold`` list, and this node has no
    review queue to hold it in: refused, nothing stored. Not temporary: the
    node's assembly, not a passing fault (no ``Retry-After``)."""

    code = "review_unavailable"
    status = 503


class ConfigError(ValueError):
    """A setting that cannot run: ``setting`` names it (a field of
    :class:`~liveroom.settings.Settings`), :attr:`option` the ``serve`` flag
    that sets it."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting
        self.message = message
        self.problems: tuple[ConfigError, ...] = (self,)
        """Every setting found wrong at once (this one first)."""

    @classmethod
    def of(cls, found: list[ConfigError]) -> ConfigError:
        """One error for several: named by the first, saying them all."""
        error = cls(found[0].setting, "; ".join(f.message for f in found))
        error.problems = tuple(found)
        return error

    @property
    def option(self) -> str:
        return _FLAGS.get(self.setting) or "--" + self.setting.replace("_", "-")


_FLAGS = {"ticket_keys": "--ticket-key", "rate_limits": "--rate-limits"}
"""Settings whose ``serve`` flag is not their name in kebab case."""


class OriginError(OSError):
    """A call to a backend origin failed (:mod:`liveroom.origin`): no
    connection, the connection lost before a whole answer, an answer
    HTTP/1.1 could not parse, or one over its bound. Here, not in
    :mod:`liveroom.origin`, because a compiled module defines no exception
    class (mypyc makes none from a builtin type)."""
