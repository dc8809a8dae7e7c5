"""Settings of a liveroom node: one frozen dataclass, filled by the CLI from
flags and ``LIVEROOM_*`` environment variables, with defaults that run a
working server on one machine.
"""

from __future__ import annotations

import ipaddress
import os
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from .durations import duration_text, seconds_of
from .errors import ConfigError
from .ratelimit import RateLimits, Window, parse_windows
from .sects import VipRule

if TYPE_CHECKING:
    from .store.base import FilterLimits, LogPolicy

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
PERSONAL_HARD_CAP = 1_000_000
"""Personal messages kept at most per room, whatever the window."""
PERSONAL_NODE_CAP = 2_000_000
"""Personal messages a node holds at most, all its rooms together."""
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
REVIEW_MAX = 1_000
"""Held messages a room's review queue keeps (``--review-max``)."""


LOOPBACK = ("127.0.0.0/8", "::1")
"""The node's own machine: the proxies trusted unless told otherwise."""


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
ROOMS_PER_ADDRESS = parse_windows("100/m")
ROOMS_PER_NODE = parse_windows("600/m")
LIKE_REQUESTS = parse_windows("10/s")
LIKE_TAPS = parse_windows("1000/m")
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


def _tiers_text(tiers: tuple[Tier, ...]) -> str:
    return ",".join(f"{t.online}:{t.interval:g}" + (f"+{t.jitter:g}" if t.jitter else "")
                    for t in tiers) or "off"


def _windows_text(windows: tuple[Window, ...]) -> str:
    return ",".join(str(w) for w in windows) or "off"


def _rate_limits(text: str) -> RateLimits:
    return RateLimits(per_uid=parse_windows(text))


SEND_BUFFER = 160 * 1024
"""The default send buffer of a client connection (SO_SNDBUF). Linux doubles
it: 320 KiB of kernel memory at most, which takes about 230 KiB of answers
(the rest is the kernel's bookkeeping): with the transport's 64 KiB
high-water mark above it, the largest answer of the default
``answer_bytes_max`` (255 KiB with its last message and envelope) is written
in one go, without pausing its connection, even to a client whose own kernel
takes none of it. 1 000 clients that never read fill 320 MB of it, not the
3.9 GB of buffers left to grow to ``tcp_wmem``'s 4 MiB. Under
``net.core.wmem_max``'s usual 208 KiB, so the kernel takes it as given."""
SEND_BUFFER_MIN = 16 * 1024
"""The smallest send buffer a node accepts (0 aside): the size TCP starts
a connection with (``tcp_wmem``'s usual middle value); below it a node would
send slower than with no setting at all."""


def _send_buffer(text: str) -> int:
    """A number of bytes, or ``"off"`` (``"none"``) for 0."""
    text = text.strip().lower()
    if text in ("off", "none"):
        return 0
    try:
        return int(text)
    except ValueError:
        raise ConfigError("send_buffer", f"{text!r} is neither a number of bytes nor "
                                         f"'off'") from None


def _bytes_text(value: int) -> str:
    return str(value) if value else "off"


MAX_WORKERS = 256


def _duration(name: str, text: str) -> float:
    seconds = seconds_of(text)
    if seconds is None:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(name, f"{text!r} is not a duration: give seconds (90) or "
                                    f"numbers with a unit, s, m, h or d (30s, 10m, 24h, "
                                    f"1h30m)") from None
    return float(seconds)


def _workers(text: str) -> int:
    text = text.strip().lower()
    if text == "auto":
        return os.cpu_count() or 1
    try:
        return int(text)
    except ValueError:
        raise ConfigError("workers", f"{text!r} is neither a number nor 'auto'") from None


@dataclass(frozen=True, slots=True)
class Spec:
    """How a setting is given, checked and explained: the one declaration the
    CLI options (``liveroom serve --NAME``, ``LIVEROOM_NAME``), the checks of
    :meth:`Settings.problems`, the settings table of docs/operations.md and
    deploy/liveroom.env are all made from (:mod:`liveroom.settings_docs`)."""

    help: str
    group: str
    lo: float | None = None
    """Smallest value allowed (numbers)."""
    hi: float | None = None
    choices: tuple[str, ...] = ()
    parse: Callable[[str], Any] | None = None
    """Text (a flag, an environment variable) to value, for what is not a plain
    number, string or flag; raises ``ValueError`` (or ``ConfigError``)."""
    show: Callable[[Any], str] | None = None
    """Value to the text ``parse`` takes (the default in ``--help`` and docs)."""
    flag: str = ""
    """The flag, when not ``--`` and the name with dashes."""
    default_text: str = ""
    """What the default is, when the value alone would not say it."""
    metavar: str = ""
    """The value's placeholder in ``--help``, when its type alone would not say it."""
    secret: bool = False
    many: bool = False
    """Given several times (``--ticket-key`` each; comma-separated in the env)."""
    formerly: tuple[str, ...] = ()
    """Names the setting had before (their flags and environment variables
    are still taken for one release, with a warning: :func:`take_former`)."""


def setting(default: Any, help: str, group: str, **spec: Any) -> Any:
    """A field of :class:`Settings` with its :class:`Spec`."""
    return field(default=default, metadata={"spec": Spec(help, group, **spec)})


(SERVER, IDENTITY, LISTENING, BOUNDS, HOLD, SENDS, FILTER, HOOK, WEBHOOKS, LIKES, VIP, CACHE,
 STORE, PRESENCE) = (
    "Server", "Identity and secrets", "Listening", "Bounds", "Holding polls", "Sends",
    "The word filter", "The send hook (your backend screens sends)",
    "Event webhooks (your backend hears what happens)", "Likes and gifts",
    "The vip sect", "Room cache (recvsvr)", "Store", "Presence and viewers (statsvr)")
