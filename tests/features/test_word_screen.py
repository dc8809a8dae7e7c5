"""The word filter's matching, without a node (``liveroom/folding.py``,
``proxy/filters/screen.py``): a listed word is caught under any mix of the
foldings (case, full-width, zero-width characters, symbols, spaces and
marks slipped between its letters), Chinese and Latin alike; a text
without one (in folded space) is left alone; a mask covers exactly the
stretches the words span; the actions' precedence."""

from __future__ import annotations

import string
from typing import Any

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from liveroom.folding import FOLDS_KEPT, fold, fold_char, fold_spans
from liveroom.store.base import made_list
from proxy.filters.screen import Screened, Screens, WordScreen, masked_text, texts_of

CHINESE = "坏人广告赌博色情诈骗你我他的是"
LETTERS = string.ascii_letters + string.digits + CHINESE
SLIPPED = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", " ", "\u3000", ".", "-", "_",
           "*", "，", "。", "!", "😀", "\u0301", "\u0489", "\n", "\t"]
"""What a sender slips between a word's letters: zero-width characters,
spaces (an ideographic one too), punctuation (Chinese too), symbols, an
emoji, combining marks, controls."""

words = st.text(alphabet=LETTERS, min_size=1, max_size=6)


def full_width(char: str) -> str:
    return chr(ord(char) + 0xFEE0) if "!" <= char <= "~" else char


@st.composite
def disguised(draw: st.DrawFn, word: str) -> str:
    """``word`` as a sender may write it to get past a filter: each letter
    in either case or full-width, and anything of :data:`SLIPPED` between
    letters."""
    out = []
    for n, char in enumerate(word):
        if n:
            out += draw(st.lists(st.sampled_from(SLIPPED), max_size=3))
        out.append(draw(st.sampled_from([char, char.upper(), char.lower(), full_width(char),
                                         full_width(char.upper())])))
    return "".join(out)


def block(*listed: str, rooms: tuple[str, ...] = ()) -> Screens:
    return Screens([WordScreen(made_list("list", "block", listed, rooms))])


# --- folding -------------------------------------------------------------------------


@given(st.text())
@example("é e\u0301 Ａ ﬁ ㎏ ß İ ǅ ½ \ud7a3 が ｶﾞ")
def test_a_text_folds_character_by_character_and_its_spans_say_where_from(text: str) -> None:
    folded, owners = fold_spans(text)
    assert folded == fold(text) == "".join(map(fold_char, text))
    assert len(owners) == len(folded)
    assert owners == sorted(owners)
    for n, owner in enumerate(owners):
        assert folded[n] in fold_char(text[owner])
    assert all(c.isalnum() for c in folded)


def test_the_foldings_the_filter_promises() -> None:
    assert fold("ＨｅＬＬｏ") == "hello"  # full-width, case
    assert fold("s\u200bp\u200ca\u200dm\u2060\ufeff") == "spam"  # zero-width
    assert fold("s.p-a_m *!") == "spam"  # symbols, spaces, punctuation
    assert fold("坏　人，广告。") == "坏人广告"  # Chinese spaces and punctuation
    assert fold("Straße") == "strasse"  # full case folding
    assert fold("café") == fold("cafe\u0301") == "cafe"  # marks dropped, not composed
    assert fold("z̸̢a̷l̴g̵o") == "zalgo"


def test_the_table_of_folds_stops_growing_at_its_bound() -> None:
    fold("".join(chr(c) for c in range(0x4E00, 0x4E00 + FOLDS_KEPT + 10)))
    fold("".join(chr(c) for c in range(0x20000, 0x20000 + 100)))
    from liveroom.folding import _FOLDS

    assert len(_FOLDS) <= FOLDS_KEPT
    assert fold(chr(0x20000 + 200)) == chr(0x20000 + 200)  # folded all the same


# --- matching ------------------------------------------------------------------------


@given(st.data(), words, st.text(max_size=20), st.text(max_size=20))
def test_a_listed_word_is_caught_however_it_is_disguised(
        data: st.DataObject, word: str, before: str, after: str) -> None:
    text = before + data.draw(disguised(word)) + after
    screened = block(word).screen("any-room", text)
    assert screened is not None, (word, text)
    assert (screened.action, screened.lists) == ("block", ("list",))


