"""Every Redis key and channel name liveroom uses, built in one place.

All keys of one room share the hash tag ``{room}`` so a Redis Cluster keeps them
in one slot (the append script touches several of them at once).

=======================  =====  ==============================================
key                      type   holds
=======================  =====  ==============================================
lr:{R}:meta              hash   ``epoch``, ``seq`` (head), ``ic`` (important count)
lr:{R}:log               stream the log: id ``<seq>-0``, fields ``m`` (packed
                                message) and ``c`` (important count at it)
lr:{R}:imp               stream important entries kept beyond the log cap
lr:{R}:cmid:<id>         string seq of a client_msg_id's first send (10 min)
lr:shared:<name>         string values every node agrees on (tokens, secret)
lr:notify                channel "<seq> <room>" after every append
=======================  =====  ==============================================
"""

from __future__ import annotations

PREFIX = "lr"
NOTIFY_CHANNEL = f"{PREFIX}:notify"


def meta(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:meta"


def log(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:log"


def important(room: str) -> str:
    return f"{PREFIX}:{{{room}}}:imp"


def client_msg_id(room: str, cmid: str) -> str:
    return f"{PREFIX}:{{{room}}}:cmid:{cmid}"


def shared(name: str) -> str:
    return f"{PREFIX}:shared:{name}"
