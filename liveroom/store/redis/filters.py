"""The word filter's lists on Redis (``FilterStore``; keys in :mod:`.keys`).

Every key is under the global tag, so each call is one script in one slot,
on one Redis and on a Redis Cluster alike: ``lua/filters_put.lua`` and
``lua/filters_delete.lua`` change a list and the version together,
``lua/filters_versions.lua`` reads the version (and each list's when it
moved), ``lua/filters_read.lua`` the lists asked for with their versions.
A list is one msgpack value ``[action, [word, ...], [room, ...], at_ms]``;
one that does not decode is left out of an answer, so it never hides the
others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack

from ..base import (
    FilterLimits,
    FiltersFull,
    WordList,
    check_filter_name,
    check_filter_version,
    check_list,
)
from . import keys
from .calls import Client, Lua, run_scripts, text, unavailable


def pack_list(word_list: WordList) -> bytes:
    packed: bytes = msgpack.packb([word_list.action, list(word_list.words),
                                   list(word_list.rooms), word_list.at_ms])
    return packed


def unpack_list(name: str, version: int, value: bytes) -> WordList | None:
    """A list from its record; ``None`` when it does not decode."""
    try:
        action, words, rooms, at_ms = msgpack.unpackb(value)
        return WordList(name, str(action), tuple(str(w) for w in words),
                        tuple(str(r) for r in rooms), int(at_ms), version)
    except (ValueError, TypeError, msgpack.UnpackException):
        return None


class RedisFilters:
    """:class:`~liveroom.store.base.FilterStore` on Redis (one Redis, or a
    Redis Cluster: the keys share the global slot)."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._put = Lua("filters_put.lua")
        self._delete = Lua("filters_delete.lua")
        self._versions = Lua("filters_versions.lua")
        self._read = Lua("filters_read.lua")

    def _keys(self, name: str) -> list[str]:
        return [keys.FILTERS_VERSION, keys.FILTERS, keys.filter_list(name)]

    async def put(self, word_list: WordList, limits: FilterLimits) -> int:
        check_list(word_list, limits)
        name = word_list.name
        with unavailable("storing a word list"):
            (version,) = await run_scripts(self._client, [(
                self._put, self._keys(name), [name, pack_list(word_list), limits.lists])])
        if not version:
            raise FiltersFull(f"the store holds {limits.lists} lists already")
        return int(version)

    async def delete(self, name: str) -> int | None:
        check_filter_name(name)
        with unavailable("deleting a word list"):
            (version,) = await run_scripts(self._client, [(
                self._delete, self._keys(name), [name])])
        return int(version) or None

    async def versions(self, since: int) -> tuple[int, dict[str, int] | None]:
        check_filter_version(since)
        with unavailable("reading the word filter's version"):
            (reply,) = await run_scripts(self._client, [(
                self._versions, [keys.FILTERS_VERSION, keys.FILTERS], [since])])
        if len(reply) == 1:
            return int(reply[0]), None
        fields = reply[1]
        return int(reply[0]), {text(fields[i]): int(fields[i + 1])
                               for i in range(0, len(fields), 2)}

    async def lists(self, names: Sequence[str]) -> dict[str, WordList]:
        for name in names:
            check_filter_name(name)
        if not names:
            return {}
        with unavailable("reading word lists"):
            (replies,) = await run_scripts(self._client, [(
                self._read, [keys.FILTERS, *map(keys.filter_list, names)], list(names))])
        found = {}
        reply: Any
        for name, reply in zip(names, replies, strict=True):
            if reply:
                word_list = unpack_list(name, int(reply[0]), reply[1])
                if word_list is not None:
                    found[name] = word_list
        return found
