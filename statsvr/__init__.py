"""statsvr: who is in a room.

For now :class:`~statsvr.presence.LocalPresence`, the interim per-node view:
the distinct uids that polled a room on this node in the last ``window``
seconds. The sharded, store-backed view of DESIGN.md steps 6-8 replaces it.
"""

from .presence import LocalPresence

__all__ = ["LocalPresence"]
