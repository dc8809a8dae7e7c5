"""The JSON request decoder reads a body once with orjson and asks the
standard parser again only for a body that may hold a key given twice or an
integer beyond 64 bits (see ``liveroom.codec.decode_request``). Whatever the body,
it accepts and refuses exactly what the strict reading (the standard parser
with duplicate keys and out-of-range integers refused) does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from liveroom.codec import INT_BOUND, JSON, check_value, decode_request
from liveroom.errors import BadBody

KEYS = st.sampled_from(["a", "b", "uid", "body", "x:y", ":", "k"])
SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=False, allow_infinity=False)
           | st.text(alphabet="ab: \"\\\u00e9", max_size=6))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.lists(st.tuples(KEYS, inner), max_size=4), max_leaves=12)


def text(value: Any) -> str:
    """JSON text of ``value``, where a list of (key, value) pairs is an object
    written member by member: its keys may repeat."""
    if isinstance(value, list) and value and all(isinstance(p, tuple) for p in value):
        return "{" + ", ".join(f"{json.dumps(k)}: {text(v)}" for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(text(v) for v in value) + "]"
    return json.dumps(value)


class _Twice(ValueError):
    pass


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({k for k, _ in pairs}) != len(pairs):
        raise _Twice
    return dict(pairs)


def _int(digits: str) -> int:
    value = int(digits)
    if abs(value) > INT_BOUND:
        raise _Twice
    return value


def strict(raw: bytes) -> Any:
    """The reference reading: the standard parser, refusing what the contract refuses."""
    try:
        value = json.loads(raw, object_pairs_hook=_unique, parse_int=_int)
        check_value(value)
    except (ValueError, BadBody):
        return BadBody
    return value


def fast(raw: bytes) -> Any:
    try:
        return decode_request(JSON, raw)
    except BadBody:
        return BadBody


@given(VALUES)
@example([("a", 1), ("a", 2)])
@example([("uid", "u"), ("body", [("k", 1), ("k", 1)])])
@example([("body", "12:30"), ("body", 1)])
@example([("body", 2**64 + 1)])
@example(-(2**63) - 1)
@example([("a", "x"), ("b", 1.5)])
def test_the_decoder_agrees_with_the_strict_reading(value: Any) -> None:
    raw = text(value).encode()
    assert fast(raw) == strict(raw)


@pytest.mark.parametrize("raw", [
    b'{"uid": "u", "body": "hi"}',
    b'{"uid": "u", "body": {"text": "hi", "n": [1, 2, {"a": null}]}}',
])
def test_a_plain_body_needs_one_parse(raw: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """No float and as many colons as keys: orjson's reading is the answer."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the standard parser read a plain body")
    monkeypatch.setattr(json, "loads", refuse)
    assert decode_request(JSON, raw) == json.JSONDecoder().decode(raw.decode())
