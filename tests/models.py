"""Reference models of rules the engines each implement (the memory engine in
Python, the redis engine in Lua): the tests hold the engines to these, and
nothing in the product runs them."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import NamedTuple

from liveroom.settings import VIEWERS_THRESHOLD


class ExactSetUpdate(NamedTuple):
    """What to do to a room's exact set: add ``add`` to it and store ``complete``."""

    add: tuple[str, ...]
    """Uids to add to the stored set (new ones only, in first-seen order)."""
    complete: bool
    """False once the set is capped: it no longer holds every viewer."""


def plan_exact_update(
    known: Collection[str],
    complete: bool,
    uids: Iterable[str],
    threshold: int = VIEWERS_THRESHOLD,
) -> ExactSetUpdate:
    """Decide how a room's exact set grows with a batch of ``uids``.

    ``known`` is the stored set (anything with ``in`` and ``len``) and
    ``complete`` its stored flag. While the set plus the batch's new uids fit
    in ``threshold``, all new uids are added and the set stays complete. When
    they would exceed it, the set is filled up to exactly ``threshold`` (so its
    size is a floor for the figure) and marked incomplete; an incomplete set
    never grows again. ``threshold`` must be at least 0.

    In a store shared by several nodes, applying the plan must be atomic with
    reading ``known`` (e.g. one Lua script doing the same); this function is the
    rule, not the concurrency control.
    """
    if threshold < 0:
        raise ValueError("threshold must be >= 0")
    if not complete:
        return ExactSetUpdate((), False)
    room = threshold - len(known)
    new: dict[str, None] = {}
    for uid in uids:
        if uid not in known and uid not in new:
            if len(new) >= room:
                return ExactSetUpdate(tuple(new), False)
            new[uid] = None
    return ExactSetUpdate(tuple(new), len(known) <= threshold)
