"""recvsvr: the stateless room cache.

It keeps no state the store does not have: per room an immutable snapshot,
rebuilt by background pulls (on a notify, and at least once a second for rooms
with held polls or read in the last two seconds) and swapped in one assignment. See :mod:`.cache`.
The role, :class:`~recvsvr.role.Recvsvr`, runs two caches, the normal and
the vip sect, behind one reader: see :mod:`.role`.
"""

from .cache import RoomCache, SectLimits
from .role import Recvsvr

__all__ = ["Recvsvr", "RoomCache", "SectLimits"]