@given(st.lists(words, min_size=1, max_size=4), st.text(max_size=60))
@example(["ab"], "a\u200bc b")
def test_a_text_without_a_listed_word_is_left_alone(listed: list[str], text: str) -> None:
    """"Without" in folded space: no listed word's fold is in the text's."""
    assume(not any(fold(word) in fold(text) for word in listed))
    screens = Screens([WordScreen(made_list("m", "mask", listed)),
                       WordScreen(made_list("b", "block", listed))])
    assert screens.screen("room", text) is None
    assert masked_text(text, screens.of("room")) is text


@given(st.lists(words, min_size=1, max_size=3), st.data())
def test_a_mask_covers_exactly_what_the_words_span(listed: list[str],
                                                   data: st.DataObject) -> None:
    parts = data.draw(st.lists(st.one_of(st.text(max_size=8),
                                         st.sampled_from(listed).flatmap(disguised)),
                               max_size=5))
    text = "".join(parts)
    screen = WordScreen(made_list("m", "mask", listed))
    masked = masked_text(text, [screen])
    assert len(masked) == len(text)
    folded, owners = fold_spans(text)
    covered = set()
    for start, end in screen.spans(folded):
        covered.update(range(owners[start], owners[end - 1] + 1))
    for n, (was, now) in enumerate(zip(text, masked, strict=True)):
        assert now == ("*" if n in covered else was), (text, masked, n)


def test_masking_keeps_what_surrounds_each_word() -> None:
    screen = WordScreen(made_list("m", "mask", ["bad", "坏人", "abc", "bcd"]))
    assert masked_text("so Ｂ.a\u200bD!! 好坏 人 ok", [screen]) == "so *****!! 好*** ok"
    assert masked_text("abcd BAD", [screen]) == "**** ***"  # overlapping words: one stretch
    assert masked_text("nothing", [screen]) == "nothing"


def test_chinese_words_in_chinese_text() -> None:
    screens = block("坏人", "广告")
    for text in ("你是坏人", "你是坏 人", "你是坏\u200b人", "你是坏，人", "加我看广告！"):
        assert screens.screen("r", text) is not None, text
    for text in ("你是好人", "坏的人", "广播告诉"):
        assert screens.screen("r", text) is None, text


# --- bodies, rooms, actions ----------------------------------------------------------


def test_every_string_of_a_body_is_screened_and_no_key() -> None:
    body: Any = {"text": "hi", "bad": 1, "more": [{"deep": ["x", "BAD"]}], "n": None}
    assert texts_of(body) == ["hi", "x", "BAD"]
    screens = Screens([WordScreen(made_list("m", "mask", ["bad"]))])
    screened = screens.screen("r", body)
    assert isinstance(screened, Screened)
    assert screened.body == {"text": "hi", "bad": 1, "more": [{"deep": ["x", "***"]}], "n": None}
    assert body["more"][0]["deep"][1] == "BAD"  # the body as sent is left as it was
    assert screens.screen("r", {"bad": "fine"}) is None
    for body in (12, 1.5, True, None, [], {}):
        assert screens.screen("r", body) is None


def test_a_list_applies_to_its_rooms_or_to_every_room() -> None:
    screens = Screens([WordScreen(made_list("here", "block", ["spam"], ["r1", "r2"])),
                       WordScreen(made_list("all", "mask", ["bad"]))])
    assert screens.screen("r1", "spam") is not None
    assert screens.screen("r3", "spam") is None
    assert [s.name for s in screens.of("r2")] == ["here", "all"]
    assert [s.name for s in screens.of("r3")] == ["all"]
    assert Screens().screen("r1", "anything") is None


@pytest.mark.parametrize(("text", "action", "lists"), [
    ("spam and bad and hate", "block", ("b1", "b2")),
    ("bad and hate", "hold", ("h",)),
    ("bad and worse", "mask", ("m1", "m2")),
])
def test_block_wins_over_hold_and_hold_over_mask(text: str, action: str,
                                                 lists: tuple[str, ...]) -> None:
    screens = Screens([WordScreen(made_list("m1", "mask", ["bad"])),
                       WordScreen(made_list("m2", "mask", ["worse", "and bad"])),
                       WordScreen(made_list("h", "hold", ["hate"])),
                       WordScreen(made_list("b2", "block", ["spam"])),
                       WordScreen(made_list("b1", "block", ["spam"]))])
    screened = screens.screen("r", text)
    assert screened is not None
    assert (screened.action, screened.lists) == (action, lists)
    if action == "mask":
        assert screened.body == "*** and *****"
    else:
        assert screened.body is text  # kept as sent: refused, or for its reviewer
