"""proxy: the HTTP face of liveroom.

It parses requests, holds long polls (:mod:`.hold`), answers them from the
snapshots a :class:`~liveroom.roles.RoomReader` hands out (:mod:`.answer`), signs
listener contexts (:mod:`.context`) and appends sends to the store. The role's
entry point is :class:`~proxy.role.Proxy`.
"""

from .role import Proxy
from .site import FrontSite

__all__ = ["FrontSite", "Proxy"]
