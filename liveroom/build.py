"""Which build of the listener path this process runs: pure Python or compiled.

The listener path (parsing a poll, checking its query, the cursor's decision,
holding and waking polls, writing answers) can be compiled to C extensions by
mypyc from the same typed modules: ``pip install .`` does it when a C compiler
is there (``setup.py``), ``pip install -e .`` never does. The pure modules stay
the reference; a compiled module sits beside its ``.py`` and Python imports the
extension first.

:data:`COMPILED` names the modules a compiled build compiles, in one place for
``setup.py``, the start line, ``/metrics`` and the tests. This module imports
no role: it reads the roles' modules from :data:`sys.modules` once the node has
imported them.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys

COMPILED = (
    "liveroom.clock",
    "liveroom.codec",
    "liveroom.model",
    "liveroom.origin",
    "liveroom.personal",
    "liveroom.ratelimit",
    "liveroom.snapshot",
    "liveroom.store.memory.log",
    "liveroom.store.memory.notifier",
    "liveroom.whitelist",
    "proxy.addresses",
    "proxy.auth",
    "proxy.deadlines",
    "proxy.front.admission",
    "proxy.front.connection",
    "proxy.front.flow",
    "proxy.front.handler",
    "proxy.front.handoff",
    "proxy.front.headers",
    "proxy.front.limits",
    "proxy.front.reader",
    "proxy.front.request",
    "proxy.front.routing",
    "proxy.front.server",

    "proxy.front.trim",
    "proxy.front.whole",
    "proxy.gifts.ranking",
    "proxy.likes.likes",
    "proxy.likes.route",
    "proxy.likes.taps",
    "proxy.params",
    "proxy.polls.answer",
    "proxy.polls.context",
    "proxy.polls.heartbeats",
    "proxy.polls.hold",
    "proxy.polls.poll",
    "proxy.polls.route",
    "proxy.polls.step",
    "proxy.polls.tiers",
    "proxy.recent_rooms",
    "proxy.renewals",
    "proxy.reply",
    "proxy.sends.hook",
    "proxy.sends.new_rooms",
    "proxy.sends.route",
    "proxy.sends.send",
    "proxy.tickets",
    "recvsvr.cache",
    "recvsvr.role",
    "statsvr.merge",
    "statsvr.role",
)
"""Modules on the listener path and the send path that a compiled build
compiles: the modules a poll calls into on its way too (statsvr's online
count, the vip list, the renewed epochs: an interpreted call there costs a
frame each, twice a delivery), and the send hook's batching and its HTTP
client (``proxy.sends.hook``, ``liveroom.origin``: what a screened send
costs beside Nchan's upstream). Not ``statsvr.table``: it reads batches from
other nodes, whose entries a compiled loop would check by type and refuse
with a TypeError where the pure one skips them."""

CYTHON = {"proxy.front.whole_c": "proxy.front.reader",
          "liveroom.tally_c": "liveroom.store.memory.log"}
"""Modules a compiled build builds with Cython, from their ``.pyx`` beside
the pure code they stand for, each with the module that takes it when it is
built (``proxy.front.whole_c``: the whole read of ``proxy.front.whole``, for
the reader; ``liveroom.tally_c``: a sender's rate tally,
``liveroom.ratelimit.ListTally``, for the memory engine). Loaded by their
takers, never imported here."""

_EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def is_compiled(module: str) -> bool:
    """Whether ``module`` (imported now if it is the core's, else only if
    already imported) was loaded from a C extension."""
    found = sys.modules.get(module)
    if found is None and module.startswith("liveroom."):
        found = importlib.import_module(module)
    path = getattr(found, "__file__", None) or ""
    return path.endswith(_EXTENSIONS)


def compiled_modules() -> list[str]:
    """The modules of :data:`COMPILED` this process runs compiled."""
    return [name for name in COMPILED if is_compiled(name)]


def cython_modules() -> list[str]:
    """The modules of :data:`CYTHON` this process runs (loaded, from C)."""
    return [name for name in CYTHON if name in sys.modules and is_compiled(name)]


def kind() -> str:
    """``"compiled"`` when every module of the listener path this process has
    loaded is compiled, ``"pure"`` when none is, else ``"mixed"`` (a broken
    install: a compiled tree shadowed in part, or built without Cython). A
    module of :data:`CYTHON` counts once its taker is loaded."""
    loaded = [name for name in COMPILED
              if name in sys.modules or name.startswith("liveroom.")]
    compiled = sum(is_compiled(name) for name in loaded)
    at_c_level = cython_modules()
    for name, taker in CYTHON.items():
        if taker in sys.modules:
            loaded.append(name)
            compiled += name in at_c_level
    if compiled == 0:
        return "pure"
    return "compiled" if compiled == len(loaded) else "mixed"


def describe() -> str:
    """One line for the start log: the build and how many modules are compiled."""
    build = kind()
    if build == "pure":
        return "pure Python build"
    return (f"{build} build ({len(compiled_modules())} of {len(COMPILED)} modules compiled by "
            f"mypyc, {len(cython_modules())} of {len(CYTHON)} by Cython)")