HOOK_FAILURES = ("accept", "reject", "hold")
"""What a send gets when the send hook's backend is late or failing
(``--send-hook-failure``)."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting of a node, each declared once here: its type, default,
    range, help and (made from its name) its flag and environment variable."""

    # -- server ----------------------------------------------------------------------
    host: str = setting(
        "127.0.0.1", "Address to listen on. The default, loopback, is reached only from this "
        "machine: by the nginx of deploy/nginx.conf in front of the node, by a Prometheus "
        "beside it. A node that a load balancer or Prometheus on another host reaches listens "
        "on its private address, or on 0.0.0.0 (every interface) behind a firewall that keeps "
        "clients from going around the balancer; name the balancer in --trusted-proxies.",
        SERVER)
    port: int = setting(8080, "Port to listen on.", SERVER, lo=0, hi=65535)
    store: str = setting(
        "memory", "Where room logs live: 'memory' (embedded, one process, nothing to "
        "install), redis://HOST:PORT/DB (many processes and hosts) or "
        "redis+cluster://HOST:PORT[,HOST:PORT...] (a Redis Cluster, 7 or later).", SERVER)
    node_id: str = setting(
        "", "Stable id of this node among those sharing a store.", SERVER,
        default_text="HOST:PORT")
    workers: int = setting(
        1, "Worker processes sharing the port (SO_REUSEPORT), each a node over the store "
        "with the node id NODE-ID#1 ... NODE-ID#N; 'auto' is one per core. More than one "
        "needs a shared store (Redis). A worker that dies is restarted; /metrics on any "
        "worker sums over all of them.", SERVER, lo=1, hi=MAX_WORKERS, parse=_workers,
        show=str, metavar="N|auto")
    log_level: str = setting("info", "How much the node logs.", SERVER,
                             choices=("debug", "info", "warning", "error"))

    # -- identity and secrets ----------------------------------------------------------
    auth: str = setting(
        "open", "Who names a listener's or sender's uid: 'ticket', a ticket signed by your "
        "backend (Authorization: Bearer, or ?ticket= on polls); 'open', the request itself "
        "(demos, tests). Required with Redis.", IDENTITY, choices=AUTH_MODES,
        default_text="open with the memory store; required with Redis")
    admin_token: str | None = setting(
        None, "Bearer token of operators (also publishes). Required with Redis (the same "
        "on every node); with the memory store made up and printed if unset.", IDENTITY,
        secret=True)
    publisher_token: str | None = setting(
        None, "Bearer token the business backend uses for important messages. Required "
        "with Redis; with the memory store made up and printed if unset.", IDENTITY,
        secret=True)
    secret: str | None = setting(
        None, "Key that signs listener contexts; every node must share it. Required with "
        "Redis; made up if unset with the memory store.", IDENTITY, secret=True)
    ticket_keys: tuple[str, ...] = setting(
        (), "HS256 key tickets are signed with, at least 32 bytes; repeat it (or "
        "comma-separate the env var) to accept several while rotating (the first signs). "
        "Required with --auth ticket.", IDENTITY, flag="--ticket-key", secret=True, many=True)
    ticket_leeway: float = setting(
        5.0, "Seconds of clock skew allowed on a ticket's exp (and nbf).", IDENTITY, lo=0,
        hi=300)
    metrics_token: str | None = setting(
        None, "Bearer token that reads /metrics; unset, /metrics needs the admin token.",
        IDENTITY, secret=True)
    metrics_public: bool = setting(
        False, "/metrics answers anybody (when the network keeps it private).", IDENTITY)

    # -- listening -----------------------------------------------------------------------
    poll_timeout: float = setting(
        25.0, "Seconds a poll is held when it does not say (its timeout parameter).",
        LISTENING, lo=1, hi=3600)
    poll_timeout_max: int = setting(
        60, "Longest timeout a poll may ask for, in seconds.", LISTENING, lo=1, hi=3600)
    recent_default: int = setting(
        20, "Recent normal messages a first poll gets when it does not say.", LISTENING,
        lo=0)
    recent_max: int = setting(100, "Most recent messages a first poll may ask for.",
                              LISTENING, lo=0, hi=10_000)
    answer_limit: int = setting(
        500, "Normal messages per answer; the rest of a backlog is counted in gap.",
        LISTENING, lo=1, hi=100_000)
    max_message_bytes: int = setting(
        4096, "Largest message body, measured as JSON.", LISTENING, lo=16, hi=1 << 20)
    request_timeout: float = setting(
        10.0, "Seconds a client has to send a request's body once its head arrived "
        "(else 408).", LISTENING, lo=0.1, hi=60)
    header_timeout: float = setting(
        10.0, "Seconds a client has to send a request's head once it began (a slow "
        "client is cut off: slowloris).", LISTENING, lo=0.1, hi=60)
    keepalive_timeout: float = setting(
        15.0, "Seconds an idle keep-alive connection stays open.", LISTENING, lo=0.1,
        hi=300)
    write_timeout: float = setting(
        30.0, "Seconds a client has to take the answers written to it (the connection's "
        "unsent bytes back under the low-water mark, or all sent once it closes); a client "
        "that does not read is cut off and what it held is freed.", LISTENING, lo=0.1,
        hi=600)
    shutdown_grace: float = setting(
        5.0, "Seconds requests in progress get to finish when the node stops (SIGTERM, "
        "SIGINT); held polls are answered at once.", LISTENING, lo=0, hi=600)

    # -- bounds --------------------------------------------------------------------------
    answer_bytes_max: int = setting(
        256 * 1024, "Bytes of messages in one poll answer (and in a first poll's recent "
        "ones); what does not fit stays pending and comes in the next answer.", BOUNDS,
        lo=1024)
    send_buffer: int = setting(
        SEND_BUFFER, "Bytes of kernel send buffer each client connection may fill (SO_SNDBUF "
        "on every accepted socket). Linux doubles it for its bookkeeping and caps it at "
        "net.core.wmem_max; the default takes the largest answer of the default "
        "--answer-bytes-max in one go. It bounds what a client that asks for answers and "
        "never reads holds of the host's TCP memory until --write-timeout cuts it; it also "
        "bounds how fast one connection sends (about this much per round trip). 'off' "
        "leaves the kernel to grow it, up to net.ipv4.tcp_wmem's largest (4 MiB: 1 000 "
        "such clients can push the whole host past its TCP memory pressure mark).",
        BOUNDS, lo=0, parse=_send_buffer, show=_bytes_text, metavar="BYTES|off")
    holds_per_listener: int = setting(
        4, "Polls held at once per room and uid; a newer one answers the oldest at once, "
        "empty (a reconnecting client never waits on its own ghost).", BOUNDS, lo=1)
    holds_per_uid: int = setting(
        16, "Polls held at once per uid over all rooms; a newer one answers the oldest at "
        "once, empty.", BOUNDS, lo=1)
    held_max: int = setting(
        0, "Polls this node holds at once; beyond, 503 with Retry-After. 0: the open-file "
        "limit (raised to its hard limit at start) less a reserve.", BOUNDS, lo=0)
    connections_max: int = setting(
        0, "Connections this node keeps open at once; at the cap, one without a valid "
        "request yet (else one idle on aiohttp: a keep-alive to /healthz, say) is closed to "
        "make room, and when none is, one more is answered 503 with Retry-After and closed. "
        "0: the open-file limit less a reserve of 1 % (at least 64).", BOUNDS, lo=0)
    connections_per_ip: int = setting(
        256, "Connections this node keeps open at once from one client address (an IPv6 "
        "client: its /64); at the cap, one of its own makes room as at --connections-max, "
        "and when none may, one more is answered 503 with Retry-After and closed. Clients "
        "behind one NAT share it. 0: no limit.", BOUNDS, lo=0)
    trusted_proxies: tuple[str, ...] = setting(
        LOOPBACK, "Addresses or networks (CIDR) of your load balancers: only on their "
        "connections is the client's address (for --connections-per-ip) taken from "
        "X-Forwarded-For, and their own address is never capped. Repeat it (or "
        "comma-separate the env var) for several; 'none' for no proxy. The default is a "
        "proxy on the node's own machine (deploy/nginx.conf).", BOUNDS, many=True,
        metavar="ADDRESS[/BITS]", show=",".join)
    rooms_max: int = setting(
        ROOMS_MAX, "Rooms each sect's cache holds at most (past this many that exist with "
        "held polls, a poll for a new room gets 503); the least recently read is evicted "
        "first, never one with held polls. Rooms that do not exist with held polls count "
        "apart (bounded by --held-max): made-up names never take a real room's place. A "
        "cached room that does not exist costs about 1.3 KiB.",
        BOUNDS, lo=1)

    # -- holding polls ---------------------------------------------------------------------
    tiers: tuple[Tier, ...] = setting(
        DEFAULT_TIERS, "The adaptive hold: ONLINE:INTERVAL[+JITTER] (seconds), "
        "comma-separated. From ONLINE listeners on, each listener gets at most one "
        "non-empty answer per INTERVAL (+ up to JITTER); 'off' for plain long polls.",
        HOLD, parse=parse_tiers, show=_tiers_text)
    hold_tick: float = setting(
        0.2, "Seconds between two room-wide releases of held polls in a tiered room.",
        HOLD, lo=0.05, hi=1.0)
    cut_through_every: float = setting(
        0.5, "Important messages release a tiered room's held polls at most this often "
        "(seconds).", HOLD, lo=0.05, hi=10)
    news_every: float = setting(
        1.0, "Seconds between two answers a room's held polls get for its news alone: a new "
        "likes total, new top givers, slow mode turned on, off or changed. A change is told "
        "within --hold-tick of the node learning it, to the held polls with nothing pending "
        "(an answer like a timeout's: the same cursors, no messages), then at most once per "
        "this period, or per the room's tier's interval plus jitter when that is longer: "
        "bigger rooms are told less often.", HOLD, lo=0.1, hi=60)
    hold_interval_max: float = setting(
        10.0, "The longest interval (plus jitter) a tier may give, in seconds.", HOLD,
        lo=0, hi=60)

    # -- sends -----------------------------------------------------------------------------
    rate_limits: RateLimits = setting(
        DEFAULT_RATE_LIMITS, "Sends allowed per uid in a room: LIMIT/[N]UNIT windows (UNIT "
        "s, m, h or d), comma-separated, all enforced; 'off' for none.", SENDS,
        parse=_rate_limits, show=lambda r: _windows_text(r.per_uid))
    room_rate_limit: int = setting(
        0, "Sends accepted per second in one room, all senders together (0: off).",
        SENDS, lo=0)
    rooms_per_uid: tuple[Window, ...] = setting(
        ROOMS_PER_UID, "New rooms a uid's sends may create on this node: LIMIT/[N]UNIT "
        "windows; past them its sends still reach rooms that exist (429 for a new one); "
        "'off' for none. The backend's tokens are not limited.", SENDS,
        parse=parse_windows, show=_windows_text)
    rooms_per_address: tuple[Window, ...] = setting(
        ROOMS_PER_ADDRESS, "New rooms the sends of one client address (an IPv6 one by its "
        "/64) may create on this node, all its uids together: LIMIT/[N]UNIT windows, below "
        "--rooms-per-node so that one client cannot use up the node's window; 'off' for "
        "none. Behind a proxy of --trusted-proxies the client is the one X-Forwarded-For "
        "names (as for --connections-per-ip, which must be on for it); behind another, every "
        "client has the proxy's address: raise it to --rooms-per-node there.", SENDS,
        parse=parse_windows, show=_windows_text)
    rooms_per_node: tuple[Window, ...] = setting(
        ROOMS_PER_NODE, "New rooms all sends together may create on this node: "
        "LIMIT/[N]UNIT windows (a backstop: --rooms-per-address keeps one client from "
        "using it up); 'off' for none.", SENDS, parse=parse_windows,
        show=_windows_text)
    recall_window: float = setting(
        120.0, "Seconds after sending a message during which its sender may recall it "
        "(DELETE /v1/rooms/ROOM/messages/SEQ with its ticket, or its uid in open mode); "
        "moderators and the backend recall any message the room keeps.", SENDS, lo=0,
        hi=86_400)
    review_max: int = setting(
        REVIEW_MAX, "Messages a room's review queue holds at most (sends a word filter or the "
        "send hook held for a moderator, GET /v1/admin/rooms/ROOM/review): one more drops "
        "the oldest, counted in liveroom_review_dropped_total and logged. As many decisions "
        "are remembered besides, so a repeated approval answers the same. Held messages "
        "expire --room-ttl after the room's last hold or decision.", SENDS, lo=1,
        hi=100_000)

    # -- the word filter ---------------------------------------------------------------------
    filter_lists_max: int = setting(
        16, "Word lists the filter holds at most, global and per room together (PUT "
        "/v1/admin/filters/NAME, liveroom filters put): one more is refused (409) until one "
        "is deleted. Every node keeps each list's automaton in memory (about 3 MB for "
        "10 000 words of 2 to 10 characters, up to 8 MB for 10 000 of 32), and a send "
        "pays about 0.8 µs for each list that applies to its room. The same on every "
        "node: the node a list is put through checks it.", FILTER, lo=1, hi=1000)
    filter_words_max: int = setting(
        10_000, "Words one list holds at most.", FILTER, lo=10_000, hi=100_000)
    filter_word_chars: int = setting(
        32, "Characters one word has at most (as written, before it is folded).", FILTER,
        lo=1, hi=256)
    # -- the send hook ------------------------------------------------------------------------
    send_hook: str = setting(
        "", "URL your backend screens sends at (http or https): every send but the backend's "
        "own tokened ones (a viewer's chat; a ticket's important and personal sends) is "
        "POSTed there, signed, in batches, before it is stored; the backend answers accept "
        "(its body maybe replaced, an extra attached), reject (403 to the sender) or hold "
        "(the review queue). Empty: no hook. docs/api.md, \"The send hook\".", HOOK,
        metavar="URL")
    send_hook_secret: str | None = setting(
        None, "Key the send hook's calls are signed with (Liveroom-Signature: HMAC-SHA256), "
        "at least 32 bytes; required with --send-hook unless --webhook-secret is given "
        "(then that one signs the hook's calls too).", HOOK, secret=True,
        default_text="--webhook-secret")
    send_hook_timeout: float = setting(
        1.0, "Seconds a send waits for the backend's verdict, its wait for a call included; "
        "past them --send-hook-failure decides, and the call is given up.", HOOK, lo=0.01,
        hi=30)
    send_hook_failure: str = setting(
        "accept", "What a send gets when the backend is late, fails, or its circuit is open: "
        "accept (stored as sent), reject (503 send_hook_unavailable, with Retry-After) or "
        "hold (the room's review queue, 202).", HOOK, choices=HOOK_FAILURES)
    send_hook_batch: int = setting(
        64, "Sends one call carries at most: sends that arrive while calls are in flight, or "
        "in the same turn of the event loop, go together in the next call; 1: a call a "
        "send.", HOOK, lo=1, hi=1000)
    send_hook_calls: int = setting(
        8, "Calls to the backend in flight at once (and keep-alive connections kept to it): "
        "a full batch leaves at once while fewer are in flight.", HOOK, lo=1, hi=256)
    send_hook_extra_bytes: int = setting(
        1024, "Largest extra (a JSON object, measured as JSON) the backend may attach to a "
        "message; a bigger one counts as a failed verdict for its message.", HOOK, lo=2,
        hi=65_536)
    send_hook_trip: int = setting(
        5, "Failed calls in a row (errors, timeouts, answers that are not a verdict per "
        "message) that open the send hook's circuit: then no call is made and "
        "--send-hook-failure applies at once, said in /healthz, the metrics and the log.",
        HOOK, lo=1, hi=1000)
    send_hook_cooldown: float = setting(
        5.0, "Seconds an open circuit waits before one trial call; a trial that succeeds "
        "closes it, one that fails opens it again.", HOOK, lo=0.05, hi=600)

    # -- event webhooks ----------------------------------------------------------------------
    webhook: str = setting(
        "", "URL your backend takes the rooms' events at (http or https): broadcast started "
        "and ended, messages recalled, held, approved and denied, uids muted, banned and "
        "unbanned, sects changed, big gifts. Each is written to the store's outbox with its "
        "action and POSTed, signed, by one node at a time, until a 2xx answer, for "
        "--webhook-retry-for; then kept as failed (liveroom webhooks failed, replay). The "
        "memory store's outbox is in the process: a restart loses what it holds. Empty: no "
        "webhooks. docs/api.md, \"Webhooks\".", WEBHOOKS, metavar="URL")
    webhook_secret: str | None = setting(
        None, "Key the webhooks are signed with (Liveroom-Signature: HMAC-SHA256), at least "
        "32 bytes; required with --webhook. Also signs the send hook's calls unless "
        "--send-hook-secret is given.", WEBHOOKS, secret=True)
    webhook_retry_for: float = setting(
        86_400.0, "How long an event is retried (with backoff, from 0.5 s doubling to at "
        "most 5 min, jittered) before it is given up and kept as failed: seconds, or a "
        "duration (30m, 24h, 2d).", WEBHOOKS, lo=0.1, hi=30 * 86_400,
        parse=lambda text: _duration("webhook_retry_for", text),
        show=lambda value: duration_text(int(value)))
    webhook_gift_min: int = setting(
        1, "A gift worth at least this much is a gift.given event; 0: no gift is.", WEBHOOKS,
        lo=0, hi=10**12)
    webhook_timeout: float = setting(
        10.0, "Seconds the backend has to answer one event's POST (past them, a failed "
        "attempt, retried).", WEBHOOKS, lo=0.1, hi=300)
    webhook_lease: float = setting(
        10.0, "Seconds the node delivering the events holds its lease in the store between "
        "renewals (the holder renews it about 5 times a second; the others ask for it every "
        "third of it): when that node dies, another takes the outbox over within about 1⅓ "
        "times this long and delivers what the dead one had not.", WEBHOOKS,
        lo=0.3, hi=600)

    # -- likes and gifts ---------------------------------------------------------------------
    likes_flush: float = setting(
        0.25, "Seconds between two writes of this node's likes to the store, all rooms "
        "in one round trip (one add per room): a crash loses at most this long of "
        "acknowledged taps.", LIKES, lo=0.01, hi=10)
    likes_requests: tuple[Window, ...] = setting(
        LIKE_REQUESTS, "Like requests (each up to 100 taps) allowed per uid on this node: "
        "LIMIT/[N]UNIT fixed windows; 'off' for none.", LIKES, parse=parse_windows,
        show=_windows_text, formerly=("like_requests",))
    likes_taps: tuple[Window, ...] = setting(
        LIKE_TAPS, "Taps allowed per uid on this node: LIMIT/[N]UNIT fixed windows; 'off' "
        "for none.", LIKES, parse=parse_windows, show=_windows_text,
        formerly=("like_taps",))
    likes_rooms_max: int = setting(
        10_000, "Rooms whose taps may wait for the store on this node: those tapped "
        "since the last --likes-flush, and any the store has not taken yet (it was "
        "unavailable); a tap for one more is refused (503).", LIKES, lo=1)
    likes_uids_max: int = setting(
        200_000, "Uids whose like windows this node keeps at once (those seen in the last "
        "two of the longest window): one more evicts a uid not seen in this window if "
        "there is one, else the newest of this window (who then starts its windows "
        "afresh); nobody is refused.", LIKES, lo=1)
    gift_important: int = setting(
        0, "A gift worth at least this much also goes out as an important message of "
        "its giver ({\"gift\", \"value\"}), ahead of the chat; 0: none.", LIKES, lo=0,
        hi=10**12)

    # -- the vip sect ------------------------------------------------------------------------
    vip_refresh: float = setting(
        2.0, "Seconds between two reads of the rooms' sects: a room moved through another "
        "node (or by the automatic rule) moves here within this time; the rule runs as "
        "often.", VIP, lo=0.1, hi=60)
    auto_vip: str = setting(
        "on", "Move rooms between the normal and the vip sect by their count of trusted "
        "listeners (--vip-promote, --vip-demote): with --auth ticket every listener; in "
        "open mode a uid once it comes back with the ctx its answer carried (made-up "
        "first polls count online, not here). A pinned room stays where it is pinned.",
        VIP,
        choices=("on", "off"))
    vip_promote: int = setting(
        50_000, "Trusted listeners (--auto-vip) at or above which a room joins the vip "
        "sect, once it stays there for --vip-promote-after.", VIP, lo=1)
    vip_promote_after: float = setting(
        60.0, "Seconds a room stays at or above --vip-promote before it joins the vip "
        "sect.", VIP, lo=0)
    vip_demote: int = setting(
        20_000, "Trusted listeners (--auto-vip) below which a vip room goes back to the "
        "normal sect, once it stays there for --vip-demote-after (at most --vip-promote). "
        "In open mode a poll's ctx is checked for it in rooms with this many online.",
        VIP, lo=0)
    vip_demote_after: float = setting(
        600.0, "Seconds a vip room stays below --vip-demote before it leaves the vip "
        "sect.", VIP, lo=0)
    vip_settle: float = setting(
        600.0, "Seconds after the automatic rule moved a room during which it does not move "
        "it again: at most one automatic move per room per this period, whatever its "
        "count does (a count pushed up and let fall cannot toggle a room). An operator's "
        "move gives the room back to the rule at once.",
        VIP, lo=0)
    vip_spread: int = setting(
        64, "Routing hints of a vip room: its answers carry \"spread\": K (0 to N-1, "
        "stable per listener), which clients echo as ?spread=K so a load balancer hashing "
        "room and hint spreads the room over up to N nodes; 1: no hint.", VIP, lo=1,
        hi=4096)

    # -- the room cache (recvsvr) ----------------------------------------------------------
    normal_keep: int = setting(NORMAL_KEEP, "Newest normal messages each room's cache "
                               "keeps.", CACHE, lo=1)
    important_keep: int = setting(IMPORTANT_KEEP, "Important messages kept at least (by "
                                  "count) per room, in the cache and the store.", CACHE,
                                  lo=1)
    important_window: float = setting(
        IMPORTANT_WINDOW, "Seconds for which important messages are kept at least.",
        CACHE, lo=0)
    personal_hard_cap: int = setting(
        PERSONAL_HARD_CAP, "Personal messages (\"to\": uid) kept at most per room, the "
        "newest, in the cache and the store; within it they are kept like important ones "
        "(--important-keep at least, and --important-window seconds). Every node serving "
        "the room caches them all (see --personal-node-cap for what each costs).",
        CACHE, lo=1)
    personal_node_cap: int = setting(
        PERSONAL_NODE_CAP, "Personal messages a node holds at most, all its rooms together "
        "(its cache, and the memory engine's store, each): past it the node drops the "
        "oldest, whatever --important-keep and --important-window (listeners count them "
        "in pgap). With a small body each costs 480 to 820 bytes in the cache, and about "
        "500 more in the memory engine's store: 2 000 000 is 1 to 1.6 GB on a Redis node, "
        "2 to 2.7 GB on the memory engine.",
        CACHE, lo=1)
    index_keep: int = setting(
        INDEX_KEEP, "Important positions remembered for exact counting beyond the lists.",
        CACHE, lo=1)
    fallback_pull_interval: float = setting(
        FALLBACK_INTERVAL, "Seconds between two fallback pulls of a room that is read "
        "(they cover lost notifies).", CACHE, lo=0.05, hi=60)
    read_window: float = setting(
        READ_WINDOW, "Seconds a cached room nobody reads stays in memory (one with held "
        "polls stays); the fallback pull covers only rooms with held polls or read in the "
        "last two fallback intervals.", CACHE, lo=1)
    pull_batch: int = setting(PULL_BATCH, "Rooms per store read of the normal sect.",
                              CACHE, lo=1)
    pull_concurrency: int = setting(PULL_CONCURRENCY, "Store reads in flight of the "
                                    "normal sect.", CACHE, lo=1)
    vip_pull_batch: int = setting(
        16, "Rooms per store read of the vip sect (few rooms, each hot: a storm in a vip "
        "room waits for these workers only).", CACHE, lo=1)
    vip_pull_concurrency: int = setting(2, "Store reads in flight of the vip sect.", CACHE,
                                        lo=1)
    touch_interval: float = setting(
        TOUCH_INTERVAL, "Seconds between two pushes of the read rooms' expiry to the "
        "store (at most a quarter of --room-ttl).", CACHE, lo=1)
    first_pull_timeout: float = setting(
        FIRST_PULL_TIMEOUT, "Longest a poll waits for the first pull of its room (then "
        "503 with Retry-After).", CACHE, lo=0.1, hi=60)

    # -- the store -----------------------------------------------------------------------
    log_cap: int = setting(LOG_CAP, "Messages kept per room log in the store (important "
                           "ones are kept beyond it for their retention).", STORE, lo=100)
    room_ttl: float = setting(ROOM_TTL, "Seconds without a send or a read after which a "
                              "room's log expires.", STORE, lo=60)
    empty_room_ttl: float = setting(
        EMPTY_ROOM_TTL, "Seconds a room created without a message (a vip add, or one "
        "sender's send nobody else read) lives: reads do not extend it; a message from a "
        "second sender, a read by another uid, or an operator's start extends it to "
        "--room-ttl.", STORE,
        lo=1)
    dedup_ttl: float = setting(DEDUP_TTL, "Seconds a client_msg_id is remembered (a "
                               "repeated send answers the first one's seq).", STORE, lo=0.1)
    durable_replicas: int = setting(
        0, "Replicas a message must reach (Redis WAIT) before its send is answered 201; "
        "short of them within --durable-timeout, 503. With 1 or more, a failover loses no "
        "acknowledged message. 0: acknowledged once the master stored it.", STORE, lo=0,
        hi=16)
    durable_timeout: float = setting(1.0, "Seconds a send waits for --durable-replicas.",
                                     STORE, lo=0.01, hi=30)

    # -- presence and viewers (statsvr) ----------------------------------------------------
    online_ttl: float = setting(
        ONLINE_TTL, "Seconds without a poll after which a listener is offline; must "
        "exceed the longest poll timeout plus the longest hold interval.", PRESENCE, lo=1)
    vip_shards: int = setting(VIP_SHARDS, "Shard keys a vip room's online list is split "
                              "over, per statsvr node.", PRESENCE, lo=1, hi=256)
    viewers_threshold: int = setting(
        VIEWERS_THRESHOLD, "Distinct viewers of a room counted exactly; beyond, a "
        "HyperLogLog estimates them (viewers_exact: false).", PRESENCE, lo=0)
    history_ttl: float = setting(
        HISTORY_TTL, "Seconds a room's viewers history (and an ended broadcast's) is kept "
        "after its last viewer; its likes and gift counters after their last write; its "
        "moderation after its last action (longer while a mute or ban lasts).",
        PRESENCE, lo=60)
    heartbeat_flush: float = setting(0.25, "Seconds between two hand-overs of the "
                                     "batched heartbeats to statsvr.", PRESENCE, lo=0.01,
                                     hi=10)
    stats_write_every: float = setting(1.0, "Seconds between two writes of changed "
                                       "online shards.", PRESENCE, lo=0.05, hi=60)
    merge_every: float = setting(1.0, "Seconds between two merges of every node's "
                                 "shards into a room's online view.", PRESENCE, lo=0.05,
                                 hi=60)

    def __post_init__(self) -> None:
        if self.room_rate_limit and self.rate_limits.room_per_second != self.room_rate_limit:
            # Two settings, one rule: the room's cap rides on the sender limits.
            object.__setattr__(self, "rate_limits", RateLimits(
                self.rate_limits.per_uid, self.room_rate_limit))
        if self.trusted_proxies in (("none",), ("off",)):
            object.__setattr__(self, "trusted_proxies", ())
        found = self.problems()
        if found:
            raise ConfigError.of(found)

    def problems(self) -> list[ConfigError]:
        """Every setting that cannot run, each with its reason (empty: none):
        the ranges and choices of the declarations, then the rules between
        settings."""
        found: list[ConfigError] = []
        for f in fields(self):
            spec: Spec = f.metadata["spec"]
            value = getattr(self, f.name)
            if spec.choices and value not in spec.choices:
                found.append(ConfigError(f.name, f"{f.name} must be one of "
                                                 f"{', '.join(spec.choices)}, not {value!r}"))
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            low = spec.lo is not None and value < spec.lo
            if low or (spec.hi is not None and value > spec.hi):
                found.append(ConfigError(f.name, f"{f.name} must be {_range(spec)}, "
                                                 f"not {value:g}"))
        if self.auth == "ticket" and not self.ticket_keys:
            found.append(ConfigError("ticket_keys",
                                     "auth 'ticket' needs at least one ticket key"))
        if any(len(key.encode()) < TICKET_KEY_MIN for key in self.ticket_keys):
            found.append(ConfigError("ticket_keys",
                                     f"a ticket key must be at least {TICKET_KEY_MIN} bytes "
                                     f"(HS256 with a shorter key can be brute-forced)"))
        found += self._send_hook_problems()
        found += self._webhook_problems()
        if self.metrics_token is not None and not self.metrics_token:
            found.append(ConfigError("metrics_token", "metrics_token must not be empty"))
        if self.poll_timeout > self.poll_timeout_max:
            found.append(ConfigError("poll_timeout", f"poll_timeout ({self.poll_timeout:g} s) "
                                     f"exceeds poll_timeout_max ({self.poll_timeout_max} s)"))
        if 0 < self.send_buffer < SEND_BUFFER_MIN:
            found.append(ConfigError("send_buffer", f"send_buffer must be 0 (off) or at "
                                     f"least {SEND_BUFFER_MIN} bytes, not {self.send_buffer}"))
        if self.recent_default > self.recent_max:
            found.append(ConfigError("recent_default", "recent_default exceeds recent_max"))
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
        if self.vip_demote > self.vip_promote:
            found.append(ConfigError("vip_demote", f"vip_demote ({self.vip_demote}) exceeds "
                                     f"vip_promote ({self.vip_promote})"))
        for proxy in self.trusted_proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                found.append(ConfigError("trusted_proxies", f"{proxy!r} is neither an "
                                         "address nor a network (ADDRESS[/BITS])"))
        if self.durable_replicas and not self.shared_store:
            found.append(ConfigError("durable_replicas", "durable_replicas needs the redis "
                                     "engine: the memory engine has no replicas"))
        if self.workers > 1 and not self.shared_store:
            found.append(ConfigError("workers", (
                f"{self.workers} workers need a store they can share: the memory store "
                f"lives inside one process (use --store redis://HOST:PORT/DB, or "
                f"--workers 1)")))
        return found

    def _send_hook_problems(self) -> list[ConfigError]:
        """The send hook's URL and secret, when a hook is set."""
        found: list[ConfigError] = []
        secret = self.send_hook_secret
        if secret is not None and len(secret.encode()) < SECRET_MIN:
            found.append(ConfigError("send_hook_secret", f"send_hook_secret must have at "
                                     f"least {SECRET_MIN} bytes (`liveroom secrets` makes one)"))
        if not self.send_hook:
            return found
        if not _is_http_url(self.send_hook):
            found.append(ConfigError("send_hook", f"send_hook must be an http:// or https:// "
                                     f"URL, not {self.send_hook!r}"))
        if not self.hook_secret:
            found.append(ConfigError("send_hook_secret", "a send hook needs send_hook_secret "
                                     "or webhook_secret (its calls are signed; `liveroom "
                                     "secrets` makes one)"))
        return found

    def _webhook_problems(self) -> list[ConfigError]:
        """The webhooks' URL and secret, when webhooks are set."""
        found: list[ConfigError] = []
        secret = self.webhook_secret
        if secret is not None and len(secret.encode()) < SECRET_MIN:
            found.append(ConfigError("webhook_secret", f"webhook_secret must have at least "
                                     f"{SECRET_MIN} bytes, not {len(secret.encode())} "
                                     f"(`liveroom secrets` makes one)"))
        if not self.webhook:
            return found
        if not _is_http_url(self.webhook):
            found.append(ConfigError("webhook", f"webhook must be an http:// or https:// URL, "
                                     f"not {self.webhook!r}"))
        if not secret:
            found.append(ConfigError("webhook_secret", "webhooks need webhook_secret (each "
                                     "event is signed; `liveroom secrets` makes one)"))
        return found

    @property
    def hook_secret(self) -> str | None:
        """The key the send hook's calls are signed with: ``send_hook_secret``,
        else ``webhook_secret``."""
        return self.send_hook_secret or self.webhook_secret

    def vip_rule(self) -> VipRule | None:
        """The automatic vip rule these settings ask for (``None``: off)."""
        if self.auto_vip == "off":
            return None
        return VipRule(self.vip_promote, self.vip_promote_after, self.vip_demote,
                       self.vip_demote_after, self.vip_settle)

    @property
    def shared_store(self) -> bool:
        """The store is shared by processes (Redis), not one process's memory."""
        return is_shared(self.store)

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

    def filter_limits(self) -> FilterLimits:
        """What the store takes of the word filter's lists."""
        from .store.base import FilterLimits

        return FilterLimits(self.filter_lists_max, self.filter_words_max,
                            self.filter_word_chars)

    def log_policy(self) -> LogPolicy:
        from .store.base import LogPolicy  # the store's base imports these defaults

        return LogPolicy(
            log_cap=self.log_cap,
            important_keep=self.important_keep,
            important_window_ms=int(self.important_window * 1000),
            personal_hard_cap=self.personal_hard_cap,
            personal_node_cap=self.personal_node_cap,
            room_ttl_ms=int(self.room_ttl * 1000),
            empty_room_ttl_ms=int(self.empty_room_ttl * 1000),
            dedup_ttl_ms=int(self.dedup_ttl * 1000),
            durable_replicas=self.durable_replicas,
            durable_timeout_ms=int(self.durable_timeout * 1000),
            history_ttl_ms=int(self.history_ttl * 1000),
            review_max=self.review_max,
        )


