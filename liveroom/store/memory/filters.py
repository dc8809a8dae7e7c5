"""The word filter's lists in memory, laid out like the redis engine's keys:
the version (``flv``), each list's version (``fls``) and each list
(``fl:<name>``); nothing expires."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..base import (
    FilterLimits,
    FiltersFull,
    WordList,
    check_filter_name,
    check_filter_version,
    check_list,
)


class MemoryFilters:
    """``FilterStore`` in this process: no method suspends, so each is atomic
    like the redis engine's scripts."""

    def __init__(self) -> None:
        self._version = 0
        """The filters' version (``flv``)."""
        self._lists: dict[str, WordList] = {}
        """name -> the list, carrying the version of its last put (``fls``,
        ``fl:<name>``)."""

    async def put(self, word_list: WordList, limits: FilterLimits) -> int:
        check_list(word_list, limits)
        if word_list.name not in self._lists and len(self._lists) >= limits.lists:
            raise FiltersFull(f"the store holds {limits.lists} lists already")
        self._version += 1
        self._lists[word_list.name] = replace(word_list, version=self._version)
        return self._version

    async def delete(self, name: str) -> int | None:
        check_filter_name(name)
        if self._lists.pop(name, None) is None:
            return None
        self._version += 1
        return self._version

    async def versions(self, since: int) -> tuple[int, dict[str, int] | None]:
        check_filter_version(since)
        if since == self._version:
            return self._version, None
        return self._version, {name: kept.version for name, kept in self._lists.items()}

    async def lists(self, names: Sequence[str]) -> dict[str, WordList]:
        for name in names:
            check_filter_name(name)
        return {name: self._lists[name] for name in names if name in self._lists}
