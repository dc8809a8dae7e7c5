"""Every Redis key and channel name liveroom uses, built in one place.

All keys of one room share the hash tag ``{room}`` so a Redis Cluster keeps them
in one slot (the append script touches several of them at once, and so do the
statsvr scripts), with one exception: the shard keys of a room split into
several shards (a vip room) carry the tag ``{room:index}``, so a huge room's
presence spreads over the cluster instead of loading one slot (``:`` is not in
any room name, so no room's own tag collides with them).

=======================  =====  ==============================================
key                      type   holds
=======================  =====  ==============================================
lr:{R}:meta              hash   ``epoch``, ``seq`` (head), ``ic`` (important count),
                                ``ps`` (the personal sequence's newest position),
                                ``root`` (the broadcast's first epoch), ``was``
                                (its renewed epochs, space-separated, the
                                newest ``RENEWALS_KEPT``)
lr:{R}:log               stream the log: id ``<seq>-0``, fields ``m`` (packed
                                message) and ``c`` (important count at it)
lr:{R}:imp               stream important entries kept beyond the log cap
lr:{R}:rc                hash   recalled messages: seq -> msgpack ``[uid,
                                important, ts, ic]`` (their tombstone; the
                                message left ``log`` and ``imp``); a personal
                                one's ``p<position>`` -> ``[uid, true, ts, 0,
                                to, n]`` (it left ``pm``)
lr:{R}:pm                stream personal messages: id ``<ps>-0``, fields ``m``,
                                ``n`` (the addressee's ordinal), ``t`` (ts, ms)
lr:{R}:pn                hash   addressee uid -> its ordinal in the room
lr:{R}:cmid:<id>         string seq of a client_msg_id's first send (10 min)
lr:{R}:pcmid:<id>        string the same for a personal message (its position)
lr:{R}:rl:<uid>          hash   the uid's accepted sends in the room, per rate
                                window bucket: field ``<seconds>:<bucket>``
                                -> count (see :mod:`liveroom.ratelimit`)
lr:{R}:rr                hash   the same for the room's cap (all senders)
lr:notify                channel "<seq> <room>" after every append (one Redis)
lr:{R}:n                 sh.ch. the same for one room, on Redis Cluster: a
                                sharded channel (``SPUBLISH``), so a notify
                                travels within the room's shard only
lr:{R}:sidx              hash   statsvr shard index: field ``<node>/<index>/<count>``,
                                value ``"t<trusted> <version> <size> <expires_ms>"``
                                (an older node's has no ``t<trusted>``)
lr:{R}:s:<node>/0/1      string one shard's members (msgpack array of uids,
                                sorted) of a room split into one shard
lr:{R:i}:s:<node>/<i>/<n> str.  the same of shard i of a room split into n > 1
lr:{R}:vx                set    the exact set of viewers (uids), capped
lr:{R}:vm                hash   ``complete``: ``"0"`` once the exact set is
                                capped (absent means complete)
lr:{R}:vh                hash   field node -> its HyperLogLog registers (16 KiB)
lr:{R}:bc                hash   the room's broadcasts: ``n`` the current number
                                (absent: 1); ``e:<n>`` ``"<ended_ms> <until_ms>"``
                                of ended broadcast n, ``p:<epoch>`` ``"<n>
                                <until_ms>"`` the epoch it ended with and
                                the renewed ones before it (taps of those
                                epochs go to its archive); both pruned
                                on the caller's clock by the next end
lr:{R}:vx:<n>            set    the exact set, vm and vh of ended broadcast n
lr:{R}:vm:<n>            hash   (renamed aside when it ended; ``vm:<n>`` always
lr:{R}:vh:<n>            hash   exists while it is kept, with ``ended``)
lr:{lr}:vip              set    the rooms in the vip sect (the whitelist)
lr:{lr}:vips             hash   room -> its sect record (``liveroom.sects``):
                                pin, since, the rule's candidate, last moves
lr:{R}:ts:<step>         zset   online series resolution: member
                                ``"<start>:<min>:<max>:<sum>:<count>"``,
                                score start (Unix s)
lr:{R}:tsl               string time of the series' last sample (Unix ms)
lr:{R}:lk                string the current broadcast's likes total
lr:{R}:lkw:<id>          string a write of taps the room took (its ``write_id``;
                                dedup_ttl: tried again, it adds nothing)
lr:{R}:lks:<step>        zset   likes series resolution: member
                                ``"<start>:<taps>"``, score start (Unix s)
lr:{R}:gr                zset   the current broadcast's givers: giver -> score
                                (the sum of its gifts' values)
lr:{R}:gf                hash   its gifts: ``t`` the total value, ``c`` the count
lr:{R}:gr:<n>            zset   ended broadcast n's top 100 givers (renamed
                                aside when it ended, kept like ``vm:<n>``,
                                which holds its ``likes`` and ``gifts`` totals)
lr:{R}:mod               hash   the room's moderation: ``m:<uid>`` (a mute) and
                                ``b:<uid>`` (a ban) -> msgpack ``[until_ms,
                                reason, by, at_ms]`` (until 0: until lifted);
                                ``slow`` its seconds (absent: off); ``v`` the
                                version of its last change; ``nm`` and ``nb``
                                the mutes and bans it holds (its cap)
lr:{R}:modt              zset   its sanctions by their end: ``m:<uid>`` /
                                ``b:<uid>`` -> until_ms (``inf`` until lifted),
                                to prune ended ones and find the last end
lr:{R}:aud               list   the current broadcast's moderation audit, newest
                                first (1 000 kept): msgpack ``[at_ms, by,
                                action, target, seconds, reason]``
lr:{R}:aud:<n>           list   ended broadcast n's audit (renamed aside when it
                                ended, kept like ``vm:<n>``)
lr:{R}:rv                hash   the room's review queue: ``n`` the last id
                                given, ``dn`` the decisions counted;
                                ``<id>`` -> msgpack ``[uid, kind, to,
                                at_ms, why, client_msg_id]`` of a held
                                message, ``b:<id>`` its packed body (until
                                it is denied or its approval settled),
                                ``s:<id>`` its decision (``deny``,
                                ``approve``, ``approve <epoch> <seq>``
                                once stored), ``c:<cmid>`` -> the id its
                                client_msg_id was held under, ``k:<id>``
                                -> that client_msg_id
lr:{R}:rvq               zset   ids waiting, by ``n`` (the oldest first)
lr:{R}:rvd               zset   ids decided, by ``dn`` (the oldest forgotten
                                first)
lr:{R}:ev                list   the room's webhook events written with their
                                actions and not yet moved to ``wh`` (their JSON)
lr:{lr}:modv             string the system's moderation version (a counter)
lr:{lr}:modj             zset   the journal: room -> the version of its last
                                moderation change
lr:{lr}:modx             zset   room -> when its moderation ends (the caller's
                                ms; ``inf`` while it holds a ban until lifted):
                                acts prune ``modj`` and ``modx`` by it
lr:{lr}:flv              string the word filter's version (a counter)
lr:{lr}:fls              hash   its lists: name -> the version of the list's
                                last put (its size: the lists held, their cap)
lr:{lr}:fl:<name>        string one list: msgpack ``[action, [word, ...],
                                [room, ...], at_ms]`` (no rooms: every room)
lr:{lr}:wh               stream the webhooks' outbox: fields ``e`` (event id),
                                ``d`` (its JSON); consumer group ``deliver``
lr:{lr}:whl              string the delivery lease: the holder node's name,
                                expiring unless renewed
lr:{lr}:whr              zset   rooms that may hold events not moved, a mark
                                per action: ``<room>:<mark>`` -> when it was
                                marked (ms), for the sweep
lr:{lr}:whrc             string the marks given (each mark's number)
lr:{lr}:whm              zset   event ids ``wh`` took in from rooms -> when
                                (ms), kept an hour: a repeated move adds none
lr:{lr}:whf              hash   events given up: ``d:<id>`` its JSON, ``w:<id>``
                                ``"<failed_ms> <why>"``
lr:{lr}:whfo             zset   their ids by when they were given up
lr:{lr}:stats:nodes      hash   the node registry: node -> ``"<expires_ms> "``
                                then its last announcement, msgpack
                                ``[announced_ms, [rooms_cached, held_polls,
                                members, rooms_merged], [[room, online,
                                per_minute or nil], ...]]`` (its biggest rooms,
                                at most 100, online descending)
=======================  =====  ==============================================

What spans rooms lives under the one fixed hash tag ``{lr}`` (:data:`GLOBAL`),
so on a Redis Cluster those keys share a slot like a room's do.

Which shards and statsvr nodes are live is decided by the ``expires_ms`` stored
in ``sidx`` and ``lr:{lr}:stats:nodes``, on the caller's clock (an announcement
lives in its node's entry); the shard keys'
Redis expiry (twice the shard TTL) only collects garbage. The viewers and
series keys simply expire, and so do the counters (``lk``, ``gr``, ``gf``:
the history's ttl after their last write; ``lks:<step>``: the longest
retention), the rate counters (the longest window
plus a bucket after the last accepted send) and an ended broadcast's history
(its ``ttl_ms``); ``bc`` lives at least as long as any viewers key of the room,
so broadcast numbers never go back while a history is kept. A room's
moderation keys (``mod``, ``modt``, ``aud``) live the history's ttl after
their last act, or until their last sanction ends when later, and without
expiry while a ban until lifted holds; the journal's keys never expire: each
act prunes the rooms whose moderation ended (``modx``) from it. A room's
review queue (``rv``, ``rvq``, ``rvd``) lives the room's ttl after its last
hold or decision. The word filter's keys (``flv``, ``fls``, ``fl:<name>``)
never expire: a list stays until an operator deletes it. Neither do the
webhooks' (``wh``, ``whf``, ``whfo``): they are bounded by count (the
stream trimmed at ``OUTBOX_MAX``, the failed list at ``FAILED_MAX``), and
the lease ``whl`` expires unless its holder renews it. A room's ``ev``
never expires either: it empties as its events move (right after their
actions, or at the sweep), and ``whr`` holds only the marks of actions not
yet moved nor swept; ``whm`` forgets each id an hour after it was taken in.
"""

