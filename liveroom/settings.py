"""Settings of a liveroom node: one frozen dataclass, filled by the CLI from
flags and ``LIVEROOM_*`` environment variables, with defaults that run a
working server on one machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import ConfigError
from .ratelimit import RateLimits, Window, parse_windows

if TYPE_CHECKING:
    from .store.base import LogPolicy

# -- defaults every layer shares, written once ----------------------------------
# Settings starts from them, and so do the store's LogPolicy and the roles' own
# limits for whoever builds those without a Settings (tests, benchmarks).

NORMAL_KEEP = 2000
"""Newest normal messages each room's cache keeps."""
IMPORTANT_KEEP = 500
"""Important messages kept at least, by count (cache and store)."""
IMPORTANT_WINDOW = 600.0
"""Seconds important messages are kept at least (cache and store)."""
IMPORTANT_HARD_CAP = 50_000
"""Important messages kept at most, whatever the window."""
INDEX_KEEP = 100_000
LOG_CAP = 10_000
ROOM_TTL = 86_400.0
EMPTY_ROOM_TTL = 300.0
TICKET_TTL = 3600
"""Seconds a ticket minted by ``liveroom ticket`` is valid, unless told otherwise."""
DEDUP_TTL = 600.0
FALLBACK_INTERVAL = 1.0
READ_WINDOW = 60.0
PULL_BATCH = 128
PULL_CONCURRENCY = 4
TOUCH_INTERVAL = 600.0
ROOMS_MAX = 10_000
FIRST_PULL_TIMEOUT = 5.0
ONLINE_TTL = 90.0
VIP_SHARDS = 16
VIEWERS_THRESHOLD = 10_000
HISTORY_TTL = 90 * 86_400.0


@dataclass(frozen=True, slots=True)
class Tier:
    """From ``online`` listeners on, a room answers each listener at most once per
    ``interval`` (+ up to ``jitter``) seconds."""

    online: int
    interval: float
    jitter: float = 0.0


SECRET_MIN = 32
"""Bytes a token or the ctx secret has at least over a shared store: a
shorter ctx key can be brute-forced from any answer's ``ctx``."""

AUTH_MODES = ("open", "ticket")
TICKET_KEY_MIN = 32
"""Bytes a ticket key has at least: the size of HS256's hash (RFC 7518, 3.2;
PyJWT warns below it)."""

DEFAULT_RATE_LIMITS = RateLimits()
ROOMS_PER_UID = parse_windows("10/m,100/h")
ROOMS_PER_NODE = parse_windows("600/m")
DEFAULT_TIERS = (Tier(1_000, 1.0), Tier(10_000, 2.0), Tier(100_000, 5.0),
                 Tier(1_000_000, 8.0, 2.0))


