"""A message's body screened against the word lists that apply to its room:
pure, no I/O.

Each :class:`WordScreen` is one list's Aho-Corasick automaton over its
words folded (:mod:`liveroom.folding`): a body's text is folded once and
each list finds its words in it in one pass, whatever their number. The
library is ``ahocorasick_rs`` (the Rust ``aho-corasick`` crate), its
contiguous NFA: measured here, 0.5 to 0.7 µs a pass over 20 to 50 folded
characters with 10 000 words, Latin or Chinese; a list of 10 000 words of
2 to 10 characters adds about 3 MB to a node's RSS (up to about 8 MB for
words of 32: the automaton grows with the words' characters), built in
about 30 ms (up to 100), the GIL released meanwhile. ``pyahocorasick``
took as long on Latin text but about 21 µs on Chinese (its trie looks a
character up among a node's children one by one, and the root of 10 000
words has thousands).

**One automaton a list**: a change rebuilds only its list, and a send
pays one pass for each list that applies to its room (about 0.8 µs each
with 10 000 words: 16 global lists cost about 16 µs a send). Few big
lists are cheaper than many small ones; one automaton over every list
would make the pass one, at the price of rebuilding all on any change.

**Which text.** Every string in the body: the body itself when it is one,
else the values of its objects and the items of its arrays, at any depth
(keys are the client's field names and are left alone). A word is found
within one string, never across two.

**What a match does** (:meth:`Screens.screen`): a ``block`` list's word
refuses the message, a ``hold`` list's sends it to review, a ``mask``
list's has each stretch of the original text its words span (with what
was slipped between their letters) replaced by as many ``*``. When lists
of several actions match, the first of ``block``, ``hold``, ``mask`` wins
(a held message is kept as sent, unmasked, for its reviewer).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from ahocorasick_rs import AhoCorasick, Implementation

from liveroom.folding import fold, fold_spans
from liveroom.store.base import FILTER_ACTIONS, WordList

BLOCK: Final = "block"
HOLD: Final = "hold"
MASK: Final = "mask"
_RANK: Final = {action: rank for rank, action in enumerate(FILTER_ACTIONS)}


class WordScreen:
    """One list as a node applies it: its name, action, rooms and version,
    and the automaton of its folded words (see the module for its cost;
    build it off the event loop)."""

    __slots__ = ("_automaton", "action", "find", "name", "rooms", "version")

    def __init__(self, word_list: WordList) -> None:
        self.name = word_list.name
        self.action = word_list.action
        self.rooms = word_list.rooms
        self.version = word_list.version
        # Words that fold alike are one word to the automaton.
        self._automaton = AhoCorasick(sorted({fold(word) for word in word_list.words} - {""}),
                                      implementation=Implementation.ContiguousNFA)
        self.find = self._automaton.find_matches_as_indexes
        """``find(folded)``: the words' matches in text folded, ``[]`` for
        none (bound once: a send calls it for each list)."""

    def finds(self, folded: str) -> bool:
        """Whether a word of the list is in ``folded`` (text folded)."""
        return bool(self.find(folded))

    def spans(self, folded: str) -> list[tuple[int, int]]:
        """Every ``[start, end)`` of ``folded`` a word of the list covers,
        overlapping ones included."""
        return [(start, end) for _, start, end in
                self._automaton.find_matches_as_indexes(folded, overlapping=True)]


class Screened:
    """What the screen made of a body that holds listed words."""

    __slots__ = ("action", "body", "lists")

    def __init__(self, action: str, lists: tuple[str, ...], body: Any) -> None:
        self.action = action
        """``block``, ``hold`` or ``mask``."""
        self.lists = lists
        """The lists of that action whose words it holds."""
        self.body = body
        """The body masked (``mask``), else as sent."""

    def __repr__(self) -> str:
        return f"Screened({self.action!r}, {self.lists!r})"


def texts_of(body: Any) -> list[str]:
    """Every string in ``body`` (itself, or its values and items at any
    depth), in order."""
    if type(body) is str:
        return [body]
    found: list[str] = []
    if type(body) is dict:
        if len(body) == 1:  # {"text": ...}, most chat
            (value,) = body.values()
            if type(value) is str:
                return [value]
        _gather(body, found)
    elif type(body) is list:
        _gather(body, found)
    return found


def _gather(value: Any, found: list[str]) -> None:
    for item in value.values() if type(value) is dict else value:
        if type(item) is str:
            found.append(item)
        elif type(item) is dict or type(item) is list:
            _gather(item, found)


def masked_text(text: str, screens: Iterable[WordScreen]) -> str:
    """``text`` with each stretch the words of ``screens`` cover, as many
    ``*`` as it has characters (``text`` itself when none does)."""
    folded, owners = fold_spans(text)
    spans = sorted((owners[start], owners[end - 1] + 1)
                   for screen in screens for start, end in screen.spans(folded))
    if not spans:
        return text
    pieces: list[str] = []
    done = 0
    for start, end in spans:
        if end <= done:
            continue
        start = max(start, done)
        pieces += [text[done:start], "*" * (end - start)]
        done = end
    pieces.append(text[done:])
    return "".join(pieces)


def masked_body(body: Any, screens: tuple[WordScreen, ...]) -> Any:
    """``body`` with each of its strings :func:`masked_text` (a new value;
    ``body`` is left as it is)."""
    if type(body) is str:
        return masked_text(body, screens)
    if type(body) is dict:
        return {key: masked_body(value, screens) for key, value in body.items()}
    if type(body) is list:
        return [masked_body(value, screens) for value in body]
    return body


class Screens:
    """The lists of a node, by the rooms they apply to: built once per
    change of the lists, read by every send."""

    __slots__ = ("_by_room", "_everywhere", "lists")

    def __init__(self, screens: Iterable[WordScreen] = ()) -> None:
        ordered = sorted(screens, key=lambda s: (_RANK[s.action], s.name))
        self.lists: dict[str, WordScreen] = {s.name: s for s in ordered}
        """By name, every list."""
        self._everywhere = tuple(s for s in ordered if not s.rooms)
        by_room: dict[str, list[WordScreen]] = {}
        for screen in ordered:
            for room in screen.rooms:
                by_room.setdefault(room, []).append(screen)
        # Each room's lists in precedence order, the global ones with them.
        self._by_room = {room: tuple(sorted((*self._everywhere, *mine),
                                            key=lambda s: (_RANK[s.action], s.name)))
                         for room, mine in by_room.items()}

    def of(self, room: str) -> tuple[WordScreen, ...]:
        """The lists that apply to ``room``, ``block`` ones first."""
        return self._by_room.get(room, self._everywhere)

    def screen(self, room: str, body: Any) -> Screened | None:
        """What the lists of ``room`` make of ``body``; ``None`` when it holds
        none of their words (or no list applies: then nothing is folded)."""
        screens = self._by_room.get(room, self._everywhere)
        if not screens:
            return None
        folded = list(map(fold, texts_of(body)))
        found: list[WordScreen] = []
        for screen in screens:
            if found and found[0].action != screen.action:
                break  # a list of a stronger action matched
            find = screen.find
            for text in folded:
                if find(text):
                    found.append(screen)
                    break
        if not found:
            return None
        action = found[0].action
        names = tuple(s.name for s in found)
        if action != MASK:
            return Screened(action, names, body)
        return Screened(MASK, names, masked_body(body, tuple(found)))
