"""The JSON request decoder reads a body once with orjson and asks the
standard parser again only for a body that may hold a key given twice or an
integer beyond 64 bits (see ``liveroom.codec.decode_request``). Whatever the body,
it accepts and refuses exactly what the strict reading (the standard parser
with duplicate keys and out-of-range integers refused) does."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from support import idle_sends

from liveroom.codec import (
    INT_BOUND,
    JSON,
    check_value,
    decode_request,
    decode_request_bounded,
    json_size,
)
from liveroom.errors import BadBody
from liveroom.model import Appended, NewMessage
from proxy.sends.send import _Pending

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


SIZED_TEXT = st.text(alphabet="ab/ \"\\\n\u00e9\u2028\U0001f600", max_size=6)
SIZED = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | SIZED_TEXT
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["a", "b/", "\u00e9"]), inner, max_size=3),
    max_leaves=12)


def parts(value: Any) -> list[Any]:
    """``value`` and every value inside it."""
    found = [value]
    inner = value.values() if isinstance(value, dict) else value if isinstance(value, list) \
        else []
    for item in inner:
        found += parts(item)
    return found


@given(SIZED, st.booleans(), st.booleans(), st.sampled_from([None, 0, 2]))
@example({"body": 1e5}, False, False, None)
@example({"body": "\u00e9/"}, True, True, 2)
def test_the_size_bound_holds_for_every_part_of_a_body(
        value: Any, ascii_only: bool, escape_slashes: bool, indent: int | None) -> None:
    """A send spares encoding its body to measure it when the decoder's bound
    (the request's length, for JSON without floats) is within the limit: no
    part of the document may encode longer than that bound, however the
    sender wrote it (escapes, spaces); with a float there is no bound."""
    raw = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    if escape_slashes:
        raw = raw.replace("/", "\\/")
    doc, bound = decode_request_bounded(JSON, raw.encode())
    assert doc == value
    has_float = any(isinstance(p, float) for p in parts(value))
    assert bound == (-1 if has_float else len(raw.encode()))
    if bound >= 0:
        assert all(json_size(p) <= bound for p in parts(doc))


@given(epoch=st.text(min_size=1, max_size=12), to=st.sampled_from([None, "u1", "a.b-c_d"]),
       seq=st.integers(1, 2**53 - 1))
def test_a_sends_json_answer_is_what_orjson_writes_for_its_fields(
        epoch: str, to: str | None, seq: int) -> None:
    """A send's 201 is written without a dict (``proxy/sends/send.py``): the same
    bytes as orjson's for the fields, whatever the store's epoch holds."""
    sends = idle_sends()
    message = NewMessage(uid="u", body="hi", important=to is not None, ts=1, to=to)
    reply = sends._stored(_Pending(message, None, None, None, False),
                          Appended(epoch, seq, duplicate=False), "application/json")
    fields: dict[str, object] = {"seq": seq, "epoch": epoch} if to is None else {
        "pseq": seq, "epoch": epoch, "to": to, "private": False}
    assert reply.status == 201
    assert reply.body == orjson.dumps(fields)
