"""The types of :mod:`proxy.front.whole_c`, the whole read at C level
(``whole_c.pyx``, built by Cython where ``pip install .`` compiles)."""

from collections.abc import Sequence

from .limits import FrontLimits, HeadRules
from .request import Request

def read_whole(data: bytes, limits: FrontLimits, heads: Sequence[HeadRules | None],
               proxied: bool) -> Request | None: ...
