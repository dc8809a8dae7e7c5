"""The machine a benchmark runs on: what it and its processes spend, and what a process may hold.

CPU comes from the kernel's own counters: the whole machine's busy time
(``machine_busy``), this process's (``own_cpu``) and any processes' utime and
stime from /proc (``cpu_times``, ``cpu_seconds``), so a run can say where every
core's time went. A process holding thousands of sockets raises its open-files
limit first (``raise_nofile``), and a child the benchmark starts asks the
kernel to stop it when the benchmark dies (``die_with_parent``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal

import psutil

CLK_TCK = os.sysconf("SC_CLK_TCK")


def machine_busy() -> float:
    """CPU seconds the whole machine spent busy (all cores, all processes, the kernel)."""
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def cpu_times(pids: list[int]) -> tuple[float, float]:
    """utime and stime (user and kernel CPU seconds) of these processes, summed
    (those gone meanwhile count as 0)."""
    user = system = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        user += int(fields[11])
        system += int(fields[12])
    return user / CLK_TCK, system / CLK_TCK


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of these processes (those gone meanwhile count as 0)."""
    return sum(cpu_times(pids))


def raise_nofile(need: int) -> int:
    """Raise RLIMIT_NOFILE to ``need`` if allowed, else the soft limit to the hard one.

    Returns the soft limit now in force. Root may raise the hard limit up to
    ``fs.nr_open`` unless the host forbids it (some VMs and containers do).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if need > hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))
            return need
        except (ValueError, OSError):
            pass
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def die_with_parent() -> None:
    """Have the kernel send SIGTERM to this process when its parent dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
