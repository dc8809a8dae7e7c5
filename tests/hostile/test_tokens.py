"""The publisher and admin tokens (``proxy/auth.py``): a header that names
neither is refused whatever came before it, and the headers kept as verified
(a backend sends the same one on every request) are only ever the tokens'."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liveroom.errors import Forbidden, Unauthorized
from proxy.auth import VERIFIED_MAX, Right, Tokens

ADMIN = "admin-token-0123456789abcdef0123"
PUBLISHER = "publisher-token-0123456789abcdef"


def tokens() -> Tokens:
    return Tokens(admin=ADMIN, publisher=PUBLISHER)


@given(headers=st.lists(st.one_of(
    st.sampled_from([f"Bearer {PUBLISHER}", f"bearer {PUBLISHER}  ", f"Bearer {ADMIN}",
                     f"BEARER {ADMIN}", "Bearer ", "Basic x", f"Bearer {PUBLISHER}x",
                     f"Bearer {PUBLISHER[:-1]}"]),
    st.text(max_size=40).map(lambda t: "Bearer " + t)), max_size=30))
def test_a_verified_header_never_lets_another_through(headers: list[str]) -> None:
    kept = tokens()
    for header in headers:
        raw = header.encode("utf-8", "surrogatepass")
        fresh = tokens()  # no header verified before
        try:
            fresh.require(raw, Right.PUBLISH)
            expected: type[Exception] | None = None
        except (Unauthorized, Forbidden) as exc:
            expected = type(exc)
        if expected is None:
            kept.require(raw, Right.PUBLISH)
        else:
            with pytest.raises(expected):
                kept.require(raw, Right.PUBLISH)
    assert len(kept._verified) <= VERIFIED_MAX
    assert set(kept._verified.values()) <= {Right.ADMIN, Right.PUBLISH}


def test_the_publisher_token_cannot_do_what_only_the_admin_may_after_it_was_kept() -> None:
    kept = tokens()
    kept.require(f"Bearer {PUBLISHER}".encode(), Right.PUBLISH)
    with pytest.raises(Forbidden):
        kept.require(f"Bearer {PUBLISHER}".encode(), Right.ADMIN)


def test_only_the_tokens_headers_are_kept_and_no_more_than_the_bound() -> None:
    kept = tokens()
    for i in range(100):
        with pytest.raises(Unauthorized):
            kept.require(f"Bearer wrong-{i}".encode(), Right.PUBLISH)
    assert not kept._verified
    for spaces in range(VERIFIED_MAX + 10):
        kept.require(f"Bearer {PUBLISHER}{' ' * spaces}".encode(), Right.PUBLISH)
    assert len(kept._verified) == VERIFIED_MAX
