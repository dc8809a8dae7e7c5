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
what a ticket says is kept in a bounded cache keyed by the ticket's header
(``Bearer <ticket>`` as bytes, the form a request carries it in, so a poll or a
send finds it without decoding its header) and honoured until its ``exp``
(+ ``ticket_leeway``); the room check runs on the cached claims. When the
cache is full the oldest entry goes first (a ticket that comes back is
verified again). Refusals are not cached: a client that sends
garbage pays one failed verification per request, which it could cause with
distinct garbage anyway.

**Keys.** Every key of the set verifies (so a new key can be rolled out to
every node before the backend signs with it, and the old one dropped once its
tickets expired). The cache is per node and filled with the node's keys
(they change with a restart, which empties it).
"""

from __future__ import annotations

import base64
import hmac
import time
from collections.abc import Iterable, Sequence
from typing import Any, Final, NamedTuple

import jwt
import orjson
from jwt.algorithms import HMACAlgorithm

from liveroom.clock import Clock
from liveroom.errors import Unauthorized
from liveroom.model import is_name
from liveroom.settings import DEFAULTS, TICKET_TTL

from .auth import bearer

ALGORITHM = "HS256"
BEARER: Final = b"Bearer "
"""What a ticket's header holds before the ticket; the cache's keys are the
ticket with it (:meth:`Tickets.of_header`)."""
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


def _segment(header: bytes) -> bytes:
    return base64.urlsafe_b64encode(header).rstrip(b"=")


_PLAIN_HEADERS: Final = frozenset(_segment(h) for h in (
    b'{"alg":"HS256","typ":"JWT"}', b'{"typ":"JWT","alg":"HS256"}', b'{"alg":"HS256"}',
    b'{"alg": "HS256", "typ": "JWT"}', b'{"typ": "JWT", "alg": "HS256"}'))
"""The header segments of an HS256 ticket as backends write them (PyJWT's
first): with one of them, PyJWT's header checks pass, and what remains of a
verification is the signature and the claims (:meth:`Tickets._plain`)."""
_PLAIN_CLAIMS: Final = frozenset(("sub", "exp", "iat", "nbf", "rooms", "publish"))
"""A ticket's own claims: with no other, PyJWT checks (under ``_OPTIONS``) only
that ``exp`` and ``sub`` are there and ``sub`` is a string."""
_BASE64URL: Final = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


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
        self._cache: dict[bytes, Claims] = {}
        self._cache_max = cache_max
        # The keys PyJWT takes as HMAC secrets, in order, until the first it
        # refuses (it would refuse a ticket there: the full path says so).
        plain: list[bytes] = []
        for key in self._keys:
            try:
                plain.append(HMACAlgorithm(HMACAlgorithm.SHA256).prepare_key(key))
            except jwt.PyJWTError:
                break
        self._plain_keys: tuple[bytes, ...] = tuple(plain)
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
        # a cached ticket) is one lookup, as a send's; anything else takes
        # the checked path.
        named = query.get("uid")
        claims = (self.of_header(room, authorization) if type(authorization) is bytes
                  else None)
        if claims is None or (named is not None and named != claims.uid):
            if authorization is not None:
                token = bearer(authorization)
            else:
                token = query.get("ticket") or ""
                if not token:
                    raise Unauthorized("a poll needs a ticket: send Authorization: Bearer "
                                       "<ticket> or the ticket query parameter")
            claims = self.of_header(room, BEARER + token.encode())
            if claims is None or (named is not None and named != claims.uid):
                claims = self.good_for(room, token, named)
        uid = claims.uid
        if named is not None:
            return query
        named_query = dict(query)
        named_query["uid"] = uid
        return named_query

    def of_header(self, room: str, authorization: bytes) -> Claims | None:
        """The claims of a request of ``room`` whose ``Authorization`` header
        is ``authorization`` exactly, when it holds a ticket verified before
        that is still good and good for ``room``; ``None`` for anything else
        (a ticket not seen, expired, or for other rooms; a backend token; a
        header written otherwise than ``Bearer <ticket>``), which the checked
        path (:func:`~.auth.bearer`, :meth:`good_for`) then accepts or
        refuses, saying why. A send's common case: no decoding, one lookup.
        A backend token is never here: only what verifies as a ticket
        signed with a ``--ticket-key`` is, which a token is not."""
        claims = self._cache.get(authorization)
        if claims is None or self._clock.time() > claims.exp + self.ticket_leeway \
                or (claims.rooms is not None and room not in claims.rooms):
            return None
        return claims

    def claims(self, token: str) -> Claims:
        """What ``token`` says, verified (from the cache while it is good)."""
        now = self._clock.time()
        try:
            key = BEARER + token.encode()
        except UnicodeEncodeError:
            raise Unauthorized("the ticket is malformed") from None
        cached = self._cache.get(key)
        if cached is not None:
            if now <= cached.exp + self.ticket_leeway:
                return cached
            del self._cache[key]
            raise Unauthorized("the ticket has expired")
        claims = self._decode(token, now)
        cache = self._cache
        if len(cache) >= self._cache_max:
            del cache[next(iter(cache))]
        cache[key] = claims
        return claims

    def _decode(self, token: str, now: float) -> Claims:
        if len(token) > TICKET_MAX:
            raise Unauthorized(f"a ticket has at most {TICKET_MAX} characters")
        self.decodes += 1
        payload = self._plain(token)
        if payload is not None:
            return self._read(payload, now)
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

    def _plain(self, token: str) -> dict[str, Any] | None:
        """The payload of a ticket as backends write them, verified as PyJWT
        verifies it, at a fraction of its cost (a new ticket is a new
        listener's first poll, or a viewer's first send); ``None`` for any
        other token, or one this path cannot vouch for (wrong key, unusual
        encoding, more claims): :meth:`_decode` then asks PyJWT, which
        accepts it or says why not. Only what PyJWT would accept is accepted
        here, and then with the same payload: its header one of
        ``_PLAIN_HEADERS``, its segments plain base64url (so any decoder
        reads the same bytes), its signature the HMAC-SHA256 of a key of the
        set written back exactly (PyJWT reads a signature more leniently),
        its payload JSON orjson reads (what it reads, the standard parser
        reads alike), an object of ``_PLAIN_CLAIMS`` only, ``exp`` and
        ``sub`` there, ``sub`` a string."""
        try:
            raw = token.encode()
        except UnicodeEncodeError:
            return None
        signing, _, signature = raw.rpartition(b".")
        header, _, body = signing.partition(b".")
        if header not in _PLAIN_HEADERS or len(body) % 4 == 1 \
                or body.translate(None, _BASE64URL):
            return None
        for key in self._plain_keys:
            if hmac.compare_digest(_segment(hmac.digest(key, signing, "sha256")), signature):
                break
        else:
            return None  # another key's (maybe refused by PyJWT), or a wrong one
        try:
            payload = orjson.loads(base64.urlsafe_b64decode(body + b"=" * (-len(body) % 4)))
        except (ValueError, orjson.JSONDecodeError):
            return None
        if type(payload) is not dict or not payload.keys() <= _PLAIN_CLAIMS \
                or payload.get("exp") is None or type(payload.get("sub")) is not str:
            return None
        return payload

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