from __future__ import annotations

PREFIX = "lr"
GLOBAL = f"{PREFIX}:{{{PREFIX}}}"
"""The prefix of every key that spans rooms: one hash tag, one slot."""
NOTIFY_CHANNEL = f"{PREFIX}:notify"


def notify_channel(room: str) -> str:
    """The room's sharded notify channel (Redis Cluster), in the room's slot."""
    return f"{PREFIX}:{{{room}}}:n"


def notify_how(room: str, *, sharded: bool) -> str:
    """How a script notifies a room's append: ``PUBLISH`` on the one channel
    of a single Redis, ``SPUBLISH`` on the room's own channel on a cluster."""
    if sharded:
        return f"SPUBLISH {notify_channel(room)}"
    return f"PUBLISH {NOTIFY_CHANNEL}"


def meta(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:meta"


def log(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:log"


def important(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:imp"


def recalled(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:rc"


def personal(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:pm"


def ordinals(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:pn"


def client_msg_id(room: str, cmid: str, *, personal: bool = False) -> str:
    return f"{PREFIX}:{{{room}}}:{'pcmid' if personal else 'cmid'}:{cmid}"


def rate_uid(room: str, uid: str) -> str:
    return f"{PREFIX}:{{{room}}}:rl:{uid}"


def rate_room(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:rr"


def shard_field(node: str, index: int, count: int) -> str:
    """A shard's field in :func:`shard_index` (node names may hold ``/``: parse
    from the right)."""
    return f"{node}/{index}/{count}"


def shard_index(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:sidx"


def shard(room: str, node: str, index: int, count: int) -> str:
    """A shard's key: in the room's slot when the room is one shard, else in
    the slot of ``{room:index}``, which every node's shard ``index`` shares."""
    tag = room if count == 1 else f"{room}:{index}"
    return f"{PREFIX}:{{{tag}}}:s:{shard_field(node, index, count)}"


def _ended(broadcast: int | None) -> str:
    return "" if broadcast is None else f":{broadcast}"


def viewers_exact(room: str, ended: int | None = None) -> str:
    """The current broadcast's exact set, or ended broadcast ``ended``'s."""
    return f"{PREFIX}:{{{room}}}:vx{_ended(ended)}"


def viewers_meta(room: str, ended: int | None = None) -> str:
    return f"{PREFIX}:{{{room}}}:vm{_ended(ended)}"


def viewers_sketches(room: str, ended: int | None = None) -> str:
    return f"{PREFIX}:{{{room}}}:vh{_ended(ended)}"


def broadcasts(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:bc"


def series(room: str, step: int) -> str:
    return f"{PREFIX}:{{{room}}}:ts:{step}"


def series_last(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:tsl"


def likes(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:lk"


def likes_write(room: str, write_id: str) -> str:
    return f"{PREFIX}:{{{room}}}:lkw:{write_id}"


def likes_series(room: str, step: int) -> str:
    return f"{PREFIX}:{{{room}}}:lks:{step}"


def givers(room: str, ended: int | None = None) -> str:
    """The current broadcast's ranking, or ended broadcast ``ended``'s."""
    return f"{PREFIX}:{{{room}}}:gr{_ended(ended)}"


def gifts(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:gf"


def moderation(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:mod"


def moderation_ends(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:modt"


def audit(room: str, ended: int | None = None) -> str:
    """The current broadcast's moderation audit, or ended broadcast ``ended``'s."""
    return f"{PREFIX}:{{{room}}}:aud{_ended(ended)}"


def review(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:rv"


def review_waiting(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:rvq"


def review_decided(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:rvd"


def events(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:ev"


MODERATION_VERSION = f"{GLOBAL}:modv"
MODERATION_JOURNAL = f"{GLOBAL}:modj"
MODERATION_ENDS = f"{GLOBAL}:modx"
FILTERS_VERSION = f"{GLOBAL}:flv"
FILTERS = f"{GLOBAL}:fls"


def filter_list(name: str) -> str:
    """One list of the word filter (under the global tag, as all of them)."""
    return f"{GLOBAL}:fl:{name}"


WEBHOOKS = f"{GLOBAL}:wh"
WEBHOOKS_LEASE = f"{GLOBAL}:whl"
WEBHOOKS_ROOMS = f"{GLOBAL}:whr"
WEBHOOKS_MARKS = f"{GLOBAL}:whrc"
WEBHOOKS_MOVED = f"{GLOBAL}:whm"
WEBHOOKS_FAILED = f"{GLOBAL}:whf"
WEBHOOKS_FAILED_ORDER = f"{GLOBAL}:whfo"
STATS_NODES = f"{GLOBAL}:stats:nodes"
VIP = f"{GLOBAL}:vip"
VIP_RECORDS = f"{GLOBAL}:vips"
VIP_BEFORE = f"{PREFIX}:vip"
"""Where the whitelist was kept before it moved under :data:`GLOBAL`: a
one-Redis store renames it at start (see ``RedisStore.start``)."""
