"""proxy: the HTTP face of liveroom.

It parses requests, holds long polls (:mod:`.polls.hold`), answers them from the
snapshots a :class:`~liveroom.roles.RoomReader` hands out (:mod:`.polls.answer`), signs
listener contexts (:mod:`.polls.context`) and appends sends to the store. The role's
entry point is :class:`~proxy.role.Proxy`.

The entry points are imported when first asked for (``from proxy import
Proxy``), not with the package: ``liveroom ticket`` signs with
:func:`proxy.tickets.mint` and must not load aiohttp's server for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .front.site import FrontSite
    from .role import Proxy

__all__ = ["FrontSite", "Proxy"]


def __getattr__(name: str) -> Any:
    if name == "Proxy":
        from .role import Proxy

        return Proxy
    if name == "FrontSite":
        from .front.site import FrontSite

        return FrontSite
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
