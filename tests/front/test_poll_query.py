"""A poll's URL and query as the hot path reads and checks them agree with the references.

The front routes a request and splits its query itself (``proxy.front.server.route``,
``parse_query``), and
``liveroom.model.is_name``, ``is_room`` and ``is_digits`` use str methods
instead of regular expressions (a poll checks several names and numbers).
These properties hold them to what aiohttp reads (yarl, the first of repeated
names) and to the patterns the API documents, on any text; they run on the
compiled build too.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from hypothesis import example, given
from hypothesis import strategies as st
from yarl import URL

from liveroom.model import is_digits, is_name, is_room
from proxy.front.routing import POLL, SEND, parse_query, route

NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
ROOM = re.compile(r"(?!\.+\Z)[A-Za-z0-9_.\-]{1,64}")
DIGITS = re.compile(r"[0-9]{1,16}")

# Mostly the characters that matter (the allowed ones and their neighbours,
# other scripts' letters and digits, what isalnum or isdigit take beyond
# ASCII), sometimes anything.
near = st.sampled_from([*"aZ09_.-/:+ ~\x00\u00e9\u00b2\u2177\u00df",
                        "\u0661", "\U0001d7d7", "\u0660", "\uff11", "\u00b9"])
texts = st.one_of(
    st.text(near, max_size=70),
    st.text(max_size=70),
    st.text(st.sampled_from(list("azAZ09_.-")), min_size=60, max_size=70),
)


@given(texts)
@example("")
@example("a" * 64)
@example("a" * 65)
@example("...")
@example("._.")
@example("a\n")
def test_is_name_and_is_room_agree_with_the_patterns(text: str) -> None:
    assert is_name(text) == bool(NAME.fullmatch(text))
    assert is_room(text) == bool(ROOM.fullmatch(text))


@given(st.one_of(st.text(st.sampled_from([*"0189 +-_", "\u0660", "\u00b2", "\uff11"]),
                         max_size=20), st.text(max_size=20)))
@example("")
@example("0" * 16)
@example("0" * 17)
@example("1_000")
def test_is_digits_agrees_with_the_pattern(text: str) -> None:
    assert is_digits(text) == bool(DIGITS.fullmatch(text))


query_pieces = st.sampled_from([*"ab=&%+; 2F09", "\u00e9", "%2B", "%3D", "%26", "%C3%A9",
                                 "%E9", "uid=", "seq="])


@given(st.lists(query_pieces, max_size=24).map("".join))
@example("uid=a&uid=b")
@example("a+b=c+d&%3D=%26")
@example("&&=&a")
def test_the_front_reads_a_query_as_aiohttp_does(query: str) -> None:
    expected: dict[str, str] = {}
    for name, value in URL("/v1/rooms/r/poll?" + query, encoded=True).query.items():
        expected.setdefault(name, value)  # the first of repeated names, as its get
    assert parse_query(query) == expected


LISTENER_ROUTE = re.compile(rb"/v1/rooms/([^/?]+)/(poll|messages)(?:\?(.*))?", re.DOTALL)
url_pieces = st.sampled_from([b"/v1/rooms/", b"/", b"poll", b"messages", b"?", b"a", b"%20",
                              b"%2F", b"/v1", b"rooms", b"x=1", b"&", b"//", b"pol", b"\xe9"])


@given(st.lists(url_pieces, max_size=8).map(b"".join))
@example(b"/v1/rooms/r/poll?uid=a")
@example(b"/v1/rooms//poll")
@example(b"/v1/rooms/r/poll/")
@example(b"/v1/rooms/r?/poll")
def test_the_front_routes_exactly_the_listener_paths(url: bytes) -> None:
    """``/v1/rooms/{room}/poll`` and ``/messages``, a room of at least one byte
    and no slash (percent-escapes decoded), anything after ``?`` the query."""
    found = LISTENER_ROUTE.fullmatch(url)
    if found is None:
        assert route(url) is None
        return
    room = found[1].decode("latin-1")
    expected = (POLL if found[2] == b"poll" else SEND,
                unquote(room) if "%" in room else room,
                (found[3] or b"").decode("latin-1"))
    assert route(url) == expected