def _is_http_url(url: str) -> bool:
    scheme, _, rest = url.partition("://")
    return scheme.lower() in ("http", "https") and bool(rest) and not rest.startswith("/")


def _range(spec: Spec) -> str:
    if spec.lo is not None and spec.hi is not None:
        return f"between {spec.lo:g} and {spec.hi:g}"
    return f"at least {spec.lo:g}" if spec.lo is not None else f"at most {spec.hi:g}"


def weak_secrets(values: dict[str, str | None]) -> list[str]:
    """What makes the secrets in ``values`` guessable or confusable, one
    sentence each: over a shared store every token and the secret have at
    least :data:`SECRET_MIN` bytes, and the admin and publisher tokens differ
    (else a publisher could act as an operator)."""
    problems = [f"{flag_of(name)} has {len(value.encode())} bytes: give at "
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


def declared() -> list[tuple[str, Spec, Any]]:
    """Every setting in declaration order: its name, spec and default."""
    return [(f.name, f.metadata["spec"], f.default) for f in fields(Settings)]


DEFAULTS = Settings()
"""Every setting at its declared default: where a role's class built without a
:class:`Settings` (tests, benchmarks) takes a setting's default, so that it is
written once, in its declaration (``stats_write_every=DEFAULTS.stats_write_every``)."""

SECRETS = tuple(name for name, spec, _ in declared() if spec.secret)
"""The settings that are secrets (``liveroom secrets`` makes them all)."""
SECRET_SETTINGS = tuple(name for name in SECRETS
                        if not Settings.__dataclass_fields__[name].metadata["spec"].many)
"""The secrets of one value each, shared by every node (``ticket_keys`` aside)."""


def is_shared(store: str) -> bool:
    """Whether the store URL names a store processes share (Redis), not one
    process's memory."""
    return store.strip() not in ("memory", "memory://")


def flag_of(name: str) -> str:
    spec: Spec = Settings.__dataclass_fields__[name].metadata["spec"]
    return spec.flag or dashed(name)


def dashed(name: str) -> str:
    """A setting's name as a flag spells it: ``--name-with-dashes`` (a former
    name's too, which has no declaration of its own)."""
    return "--" + name.replace("_", "-")


ENV_PREFIX = "LIVEROOM_"
"""Of every setting's environment variable (:func:`env_of`), and of the CLI
clients' own (``LIVEROOM_URL``...), which name no setting."""


def env_of(name: str) -> str:
    """The environment variable of setting ``name``: ``LIVEROOM_NAME``."""
    return ENV_PREFIX + name.upper()


def default_text(name: str) -> str:
    """A setting's default as its flag would take it (or as the spec says it)."""
    field_ = Settings.__dataclass_fields__[name]
    spec: Spec = field_.metadata["spec"]
    if spec.default_text:
        return spec.default_text
    value = field_.default
    if spec.show is not None:
        return spec.show(value)
    if value is None or value == ():
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return str(value)


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def _convert(name: str, given: Any) -> Any:
    """The value of setting ``name`` from what a flag or the environment gave."""
    spec: Spec = Settings.__dataclass_fields__[name].metadata["spec"]
    kind = _HINTS[name]
    if spec.many:
        items = given if isinstance(given, tuple | list) else str(given).split(",")
        return tuple(item.strip() for item in items if item.strip())
    if isinstance(given, bool) or kind is bool:
        if isinstance(given, bool):
            return given
        text = str(given).strip().lower()
        if text not in _TRUE + _FALSE:
            raise ConfigError(name, f"{name} is a flag: give 1 or 0, not {given!r}")
        return text in _TRUE
    text = str(given).strip()
    try:
        if spec.parse is not None:
            return spec.parse(text)
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
    except ConfigError:
        raise
    except ValueError as exc:
        what = {int: "a whole number", float: "a number"}.get(kind)
        raise ConfigError(name, f"{text!r} is not {what}" if what else str(exc)) from None
    if kind == (str | None):
        return text or None
    return text


FORMER_SUFFIX = "__former"
"""Where a setting's former name's value waits in what flags gave
(``like_requests__former``), until :func:`take_former` folds it in."""


def former_names() -> list[tuple[str, str]]:
    """``(setting, former name)`` of every setting renamed within a release."""
    return [(name, old) for name, spec, _ in declared() for old in spec.formerly]


def take_former(given: dict[str, Any]) -> list[str]:
    """Fold the values given under former names (flags and environment
    variables a renamed setting still takes for one release) into ``given``,
    in place: a value under the new name wins. One warning each, to say."""
    warnings = []
    for name, old in former_names():
        value = given.pop(old + FORMER_SUFFIX, None)
        if value is None or value == ():
            continue
        new_flag, old_flag = flag_of(name), dashed(old)
        warnings.append(f"{old_flag} and {env_of(old)} are deprecated and go "
                        f"in the next release: use {new_flag} ({env_of(name)})")
        if given.get(name) in (None, ()):
            given[name] = value
    return warnings


def settings_from(given: dict[str, Any]) -> tuple[Settings | None, list[ConfigError]]:
    """Settings from what flags and the environment gave (``None``: not given,
    the default holds), with every problem at once: values that do not parse,
    then whatever :meth:`Settings.problems` finds in the rest."""
    values: dict[str, Any] = {}
    found: list[ConfigError] = []
    for name, raw in given.items():
        if raw is None or raw == ():  # () : a repeatable flag not given
            continue
        try:
            values[name] = _convert(name, raw)
        except ConfigError as exc:
            found.append(exc)
    try:
        return Settings(**values), found
    except ConfigError as exc:
        return None, found + list(exc.problems)


_HINTS = typing.get_type_hints(Settings)
