"""Made-up word lists for the word filter's benchmarks (``bench_filter.py``,
``bench_send.py``'s ``filtered`` rows): half Latin (4 to 10 letters), half
Chinese (2 to 4 characters), as an operator's list of banned words."""

from __future__ import annotations

import random
import string

CHINESE = [chr(c) for c in range(0x4E00, 0x9FA6)]
"""The CJK Unified Ideographs' common block."""


def made_up_words(count: int, rng: random.Random) -> list[str]:
    """``count`` distinct words drawn from ``rng``, sorted."""
    words: set[str] = set()
    while len(words) < count:
        if rng.random() < 0.5:
            words.add("".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 10))))
        else:
            words.add("".join(rng.choices(CHINESE, k=rng.randint(2, 4))))
    return sorted(words)
