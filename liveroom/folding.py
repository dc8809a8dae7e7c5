"""Text folded for the word filter: what a listed word and a message are
compared as, and the way back from the folded text to the original.

Each character folds on its own (:func:`fold_char`):

1. NFKD, its compatibility decomposition: a full-width A (U+FF21) becomes ``A``,
   ``ﬁ`` becomes ``fi``, a half-width katakana its full-width one, ``é``
   becomes ``e`` and a combining accent;
2. case folded (``str.casefold``: ``ß`` is ``ss``), then NFKD again;
3. only letters and digits kept (``str.isalnum``): zero-width characters
   (U+200B..U+200D, U+2060, U+FEFF), spaces, punctuation, symbols, emoji,
   controls and combining marks are dropped wherever they stand.

So ``"\uff22.a\u200bD!"`` (a full-width B, a dot, a zero-width space) folds
to ``bad``, and ``坏　人`` (an ideographic space) to ``坏人``; a word slipped
apart by symbols or spaces still reads as the word. Chinese characters fold
to themselves.

**Marks are dropped, not composed.** NFKC would compose ``e`` and an accent
back into ``é``, which makes the fold depend on the characters around each
one; decomposing and dropping the marks keeps every character's fold its
own, so the map back to the original text is exact, and accents or a pile
of combining marks (zalgo text) slipped onto a word do not hide it. The
price: ``é`` reads as ``e`` (``café`` matches ``cafe``), a kana with its
voicing mark as the kana without (``が`` as ``か``), and Indic or Thai
vowel signs are dropped, so words in those scripts match more loosely.
Hangul syllables fold to their jamo, on both sides alike.

**Cost.** :func:`fold` folds ASCII text with three byte operations (its
letters lowered, the rest deleted), other text through a table of the
characters seen (a dict, at most :data:`FOLDS_KEPT` of them; beyond, a
character not in it is folded anew each time): measured, about 0.3 µs for
40 ASCII characters and 1 to 1.5 µs for 20 to 40 Chinese or mixed ones
(see docs/performance.md). :func:`fold_spans` also says which original
character each folded one came from, for masking: a few µs more, and only
needed once a word matched.
"""

from __future__ import annotations

import unicodedata
from typing import Final

FOLDS_KEPT: Final = 32_768
"""Characters whose fold the table keeps at most: ASCII, the few thousand
Chinese characters of everyday chat and what else a node sees, without
growing past a few MB whatever it is sent."""


def fold_char(char: str) -> str:
    """One character folded (see the module): ``""`` for one that is no
    letter or digit, else one or a few letters or digits."""
    decomposed = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", char).casefold())
    return "".join(c for c in decomposed if c.isalnum())


class _Folds(dict[str, str]):
    """Each character seen -> its fold, kept up to :data:`FOLDS_KEPT`."""

    def __missing__(self, char: str) -> str:
        folded = fold_char(char)
        if len(self) < FOLDS_KEPT:
            self[char] = folded
        return folded


_FOLDS: Final = _Folds()
_folded: Final = _FOLDS.__getitem__
_NOT_ALNUM: Final = bytes(c for c in range(128) if not chr(c).isalnum())
"""The ASCII bytes that are no letter or digit: an ASCII character folds to
itself lowered, or to nothing."""


def fold(text: str) -> str:
    """``text`` folded: each character's :func:`fold_char`, in order."""
    if text.isascii():
        return text.encode().lower().translate(None, _NOT_ALNUM).decode()
    return "".join(map(_folded, text))


def fold_spans(text: str) -> tuple[str, list[int]]:
    """``text`` folded (as :func:`fold`) and, for each folded character, the
    index in ``text`` of the character it came from (non-decreasing): a
    match of folded characters ``[i, j)`` covers ``text[owners[i]:owners[j - 1] + 1]``,
    with whatever was dropped between them."""
    pieces: list[str] = []
    owners: list[int] = []
    for index, char in enumerate(text):
        folded = _folded(char)
        if folded:
            pieces.append(folded)
            owners.extend([index] * len(folded))
    return "".join(pieces), owners
