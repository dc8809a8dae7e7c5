"""Tickets: who a listener or a sender is, signed by the business backend.

In ``ticket`` mode (``--auth ticket``) the uid of a poll or a send is not the
client's to choose. The business backend signs a short-lived ticket for its
user (a JWT, HS256) with one of the node's ``--ticket-key`` keys::

    {"sub": "<uid>", "exp": <unix seconds>,
     "rooms": ["<room>", ...],   # optional: the rooms it is good for (else any)
     "publish": true}            # optional: may send important messages

and the client passes it as ``Authorization: Bearer <ticket>``, or as a
``ticket`` query parameter on a poll where no header can be set (an
``EventSource``, an image). :meth:`Tickets.verify` answers the uid, or raises
:class:`~liveroom.errors.Unauthorized` (401) for a ticket that is malformed,
signed with a key not in the set (a wrong key, or one rotated out), signed
with another algorithm than HS256 (``none`` included: the algorithm is ours to
choose, never the token's), without ``exp`` or past it, whose ``sub`` is not a
valid uid, or whose ``rooms`` do not hold the room.

**Time.** Every time claim is checked against the injected clock
(:mod:`liveroom.clock`), not by PyJWT (which reads the system clock): ``exp``
(required) and ``nbf`` (when present), each with ``ticket_leeway`` seconds of skew.
``iat`` is not checked.

**Cost.** A full verification (base64, JSON, HMAC) costs tens of µs, a poll's
whole CPU about 60: a listener polls with the same ticket again and again, so
what a ticket says is kept in a bounded cache keyed by the ticket's string and
honoured until its ``exp`` (+ ``ticket_leeway``); the room check runs on the cached
claims. When the cache is full the oldest entry goes first (a ticket that
comes back is verified again). Refusals are not cached: a client that sends
garbage pays one failed verification per request, which it could cause with
distinct garbage anyway.

**Keys.** Every key of the set verifies (so a new key can be rolled out to
every node before the backend signs with it, and the old one dropped once its
tickets expired). The cache is per node and filled with the node's keys
(they change with a restart, which empties it).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import jwt

from liveroom.clock import Clock
from liveroom.errors import Unauthorized
from liveroom.model import is_name
from liveroom.settings import DEFAULTS, TICKET_TTL

from .auth import bearer

ALGORITHM = "HS256"
CACHE_MAX = 65_536
"""Verified tickets remembered per node (a few hundred bytes each)."""
TICKET_MAX = 4096
"""Characters of a ticket; a longer one is refused before any decoding."""
UID_MISMATCH = "uid mismatch: the request names another uid than its ticket"
DEFAULT_TTL = TICKET_TTL
"""Seconds a ticket minted by :func:`mint` lives unless told otherwise."""

# Time claims are checked on the injected clock (see the module docstring).
_OPTIONS: Any = {"verify_exp": False, "verify_nbf": False, "verify_iat": False,
                 "require": ["exp", "sub"]}


class Claims(NamedTuple):
    """What a verified ticket says."""

    uid: str
    rooms: frozenset[str] | None
    """The rooms it is good for; ``None``: every room."""
    publish: bool
    """It may send important messages (in its rooms)."""
    exp: float
    """Unix seconds it expires at."""

    def allows(self, room: str) -> bool:
        return self.rooms is None or room in self.rooms


class Tickets:
    """The ticket verifier of one node: its keys, its clock, its cache."""

    def __init__(self, ticket_keys: Sequence[str], clock: Clock, *,
                 ticket_leeway: float = DEFAULTS.ticket_leeway,
                 cache_max: int = CACHE_MAX) -> None:
        if not ticket_keys:
            raise ValueError("tickets need at least one key")
        self._keys = tuple(ticket_keys)
        self._clock = clock
        self.ticket_leeway = ticket_leeway
        self._cache: dict[str, Claims] = {}
        self._cache_max = cache_max
        self.decodes = 0
        """Full verifications made (a cached ticket costs none)."""

    def verify(self, token: str, room: str) -> str:
        """The uid of ``token`` if it is good for ``room``; else 401."""
        return self.good_for(room, token, None).uid

    def good_for(self, room: str, token: str, uid: str | None) -> Claims:
        """The claims of a request of ``room`` carrying ``token`` and naming
        ``uid`` (``None``: it names none). A named uid that is not the ticket's
        is refused (401 "uid mismatch"): the server never lets a request
        speak for someone its ticket does not name."""
        claims = self.claims(token)
        if claims.rooms is not None and room not in claims.rooms:
            raise Unauthorized(f"the ticket is not good for room {room!r}")
        if uid is not None and uid != claims.uid:
            raise Unauthorized(UID_MISMATCH)
        return claims

    def admit_poll(self, room: str, query: dict[str, str],
                   authorization: str | bytes | None) -> dict[str, str]:
        """A poll's query with the uid its ticket names, or 401.

        The ticket is the ``Authorization: Bearer`` header's, else the
        ``ticket`` query parameter's. A query naming no uid gets the ticket's.
        """
        # Every poll comes this way: the common case (the front's raw header,
        # a cached ticket) inlined; anything else takes the checked path.
        if type(authorization) is bytes and authorization.startswith(b"Bearer "):
            try:
                token = authorization[7:].decode().strip()
            except UnicodeDecodeError:
                token = bearer(authorization)  # refuses it
        elif authorization is not None:
            token = bearer(authorization)
        else:
            token = query.get("ticket") or ""
            if not token:
                raise Unauthorized("a poll needs a ticket: send Authorization: Bearer "
                                   "<ticket> or the ticket query parameter")
        named = query.get("uid")
        claims = self._cache.get(token)
        if (claims is None or (claims.rooms is not None and room not in claims.rooms)
                or (named is not None and named != claims.uid)
                or self._clock.time() > claims.exp + self.ticket_leeway):
            claims = self.good_for(room, token, named)
        uid = claims.uid
        if named is not None:
            return query
        named_query = dict(query)
        named_query["uid"] = uid
        return named_query

    def claims(self, token: str) -> Claims:
        """What ``token`` says, verified (from the cache while it is good)."""
        now = self._clock.time()
        cached = self._cache.get(token)
        if cached is not None:
            if now <= cached.exp + self.ticket_leeway:
                return cached
            del self._cache[token]
            raise Unauthorized("the ticket has expired")
        claims = self._decode(token, now)
        cache = self._cache
        if len(cache) >= self._cache_max:
            del cache[next(iter(cache))]
        cache[token] = claims
        return claims

    def _decode(self, token: str, now: float) -> Claims:
        if len(token) > TICKET_MAX:
            raise Unauthorized(f"a ticket has at most {TICKET_MAX} characters")
        self.decodes += 1
        payload: dict[str, Any] | None = None
        for key in self._keys:
            try:
                payload = jwt.decode(token, key, algorithms=[ALGORITHM], options=_OPTIONS)
                break
            except jwt.InvalidSignatureError:
                continue  # maybe another key of the set signed it
            except jwt.InvalidAlgorithmError:
                raise Unauthorized(f"a ticket must be signed with {ALGORITHM}") from None
            except jwt.MissingRequiredClaimError as exc:
                raise Unauthorized(f"the ticket has no {exc.claim!r} claim") from None
            except jwt.PyJWTError:
                raise Unauthorized("the ticket is malformed") from None
        if payload is None:
            raise Unauthorized("the ticket's signature is not one of this server's keys")
        return self._read(payload, now)

    def _read(self, payload: dict[str, Any], now: float) -> Claims:
        exp, nbf = payload["exp"], payload.get("nbf")
        if not _is_number(exp):
            raise Unauthorized("the ticket's exp must be a number (Unix seconds)")
        if now > exp + self.ticket_leeway:
            raise Unauthorized("the ticket has expired")
        if nbf is not None and (not _is_number(nbf) or now + self.ticket_leeway < nbf):
            raise Unauthorized("the ticket is not valid yet")
        uid = payload["sub"]
        if not isinstance(uid, str) or not is_name(uid):
            raise Unauthorized("the ticket's sub must be a uid ([A-Za-z0-9_.-]{1,64})")
        rooms = payload.get("rooms")
        if rooms is not None and (not isinstance(rooms, list)
                                  or not all(isinstance(r, str) for r in rooms)):
            raise Unauthorized("the ticket's rooms must be a list of room names")
        publish = payload.get("publish", False)
        if not isinstance(publish, bool):
            raise Unauthorized("the ticket's publish must be true or false")
        return Claims(uid, None if rooms is None else frozenset(rooms), publish, float(exp))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def mint(key: str, uid: str, *, rooms: Iterable[str] | None = None, ttl: float = DEFAULT_TTL,
         publish: bool = False, now: float | None = None) -> str:
    """A ticket for ``uid``, signed with ``key``, valid ``ttl`` seconds from
    ``now`` (the system clock by default): what a business backend does, for
    ``liveroom ticket`` and tests."""
    issued = time.time() if now is None else now
    claims: dict[str, Any] = {"sub": uid, "iat": int(issued), "exp": int(issued + ttl)}
    if rooms is not None:
        claims["rooms"] = sorted(rooms)
    if publish:
        claims["publish"] = True
    return jwt.encode(claims, key, algorithm=ALGORITHM)
