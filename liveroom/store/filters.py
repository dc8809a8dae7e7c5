"""The word filter's lists in the store (:class:`FilterStore`): each list's
words, its action and the rooms it applies to, and the version that lets
every node keep a copy.

One of the store's interfaces (:mod:`.base`): every engine implements it, and
every method may raise :class:`~liveroom.errors.StoreUnavailable` and nothing
else from the driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..folding import fold
from ..model import MAX_INT, is_room

FILTER_ACTIONS = ("block", "hold", "mask")
"""What a list does to a message holding one of its words: ``block`` refuses
the send (403 ``filtered``), ``hold`` hands it to the review queue, ``mask``
stores it with each word's stretch of the text as ``*``. The order is their
precedence when lists of several actions match one message."""
FILTER_ROOMS_MAX = 1_000
"""Rooms one list may name (none: it applies to every room)."""


@dataclass(frozen=True, slots=True)
class FilterLimits:
    """How much the store takes (the node's settings ``filter_lists_max``,
    ``filter_words_max`` and ``filter_word_chars``)."""

    lists: int
    """Lists the store holds at most, global and per room together."""
    words: int
    """Words one list holds at most."""
    word_chars: int
    """Characters one word has at most."""


@dataclass(frozen=True, slots=True)
class WordList:
    """One list of the word filter."""

    name: str
    """``[A-Za-z0-9_.-]{1,64}``, not only dots (it is a path segment)."""
    action: str
    """One of :data:`FILTER_ACTIONS`."""
    words: tuple[str, ...]
    """As the operator wrote them, each once, in their first order; a node
    folds them (:mod:`liveroom.folding`) to match."""
    rooms: tuple[str, ...] = ()
    """The rooms it applies to, sorted; ``()``: every room."""
    at_ms: int = 0
    """When it was put (the caller's clock, Unix ms)."""
    version: int = 0
    """The filters' version at its last put (set by the store; 0 before)."""


class FiltersFull(ValueError):
    """The store holds as many lists as its limit: a new name was refused
    and nothing was stored. Not bad input but the store's state (a
    ``ValueError`` all the same): the caller answers 409, and deleting a
    list makes room; a list put again under its name is no more."""


def made_list(name: str, action: str, words: Iterable[str], rooms: Iterable[str] = (),
              at_ms: int = 0) -> WordList:
    """A :class:`WordList` of what an operator gave: each word once, in
    the order first given; the rooms sorted, each once. Not checked:
    :func:`check_list` does that."""
    return WordList(name, action, tuple(dict.fromkeys(words)), tuple(sorted(set(rooms))), at_ms)


def check_filter_name(name: object) -> str:
    """Return ``name`` if it may name a list, else raise ``ValueError``."""
    if not isinstance(name, str) or not is_room(name):  # a path segment, as a room's
        raise ValueError(f"a list's name must match [A-Za-z0-9_.-]{{1,64}} (not only dots): "
                         f"{name!r}")
    return name


def check_list(word_list: WordList, limits: FilterLimits) -> None:
    """Raise ``ValueError`` unless ``word_list`` may be stored under ``limits``:
    a name, an action of :data:`FILTER_ACTIONS`, 1 to ``limits.words`` words
    of 1 to ``limits.word_chars`` characters each (text UTF-8 can hold),
    each with a letter or digit (a word that folds to nothing would match
    nothing), none twice; at most :data:`FILTER_ROOMS_MAX` rooms, each a
    room name, sorted, none twice; ``at_ms`` an int in 0..2**53-1."""
    if not isinstance(word_list, WordList):
        raise ValueError(f"a list must be a WordList, not {word_list!r}")
    check_filter_name(word_list.name)
    if word_list.action not in FILTER_ACTIONS:
        raise ValueError(f"action must be one of {', '.join(FILTER_ACTIONS)}, "
                         f"not {word_list.action!r}")
    words = word_list.words
    if not isinstance(words, tuple) or not 1 <= len(words) <= limits.words:
        raise ValueError(f"a list holds 1 to {limits.words} words")
    for word in words:
        _check_word(word, limits.word_chars)
    if len(set(words)) != len(words):
        raise ValueError("a word is listed twice")
    rooms = word_list.rooms
    if not isinstance(rooms, tuple) or len(rooms) > FILTER_ROOMS_MAX:
        raise ValueError(f"a list names at most {FILTER_ROOMS_MAX} rooms")
    for room in rooms:
        if not isinstance(room, str) or not is_room(room):
            raise ValueError(f"room must match [A-Za-z0-9_.-]{{1,64}} (not only dots): "
                             f"{room!r}")
    if list(rooms) != sorted(set(rooms)):
        raise ValueError("a list's rooms must be sorted, each once")
    at_ms = word_list.at_ms
    if isinstance(at_ms, bool) or not isinstance(at_ms, int) or not 0 <= at_ms <= MAX_INT:
        raise ValueError(f"at_ms must be an int in 0..{MAX_INT}, not {at_ms!r}")


def _check_word(word: object, chars: int) -> None:
    if not isinstance(word, str) or not 1 <= len(word) <= chars:
        raise ValueError(f"a word is text of 1 to {chars} characters, not {word!r}")
    try:
        word.encode()
    except UnicodeEncodeError:
        raise ValueError("a word must be text UTF-8 can hold (no lone surrogate)") from None
    if not fold(word):
        raise ValueError(f"the word {word!r} has no letter or digit: it would match nothing")


def check_filter_version(since: int) -> None:
    """Raise ``ValueError`` unless ``since`` is a version (an int of at least 0)."""
    if isinstance(since, bool) or not isinstance(since, int) or not 0 <= since < 2**63:
        raise ValueError(f"since must be a version (an int of at least 0), not {since!r}")


class FilterStore(Protocol):
    """The word filter's lists, and the version that lets every node keep a
    copy of them.

    - **Atomic.** :meth:`put` and :meth:`delete` change one list and bump
      the filters' *version* (one counter for all lists) in one atomic step;
      each list records the version of its last put.
    - **Copies.** Nodes call :meth:`versions` every ~250 ms with the
      version they last saw: nothing more when nothing changed, else each
      list's version, so they read again with :meth:`lists` only the lists
      put since (and drop those gone). A version below the one a node saw
      means the store lost its lists (a flushed Redis): the node reads them
      all again.
    - **No expiry.** A list stays until deleted.
    - **Limits.** At most ``limits.lists`` lists (:class:`FiltersFull`
      beyond), each checked by :func:`check_list`: input that breaks a rule
      raises ``ValueError`` and stores nothing. A list of 10 000 words of 32
      characters is up to about 1.3 MB in the store (one value).
    - **Redis Cluster.** Every key is under the global hash tag, in one
      slot: the same single steps as on one Redis.
    """

    async def put(self, word_list: WordList, limits: FilterLimits) -> int:
        """Store ``word_list`` under its name, replacing a list of that name
        (its ``version`` ignored); the new version, which the stored list
        carries. Raises ``ValueError`` (see :func:`check_list`) or
        :class:`FiltersFull` (a new name past ``limits.lists``), storing
        nothing."""

    async def delete(self, name: str) -> int | None:
        """Delete the list ``name``; the new version, or ``None`` (nothing
        changed) when there was no such list. ``ValueError`` for a name
        that is not one."""

    async def versions(self, since: int) -> tuple[int, dict[str, int] | None]:
        """The filters' version now and, unless it is ``since``, each list's
        version (name -> the version of its last put). One round trip,
        atomic; read-only."""

    async def lists(self, names: Sequence[str]) -> dict[str, WordList]:
        """The lists named (those that exist), each with its version. One
        round trip, atomic; read-only. ``ValueError`` for a name that is
        not one."""
