"""What a sender's rate windows cost the memory engine's append, in one process.

``MemoryLog.append_at_once`` of ``--sends`` chat messages to one room, each
by one of ``--uids`` uids at random (25 sends a millisecond of message time,
so a uid sends about as often as in ``bench_send.py``'s ``crowd`` rows), with
the default rate limits (5/s, 30/m, 300/h per uid) and with none: the
difference is what the windows cost an accepted send, a new uid's state
included (most uids are new at first, then each sends again now and then).
No HTTP, no parsing: the store alone. CPU µs per append (``process_time``),
the sends refused (429), and the collector's full collections meanwhile
(each sender's state is one object it tracks).

    python loadtest/bench_rates.py
    PYTHONPATH=build/compiled PYTHONSAFEPATH=1 python loadtest/bench_rates.py --uids 1000000
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # after a compiled tree

from liveroom import build
from liveroom.clock import SystemClock
from liveroom.errors import RateLimited
from liveroom.model import NewMessage
from liveroom.ratelimit import RateLimits
from liveroom.store.base import LogPolicy
from liveroom.store.memory.log import MemoryLog
from liveroom.store.memory.notifier import MemoryNotifier


def appends(uids: list[str], limits: RateLimits | None) -> tuple[float, int, int]:
    """CPU µs per append, sends refused, full collections."""
    clock = SystemClock()
    log = MemoryLog(LogPolicy(), clock, MemoryNotifier())
    t0 = int(clock.time() * 1000)
    body = {"type": "chat", "text": "that last play was unreal"}
    refused = 0
    full0 = gc.get_stats()[2]["collections"]
    start = time.process_time()
    for i, uid in enumerate(uids):
        try:
            log.append_at_once("room", NewMessage(uid=uid, body=body, important=False,
                                                  ts=t0 + i // 25), limits)
        except RateLimited:
            refused += 1
    cpu = time.process_time() - start
    return 1e6 * cpu / len(uids), refused, gc.get_stats()[2]["collections"] - full0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uids", type=int, default=100_000)
    parser.add_argument("--sends", type=int, default=300_000)
    args = parser.parse_args()
    rng = random.Random(1)
    uids = [f"v{rng.randrange(args.uids)}" for _ in range(args.sends)]
    print(f"$ python loadtest/bench_rates.py --uids {args.uids} --sends {args.sends}"
          f"    ({build.describe()})")
    for name, limits in (("no limits", None), ("default limits", RateLimits())):
        us, refused, full = appends(uids, limits)
        print(f"{name:>15}: {us:5.2f} µs CPU per append, {refused} refused, "
              f"{full} full collections")


if __name__ == "__main__":
    main()
