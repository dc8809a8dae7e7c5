"""The owner's table: the members of each room that heartbeat through this statsvr node.

Filled by heartbeats (memory only), emptied of quiet members by a sweep, and
written to the store shard by shard when membership changed (see
:class:`~statsvr.table.Tables`).
"""

from __future__ import annotations

import zlib


def shard_of(uid: str, count: int) -> int:
    """The shard of ``uid`` in a room split into ``count`` shards.

    CRC-32 of the UTF-8 uid modulo ``count``: the same on every node and every
    release (unlike ``hash()``), so nodes that split a room alike put a uid in
    the same shard, and a merge can union shard by shard.
    """
    return zlib.crc32(uid.encode()) % count if count > 1 else 0
