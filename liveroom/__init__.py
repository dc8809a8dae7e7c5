"""liveroom: a long-polling live-room message server (the shared core).

The core holds what every role needs: settings, the message model and its
codecs, errors, the clock, the store interfaces and their engines, the CLI and
the assembly of roles into a node. It imports no role; only :mod:`liveroom.cli`
and :mod:`liveroom.node` do.
"""

__version__ = "0.2.0"
"""The version, written here only: pyproject.toml reads it, and a test checks
that the npm package of liveroom.js (proxy/static/package.json) and
CHANGELOG.md say the same."""
