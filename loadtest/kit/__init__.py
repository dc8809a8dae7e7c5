"""The benchmarks' shared kit: what every ``loadtest/bench_*.py`` needs besides its own load.

The benchmarks run as scripts (``python loadtest/bench_send.py ...``), so
``loadtest/`` is first on the path and they import the kit as ``kit.NAME``:

- ``kit.servers``: the servers under test (liveroom, nginx + Nchan, the Python
  floor, a throw-away redis-server), started as child processes on free
  loopback ports, watched from /proc and stopped;
- ``kit.clients``: the client processes that hold the long polls (one
  keep-alive connection per listener, uvloop + httptools) and the parent's
  side of their pipes;
- ``kit.builds``: the compiled builds a server may run from (the compiled
  tree of scripts/build-compiled, the floor compiled by mypyc);
- ``kit.machine``: what the machine and its processes spend (CPU), and what a
  process may hold (open files) and outlive (its parent);
- ``kit.provenance``: what a figure carries to be read later: the command,
  the commit and the machine;
- ``kit.progress``: the lines a benchmark prints while it runs.
"""

from pathlib import Path

LOADTEST = Path(__file__).resolve().parent.parent
"""``loadtest/``: the benchmarks, the floor server and the nginx configurations."""
REPO = LOADTEST.parent
"""The checkout the servers run from."""
