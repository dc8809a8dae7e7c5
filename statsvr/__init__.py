"""statsvr: who is in a room, and how many have watched it.

:class:`~statsvr.role.Statsvr` is the role of one node: the owner's table
(:mod:`.table`), the merged online view (:mod:`.view`, :mod:`.merge`), the
viewers history (:mod:`.history`, :mod:`.viewers`) and the online series
(:mod:`.sampler`, :mod:`.series`). docs/design.md steps 6 to 8.
"""

from .role import StatsLimits, Statsvr

__all__ = ["StatsLimits", "Statsvr"]