def parse_tiers(text: str) -> tuple[Tier, ...]:
    """``"1000:1,10000:2,100000:5,1000000:8+2"`` (ONLINE:INTERVAL[+JITTER], seconds);
    ``""`` or ``"off"`` for none (every room a plain long poll)."""
    text = text.strip()
    if text in ("", "off", "none"):
        return ()
    tiers = []
    for part in text.split(","):
        online, sep, rest = part.strip().partition(":")
        interval, _, jitter = rest.partition("+")
        try:
            tier = Tier(int(online), float(interval), float(jitter or 0))
        except ValueError:
            raise ConfigError("tiers", f"bad tier {part.strip()!r}: write "
                                       f"ONLINE:INTERVAL[+JITTER], e.g. 1000000:8+2") from None
        if not sep or tier.online < 1 or tier.interval <= 0 or tier.jitter < 0:
            raise ConfigError("tiers", f"bad tier {part.strip()!r}: ONLINE ≥ 1, "
                                       f"INTERVAL > 0, JITTER ≥ 0")
        tiers.append(tier)
    return tuple(sorted(tiers, key=lambda t: t.online))


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    store: str = "memory"
    """``memory`` or a ``redis://HOST:PORT/DB`` URL."""
    node_id: str = ""
    """Stable id of this node among those sharing a store (default: host:port)."""
    admin_token: str | None = None
    publisher_token: str | None = None
    secret: str | None = None
    """Key that signs listener contexts. These three are made up when unset on
    the memory store only; a node over a shared store needs them configured
    (:meth:`unset_secrets`)."""
    log_level: str = "info"

    # Identity.
    auth: str = "open"
    """``open``: a request names its own uid (the embedded demo, tests).
    ``ticket``: the uid comes from a signed ticket (:mod:`proxy.tickets`)."""
    ticket_keys: tuple[str, ...] = ()
    """HS256 keys tickets may be signed with; every one is accepted (so a key
    can be rotated in before the old one is dropped), the first one signs."""
    ticket_leeway: float = 5.0
    """Seconds of clock skew allowed on a ticket's ``exp`` (and ``nbf``)."""
    metrics_token: str | None = None
    """When set, ``/metrics`` needs ``Authorization: Bearer <it>``; unset, it
    needs the admin token (unless ``metrics_public``)."""
    metrics_public: bool = False
    """``/metrics`` answers anybody (behind a network that keeps it private)."""

    # The listening contract.
    poll_timeout: float = 25.0
    poll_timeout_max: int = 60
    recent_default: int = 20
    recent_max: int = 100
    answer_limit: int = 500
    """Normal messages per answer; the rest of a backlog is counted in ``gap``."""
    max_message_bytes: int = 4096
    """Largest message ``body``, measured as JSON."""
    request_timeout: float = 10.0
    """Time a client has to send a request body."""
    header_timeout: float = 10.0
    """Time a client has to send a request's head, from its first byte."""
    keepalive_timeout: float = 15.0
    """Time an idle keep-alive connection stays open."""

    # Bounds.
    answer_bytes_max: int = 256 * 1024
    """Messages per answer, in encoded bytes (also for ``recent``); what does
    not fit stays pending and comes in the next answer."""
    holds_per_listener: int = 4
    """Polls held at once per (room, uid); a newer one answers the oldest at
    once, empty (a reconnecting client never waits on its own ghost)."""
    holds_per_uid: int = 16
    """Polls held at once per uid over all rooms; a newer one answers the
    oldest at once, empty (one listener cannot take the node's capacity with
    polls on made-up rooms)."""
    held_max: int = 0
    """Polls held at once by the node; beyond, a poll is answered 503 with
    ``Retry-After``. 0: the open-file limit minus a reserve (see
    :func:`proxy.hold.held_capacity`)."""
    connections_max: int = 0
    """Connections open at once on the node (the listener front's and those it
    handed to aiohttp); one more is answered 503 ``overloaded`` with
    ``Retry-After`` and closed. 0: the open-file limit minus a reserve (see
    :func:`proxy.front.connection_capacity`)."""

    # Traffic control.
    tiers: tuple[Tier, ...] = DEFAULT_TIERS
    """Minimum interval between two non-empty answers to one listener, by the
    room's online count (under the first tier: a plain long poll)."""
    hold_tick: float = 0.2
    """Rooms in a tier release their due polls in room-wide ticks this far apart."""
    cut_through_every: float = 0.5
    """Important messages release a tiered room's held polls at most this often."""
    rate_limits: RateLimits = DEFAULT_RATE_LIMITS
    """Sender limits (per uid in a room, and an optional room-wide cap)."""
    rooms_per_uid: tuple[Window, ...] = ROOMS_PER_UID
    """Rooms a uid's sends may create, per window, on this node (sends to rooms
    that exist are not counted); the backend's tokens are not limited."""
    rooms_per_node: tuple[Window, ...] = ROOMS_PER_NODE
    """Rooms all sends together may create on this node, per window."""
    vip_refresh: float = 2.0
    """Seconds between two reads of the vip whitelist by every node."""

    # recvsvr.
    normal_keep: int = NORMAL_KEEP
    important_keep: int = IMPORTANT_KEEP
    important_window: float = IMPORTANT_WINDOW
    index_keep: int = INDEX_KEEP
    """Important positions remembered for exact counting beyond the lists."""
    fallback_pull_interval: float = FALLBACK_INTERVAL
    read_window: float = READ_WINDOW
    """A room read within this many seconds is pulled at least once per interval."""
    pull_batch: int = PULL_BATCH
    pull_concurrency: int = PULL_CONCURRENCY
    """The normal sect's pull budget: rooms per store read, reads in flight."""
    vip_pull_batch: int = 16
    vip_pull_concurrency: int = 2
    """The vip sect's own budget (few rooms, each hot): a storm in a vip room
    waits for these workers only, never for the normal sect's."""
    touch_interval: float = TOUCH_INTERVAL

    # Store.
    log_cap: int = LOG_CAP
    room_ttl: float = ROOM_TTL
    dedup_ttl: float = DEDUP_TTL

    # Room cost.
    rooms_max: int = ROOMS_MAX
    """Rooms each sect's cache holds at most (least recently read evicted first,
    never one with held polls). A cached room that does not exist costs about
    1.3 KiB, a small room its messages (see docs/operations.md, "What a room costs")."""
    empty_room_ttl: float = EMPTY_ROOM_TTL
    durable_replicas: int = 0
    """Replicas a message must reach before its send is answered 201 (redis
    engine: ``WAIT``). 0 acknowledges once the master stored it."""
    durable_timeout: float = 1.0
    """Seconds an append waits for ``durable_replicas`` before answering 503."""
    """Seconds a log created by an operator action lives without a message
    (reads do not extend it; the first message extends it to ``room_ttl``)."""
    first_pull_timeout: float = FIRST_PULL_TIMEOUT
    """Longest wait of a poll for a pull of its room (then 503, ``Retry-After``)."""

    # statsvr.
    online_ttl: float = ONLINE_TTL
    """A listener with no poll for this long is offline. Must exceed the longest
    poll timeout plus the longest hold interval (else a listener waiting in a
    long poll would flicker offline)."""
    hold_interval_max: float = 10.0
    """The longest interval the adaptive hold may add to a poll (a tier's
    interval plus jitter may not exceed it)."""
    vip_shards: int = VIP_SHARDS
    """Shard keys a vip room's online list is split over, per statsvr node."""
    viewers_threshold: int = VIEWERS_THRESHOLD
    """Distinct viewers counted exactly; a HyperLogLog estimates beyond."""
    history_ttl: float = HISTORY_TTL
    """How long a room's viewers history outlives its last viewer."""
    heartbeat_flush: float = 0.25
    stats_write_every: float = 1.0
    merge_every: float = 1.0

    def __post_init__(self) -> None:
        found = self.problems()
        if found:
            raise ConfigError.of(found)

    def problems(self) -> list[ConfigError]:
        """Every setting that cannot run, each with its reason (empty: none)."""
        found: list[ConfigError] = []
        if self.auth not in AUTH_MODES:
            found.append(ConfigError("auth", f"auth must be one of {', '.join(AUTH_MODES)}, "
                                      f"not {self.auth!r}"))
        if self.auth == "ticket" and not self.ticket_keys:
            found.append(ConfigError("ticket_keys",
                                     "auth 'ticket' needs at least one ticket key"))
        for key in self.ticket_keys:
            if len(key.encode()) < TICKET_KEY_MIN:
                found.append(ConfigError("ticket_keys",
                                  f"a ticket key must be at least {TICKET_KEY_MIN} bytes "
                                  f"(HS256 with a shorter key can be brute-forced)"))
                break
        if self.ticket_leeway < 0:
            found.append(ConfigError("ticket_leeway", "ticket_leeway must not be negative"))
        if self.metrics_token is not None and not self.metrics_token:
            found.append(ConfigError("metrics_token", "metrics_token must not be empty"))
        longest = self.poll_timeout_max + self.hold_interval_max
        if self.online_ttl <= longest:
            found.append(ConfigError(
                "online_ttl", f"online_ttl ({self.online_ttl:g} s) must exceed the longest "
                f"poll timeout plus the longest hold interval ({longest:g} s)"))
        for tier in self.tiers:
            if tier.interval + tier.jitter > self.hold_interval_max:
                found.append(ConfigError(
                    "tiers", f"tier from {tier.online} online: interval plus jitter "
                    f"({tier.interval + tier.jitter:g} s) exceeds hold_interval_max "
                    f"({self.hold_interval_max:g} s)"))
        if not 0.05 <= self.hold_tick <= 1.0:
            found.append(ConfigError("hold_tick", "hold_tick must be between 0.05 and 1 s"))
        if self.answer_bytes_max < 1024:
            found.append(ConfigError("answer_bytes_max",
                                     "answer_bytes_max must be at least 1024 bytes"))
        if self.holds_per_listener < 1:
            found.append(ConfigError("holds_per_listener", "holds_per_listener must be at least 1"))
        if self.holds_per_uid < 1:
            found.append(ConfigError("holds_per_uid", "holds_per_uid must be at least 1"))
        if self.held_max < 0:
            found.append(ConfigError("held_max", "held_max must be at least 0"))
        if self.connections_max < 0:
            found.append(ConfigError("connections_max", "connections_max must be at least 0"))
        if self.vip_shards < 1:
            found.append(ConfigError("vip_shards", "vip_shards must be at least 1"))
        if self.vip_refresh <= 0:
            found.append(ConfigError("vip_refresh", "vip_refresh must be positive"))
        if self.durable_replicas < 0:
            found.append(ConfigError("durable_replicas", "durable_replicas must be 0 or more"))
        if self.durable_timeout <= 0:
            found.append(ConfigError("durable_timeout", "durable_timeout must be positive"))
        if self.durable_replicas and not self.shared_store:
            found.append(ConfigError("durable_replicas", "durable_replicas needs the redis engine: "
                                                  "the memory engine has no replicas"))
        for name in ("rooms_max", "empty_room_ttl", "first_pull_timeout"):
            if getattr(self, name) <= 0:
                found.append(ConfigError(name, f"{name} must be positive"))
        if min(self.pull_batch, self.pull_concurrency, self.vip_pull_batch,
               self.vip_pull_concurrency) < 1:
            found.append(ConfigError("pull_batch", "every sect needs a pull batch and concurrency "
                                            "of at least 1"))
        return found

    @property
    def shared_store(self) -> bool:
        """The store is shared by processes (Redis), not one process's memory."""
        return self.store not in ("memory", "memory://")

    def weak_secrets(self) -> list[str]:
        """What makes the configured secrets guessable or confusable (see
        :func:`weak_secrets`)."""
        return weak_secrets({name: getattr(self, name) for name in SECRET_SETTINGS})

    def unset_secrets(self) -> tuple[str, ...]:
        """The settings of ``admin_token``, ``publisher_token`` and ``secret``
        that are not configured (a node over a shared store needs all three:
        made-up ones would differ between nodes)."""
        return unset_secrets({name: getattr(self, name) for name in SECRET_SETTINGS})

    @property
    def name(self) -> str:
        return self.node_id or f"{self.host}:{self.port}"

    def log_policy(self) -> LogPolicy:
        from .store.base import LogPolicy  # the store's base imports these defaults

        return LogPolicy(
            log_cap=self.log_cap,
            important_keep=self.important_keep,
            important_window_ms=int(self.important_window * 1000),
            room_ttl_ms=int(self.room_ttl * 1000),
            empty_room_ttl_ms=int(self.empty_room_ttl * 1000),
            dedup_ttl_ms=int(self.dedup_ttl * 1000),
            durable_replicas=self.durable_replicas,
            durable_timeout_ms=int(self.durable_timeout * 1000),
        )


SECRET_SETTINGS = ("admin_token", "publisher_token", "secret", "metrics_token")
"""The settings that are secrets shared by every node (``ticket_keys`` aside)."""


def weak_secrets(values: dict[str, str | None]) -> list[str]:
    """What makes the secrets in ``values`` guessable or confusable, one
    sentence each: over a shared store every token and the secret have at
    least :data:`SECRET_MIN` bytes, and the admin and publisher tokens differ
    (else a publisher could act as an operator)."""
    problems = [f"--{name.replace('_', '-')} has {len(value.encode())} bytes: give at "
                f"least {SECRET_MIN} (`liveroom secrets` makes some)"
                for name in SECRET_SETTINGS
                if (value := values.get(name)) and len(value.encode()) < SECRET_MIN]
    admin = values.get("admin_token")
    if admin and admin == values.get("publisher_token"):
        problems.append("--admin-token and --publisher-token are the same: the "
                        "publisher would be an operator; give them different values")
    return problems


def unset_secrets(values: dict[str, str | None]) -> tuple[str, ...]:
    """Which of ``admin_token``, ``publisher_token`` and ``secret`` ``values``
    leaves unset."""
    return tuple(name for name in ("admin_token", "publisher_token", "secret")
                 if not values.get(name))
