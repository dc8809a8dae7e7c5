"""The listener context: genuine only for exactly what it was signed for."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from liveroom.personal import PTS_MASK
from proxy.polls.context import Context, ContextSigner, NewsMarks, news_mark

names = st.from_regex(r"[A-Za-z0-9_.\-]{1,64}", fullmatch=True)
counts = st.integers(0, 2**53 - 1)
SIGNER = ContextSigner("secret")


@given(room=names, uid=names, epoch=names, seq=counts, iseq=counts, seq_ic=counts,
       iseq_ic=counts, last_ms=counts, pn=st.none() | counts | st.integers(2**32 - 3, 2**32),
       anchor=counts, likes=counts, slow=st.integers(0, 3600), pts=counts)
def test_a_context_reads_back_what_was_signed(room: str, uid: str, epoch: str, seq: int,
                                              iseq: int, seq_ic: int, iseq_ic: int,
                                              last_ms: int, pn: int | None, anchor: int,
                                              likes: int, slow: int, pts: int) -> None:
    news = news_mark(likes, slow)
    token = SIGNER.sign(room, uid, epoch, seq, iseq, seq_ic, iseq_ic, last_ms, pn, anchor, news,
                        pts)
    assert len(token) == 84
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                             "0123456789-_")
    # An ordinal past 32 bits is kept as unknown; of the personal ts, its low 32 bits.
    kept_pn = pn if pn is not None and pn < 2**32 - 1 else None
    assert SIGNER.verify(token, room, uid, epoch, seq, iseq) == Context(
        seq_ic, iseq_ic, last_ms, kept_pn, anchor, news, pts & PTS_MASK)


@given(bound=st.tuples(names, names, names, counts, counts), which=st.integers(0, 4),
       other=st.one_of(names, counts))
def test_a_context_is_ignored_for_anything_else(bound: tuple[str, str, str, int, int],
                                                which: int, other: str | int) -> None:
    token = SIGNER.sign(*bound, 1, 2, 3)
    changed = list(bound)
    changed[which] = other
    assume(type(other) is type(bound[which]) and tuple(changed) != bound)
    room, uid, epoch, seq, iseq = changed
    assert SIGNER.verify(token, str(room), str(uid), str(epoch), int(seq), int(iseq)) is None


@given(position=st.integers(0, 83), char=st.sampled_from("AZaz09-_"))
def test_a_changed_character_or_another_secret_is_refused(position: int, char: str) -> None:
    token = SIGNER.sign("r", "u", "e", 5, 4, 1, 0, 1_700_000_000_000)
    forged = token[:position] + char + token[position + 1:]
    if forged != token:
        assert SIGNER.verify(forged, "r", "u", "e", 5, 4) is None
    assert ContextSigner("other").verify(token, "r", "u", "e", 5, 4) is None


def test_malformed_contexts_are_refused() -> None:
    token = SIGNER.sign("r", "u", "e", 5, 4, 1, 0, 7)
    for bad in ("", "x", token[:-1], token + "A", "=" * 84, "é" * 84, "+" * 84,
                "\udcff" * 84, token.replace(token[0], "!", 1)):
        assert SIGNER.verify(bad, "r", "u", "e", 5, 4) is None


@given(likes=counts, slow=st.integers(0, 3600), other_likes=counts,
       other_slow=st.integers(0, 3600))
def test_a_news_mark_is_never_unknown_and_tells_near_figures_apart(
        likes: int, slow: int, other_likes: int, other_slow: int) -> None:
    mark = news_mark(likes, slow)
    assert 0 < mark < 1 << 48
    # Figures a tap or two apart, or slow mode turned on or off, never share a mark.
    if (likes, slow) != (other_likes, other_slow) and abs(likes - other_likes) < 1000:
        assert news_mark(other_likes, other_slow) != mark


figures = st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 2)) | st.tuples(
    counts, st.integers(0, 3600), st.integers(0, 2**32 - 1))


@given(st.lists(figures, max_size=30))
def test_the_remembered_news_mark_is_the_mark_of_each_call(calls: list[tuple[int, int, int]]
                                                           ) -> None:
    # The same figures again and again (the listeners of one message), then
    # others, and back: each answer's mark is news_mark's of its own figures.
    marks = NewsMarks()
    for likes, slow, ranking in [call for call in calls for _ in range(2)]:
        assert marks.of(likes, slow, ranking) == news_mark(likes, slow, ranking)


@given(anchor=st.integers(0, 2**64 - 1), pn=st.none() | counts, uid=names,
       news=st.integers(0, 2**48 - 1), pts=counts)
def test_the_claimed_anchor_is_the_signed_one(anchor: int, pn: int | None, uid: str,
                                              news: int, pts: int) -> None:
    token = SIGNER.sign("r", uid, "e", 5, 4, 1, 0, 7, pn, anchor, news, pts)
    assert SIGNER.claimed_anchor(token) == anchor
    assert SIGNER.sign_ascii("r", uid, "e", 5, 4, 1, 0, 7, pn, anchor, news,
                             pts) == token.encode()
    ctx = SIGNER.verify(token, "r", uid, "e", 5, 4)
    assert ctx is not None
    assert ctx.anchor == anchor


def test_a_claim_that_is_not_a_context_claims_nothing() -> None:
    token = SIGNER.sign("r", "u", "e", 5, 4, 1, 0, 7, None, 99)
    for bad in (None, "", "x", token[:-1], token + "A", "é" * 84, "\udcff" * 84, "!" * 84):
        assert SIGNER.claimed_anchor(bad) == 0
