"""Adaptive-hold simulator: polls a room of up to 10 000 000 listeners sends, policy off and on.

A model, not real connections. For each room size it follows a **sample** of
listeners (all of them up to ``--sample``, else ``--sample`` of them, figures
scaled up by room / sample) polling one room through the proxy's adaptive hold,
and measures over a window of steady state (after a warm-up):

* **requests**: polls arriving at the server, per listener per minute, and for
  the whole room per second (scaled), plus the room's busiest second (the
  important messages' cut-through releases everyone at once);
* **important delivery latency**: from the moment an important message reaches
  the proxy to the moment the answer carrying it leaves the server, for every
  (listener, important message) pair; p50, p99 and max. It includes waiting
  for a poll that was on its way (the round trip), which no policy removes, so
  the part the server added (answer minus the later of message and poll
  arrival) is reported as well;
* **normal messages** that arrived in the window: delivered vs counted in
  ``gap`` (an answer carries at most 500 normal messages, the newest; the rest
  are counted), and **important messages lost**: (listener, important message)
  pairs not answered by the end of the run, 20 s after the last message.

Both are compared with the **policy off** (interval 0 at every room size: a
plain long poll, every message wakes every held poll).

What is modelled, faithfully to the server's adaptive hold (``proxy``):

* Tiers by the room's online count (``--tiers`` in the server's own format,
  ``ONLINE:INTERVAL[+JITTER],...`` or ``off``): under the first tier the
  interval is 0. The room's size is fixed for the run.
* Every listener carries ``last``, the time of its last non-empty answer (the
  server signs it into ``ctx``); its due time is ``last + interval + jitter*u``,
  ``u`` uniform in [0, 1) drawn afresh whenever ``last`` changes (the server
  hashes uid and last_ms). A first poll answers at once in a plain room; in a
  tiered one it is paced like any other (no context: answered just now), held
  until ``arrival + interval + jitter*u``, then answered; either sets ``last``.
* Interval 0: a poll that finds messages newer than its cursors answers at
  once; else it waits and answers at the first message (so messages that come
  while a listener's next poll is on its way are batched into one answer), or
  empty after the poll timeout (``--timeout``, 25 s).
* Interval > 0: a poll arriving with something pending and past its due time
  answers at once; otherwise it is held. The room ticks every ``--tick``
  (0.2 s; ticks at whole multiples from t = 0). At a tick T a held poll is
  released if it has something pending and T >= due, or if an important
  message newer than its important cursor is pending and the room's
  cut-through fires at T. The cut-through fires at the first tick (with some
  poll held) at which T >= last_cut + ``--cut-every`` (0.5 s) and either an
  important message arrived since the last cut-through or a poll that missed
  it (its important cursor behind it: it was on its way) was held since; then
  last_cut = T if the cut released somebody (a cut that answered nobody does
  not space the next one). This is ``proxy.polls.hold.Holds._tick_once``: the
  decision is the server's own function (``proxy.polls.hold.cut_fires``); in
  a big room it is the same as "some held poll has an important message
  pending". A release answers everything
  pending (important first, then at most 500 normal, the rest in ``gap``) and
  sets last = T. A held poll with nothing pending once its timeout has passed
  answers empty at that tick (``last`` unchanged); one with messages pending
  but not yet due stays held until due, past the timeout if need be.
* After an answer the client polls again at once; the next poll reaches the
  server one round trip later (the answer travelling back plus the request
  travelling out), drawn afresh for every poll from a log-normal distribution
  given by its median and p99 (``--rtt-median``, ``--rtt-p99``; equal values
  make it constant).
* Messages: ``RATE`` normal messages a second (Poisson arrivals conditioned
  on the expected count, i.e. RATE x duration uniform times: exponential gaps,
  but exactly the stated rate in every run; or evenly spaced with
  ``--arrivals fixed``) plus one important message every
  ``--important-every`` seconds (evenly spaced from a random start, each
  moved by up to half a tick either way so that they fall at different phases
  of the room's ticks, as a sender's timer and the room's ticker drift), on
  top of the rate. Messages reach the proxy with negligible delay after they are sent
  (the notify path is not modelled), and the recvsvr's caches keep everything
  a listener can miss in these runs (2000 normal, 500 important messages), so
  ``gap`` comes only from the 500-message cap of an answer.

Not modelled: the server's CPU (answers leave when the policy says, however
many; ``--release-spread`` spreads a release's answers over some time, as a
what-if), the online count's own lag, listeners joining and leaving during the
window (the sample joins uniformly over the first ``--join`` seconds), and
heartbeat or stats traffic.

How: the interval-0 room is simulated exactly, one answer per listener per
vectorised round (the next message after a poll's arrival is a binary search);
a tiered room steps through its ticks, handling the polls that arrive between
two ticks (in time order, vectorised) and then the tick's releases over every
held poll. numpy only. On 2 cores (``--jobs 2``) the default table (40 runs
of 50 000 listeners over 350 s of room time) takes about a minute and a half,
mostly the policy-off runs at 20 messages a second; ``--quick`` about a second.

    python loadtest/sim_hold.py                 # the full table (a few minutes)
    python loadtest/sim_hold.py --quick         # a smoke run (seconds)
    python loadtest/sim_hold.py --rooms 10000000 --rates 1 --json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import numpy.typing as npt

from liveroom.settings import Tier, parse_tiers
from proxy.polls.hold import cut_fires
from proxy.polls.tiers import TierTable

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DEFAULT_TIERS = "1000:1,10000:2,100000:5,1000000:8+2"
DEFAULT_ROOMS = (500, 5_000, 50_000, 500_000, 10_000_000)
DEFAULT_RATES = (0.2, 1.0, 5.0, 20.0)
GRACE = 20.0
"""Seconds the run goes on after the last message, so every listener is answered."""
Z99 = 2.3263478740408408
"""The standard normal's 99th percentile."""


# -- parameters -------------------------------------------------------------------


def tier_for(tiers: Sequence[Tier], online: int) -> Tier:
    """The tier a room of ``online`` listeners is in (interval 0 under the first),
    by the server's own table."""
    return TierTable(tiers).tier(online)


@dataclass(frozen=True, slots=True)
class Scenario:
    """One simulated run: a room, its traffic, the policy's knobs and the client."""

    room: int
    """The room's online count (picks the tier; figures are scaled to it)."""
    rate: float
    """Normal messages a second."""
    policy: bool
    """True: the tiers apply; False: interval 0 whatever the room's size."""
    tiers: str = DEFAULT_TIERS
    arrivals: str = "poisson"
    important_every: float = 10.0
    """Seconds between two important messages (0: none)."""
    tick: float = 0.2
    cut_every: float = 0.5
    timeout: float = 25.0
    max_normal: int = 500
    rtt_median: float = 0.080
    rtt_p99: float = 0.400
    release_spread: float = 0.0
    """Seconds over which the answers of a whole-room release leave the server
    (a share of the room: that share of it), uniformly; 0: all at the tick."""
    sample: int = 50_000
    join: float = 10.0
    warmup: float = 30.0
    window: float = 300.0
    seed: int = 1

    @property
    def tier(self) -> Tier:
        return tier_for(parse_tiers(self.tiers), self.room) if self.policy else Tier(0, 0.0)

    @property
    def listeners(self) -> int:
        return min(self.room, self.sample)


@dataclass(slots=True)
class Result:
    """What one run measured; counts are the sample's, rates scaled to the room."""

    room: int
    rate: float
    policy: str
    interval: float
    jitter: float
    listeners: int
    scale: float
    requests_per_listener_min: float
    room_requests_per_s: float
    room_peak_requests_per_s: float
    """The busiest whole second of the window, scaled to the room."""
    empty_share: float
    """Share of answers that were empty (timeouts)."""
    normal_sent: int
    """Normal messages of the window times listeners of the sample."""
    normal_delivered: int
    normal_gap: int
    important_expected: int
    important_delivered: int
    important_lost: int
    important_p50_ms: float
    important_p99_ms: float
    important_max_ms: float
    important_hold_max_ms: float
    """Longest part of an important delivery the server added (answer minus the
    later of the message's and the poll's arrival)."""
    seconds: float = 0.0
    """Wall time of the run."""
    extra: dict[str, float] = field(default_factory=dict)


# -- the room's messages and the client's round trips -------------------------------


def message_times(sc: Scenario, rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
    """Normal and important arrival times over [0, warmup + window)."""
    end = sc.warmup + sc.window
    if sc.rate <= 0:
        normal = np.empty(0)
    elif sc.arrivals == "fixed":
        normal = np.arange(rng.random() / sc.rate, end, 1.0 / sc.rate)
    else:
        # A Poisson process conditioned on its expected count: that many uniform
        # times, sorted. Gaps stay exponential (bursts and lulls as in Poisson),
        # but every run has exactly the stated rate, so runs compare.
        normal = np.sort(rng.random(round(end * sc.rate)) * end)
    if sc.important_every > 0:
        important = np.arange(rng.random() * sc.important_every, end, sc.important_every)
        # Each one at its own phase of the room's ticks (a sender's timer and the
        # room's ticker drift apart); the spacing stays every +- half a tick.
        important = np.sort(important + (rng.random(important.size) - 0.5) * sc.tick)
        important = important[(important >= 0) & (important < end)]
    else:
        important = np.empty(0)
    return normal.astype(np.float64), important.astype(np.float64)


class Rtt:
    """Round trips from an answer leaving the server to the next poll arriving."""

    def __init__(self, median: float, p99: float, rng: np.random.Generator) -> None:
        if median <= 0 or p99 < median:
            raise ValueError("the round trip needs 0 < median <= p99")
        self.median = median
        self.sigma = math.log(p99 / median) / Z99
        self.rng = rng

    def draw(self, n: int) -> FloatArray:
        if self.sigma == 0:
            return np.full(n, self.median)
        return self.median * np.exp(self.sigma * self.rng.standard_normal(n))


# -- what the window saw ----------------------------------------------------------


class Tally:
    """Counts requests and answers of the measured window [w0, w1)."""

    def __init__(self, sc: Scenario, normal: FloatArray, important: FloatArray) -> None:
        self.w0 = sc.warmup
        self.w1 = sc.warmup + sc.window
        self.max_normal = sc.max_normal
        self.important = important
        self.bins = np.zeros(max(1, math.ceil(sc.window)), dtype=np.int64)
        self.answers = 0
        self.empty = 0
        # Messages of the window, as index ranges into the arrival arrays.
        self.n0, self.n1 = np.searchsorted(normal, [self.w0, self.w1])
        self.i0, self.i1 = np.searchsorted(important, [self.w0, self.w1])
        self.delivered = 0
        self.gap = 0
        self.latency: list[FloatArray] = []
        self.hold: list[FloatArray] = []

    def requests(self, arrived: FloatArray) -> None:
        """Polls that reached the server at these times."""
        inside = arrived[(arrived >= self.w0) & (arrived < self.w1)]
        if inside.size:
            self.bins += np.bincount((inside - self.w0).astype(np.int64),
                                     minlength=self.bins.size)[: self.bins.size]

    def answered(self, at: FloatArray, arrived: FloatArray, n_old: IntArray, n_new: IntArray,
                 i_old: IntArray, i_new: IntArray) -> None:
        """Answers leaving at ``at`` to polls that arrived at ``arrived``, moving
        the normal cursor from ``n_old`` to ``n_new`` (the newest ``max_normal``
        delivered, the rest counted in gap) and the important one likewise (all
        delivered)."""
        inside = (at >= self.w0) & (at < self.w1)
        self.answers += int(inside.sum())
        self.empty += int((inside & (n_new == n_old) & (i_new == i_old)).sum())
        split = np.maximum(n_old, n_new - self.max_normal)
        self.delivered += int(_overlap(split, n_new, self.n0, self.n1).sum())
        self.gap += int(_overlap(n_old, split, self.n0, self.n1).sum())
        fresh = i_new - i_old
        for j in range(int(fresh.max(initial=0))):
            pick = fresh > j
            k = i_old[pick] + j
            keep = (k >= self.i0) & (k < self.i1)
            if not keep.any():
                continue
            t_msg = self.important[k[keep]]
            t_out = at[pick][keep]
            self.latency.append(t_out - t_msg)
            self.hold.append(t_out - np.maximum(t_msg, arrived[pick][keep]))


def _overlap(lo: IntArray, hi: IntArray, a: int, b: int) -> IntArray:
    """Length of [lo, hi) ∩ [a, b), element-wise."""
    return np.maximum(0, np.minimum(hi, b) - np.maximum(lo, a))


# -- the two engines ----------------------------------------------------------------


def run_plain(sc: Scenario, normal: FloatArray, important: FloatArray, rtt: Rtt,
              tally: Tally, joins: FloatArray, end: float) -> None:
    """Interval 0, exactly: each round answers every listener's current poll."""
    n = joins.size
    tally.requests(joins)  # first polls answer at once
    out = joins.copy()  # when each listener's last answer left
    n_cur = np.searchsorted(normal, out, side="right").astype(np.int64)
    i_cur = np.searchsorted(important, out, side="right").astype(np.int64)
    never = np.array([math.inf])
    normal_next = np.concatenate([normal, never])
    important_next = np.concatenate([important, never])
    idx = np.arange(n)
    while idx.size:
        arrived = out[idx] + rtt.draw(idx.size)
        go = arrived < end
        idx, arrived = idx[go], arrived[go]
        if not idx.size:
            break
        tally.requests(arrived)
        n_at = np.searchsorted(normal, arrived, side="right")
        i_at = np.searchsorted(important, arrived, side="right")
        pending = (n_at > n_cur[idx]) | (i_at > i_cur[idx])
        following = np.minimum(normal_next[n_at], important_next[i_at])
        at = np.where(pending, arrived,
                      np.where(following <= arrived + sc.timeout, following,
                               arrived + sc.timeout))
        n_new = np.searchsorted(normal, at, side="right").astype(np.int64)
        i_new = np.searchsorted(important, at, side="right").astype(np.int64)
        tally.answered(at, arrived, n_cur[idx], n_new, i_cur[idx], i_new)
        out[idx] = at
        n_cur[idx] = n_new
        i_cur[idx] = i_new


def run_tiered(sc: Scenario, tier: Tier, normal: FloatArray, important: FloatArray,
               rtt: Rtt, tally: Tally, joins: FloatArray, end: float,
               rng: np.random.Generator) -> dict[str, float]:
    """Interval > 0: polls arrive in continuous time, releases happen at ticks."""
    n = joins.size
    inf = math.inf
    arrive = joins.copy()  # next poll's arrival; inf while held (or done)
    first = np.ones(n, dtype=bool)
    opening = np.zeros(n, dtype=bool)  # a first poll held until its pace is due
    held = np.zeros(n, dtype=bool)
    held_since = np.zeros(n)
    arrived_at = np.zeros(n)
    due = np.zeros(n)
    n_cur = np.zeros(n, dtype=np.int64)
    i_cur = np.zeros(n, dtype=np.int64)
    last_cut = -inf
    cut_upto = 0  # important messages (a count) the last cut-through released
    cut_late = False  # a poll that missed the last cut-through was held since
    cuts = 0
    at_once = 0

    def answer(idx: IntArray, at: FloatArray, count: bool) -> None:
        n_new = np.searchsorted(normal, at, side="right").astype(np.int64)
        i_new = np.searchsorted(important, at, side="right").astype(np.int64)
        if count:
            tally.answered(at, arrived_at[idx], n_cur[idx], n_new, i_cur[idx], i_new)
            nonempty = (n_new > n_cur[idx]) | (i_new > i_cur[idx])
        else:  # a first poll's answer: it sets ``last``
            nonempty = np.ones(idx.size, dtype=bool)
        moved = idx[nonempty]
        due[moved] = at[nonempty] + tier.interval + tier.jitter * rng.random(moved.size)
        n_cur[idx] = n_new
        i_cur[idx] = i_new
        nxt = at + rtt.draw(idx.size)
        arrive[idx] = np.where(nxt < end, nxt, inf)

    ticks = math.ceil(end / sc.tick)
    for k in range(1, ticks + 1):
        t = k * sc.tick
        # Polls arriving before this tick, in time order: an answer at once can
        # bring the next poll back before the tick as well.
        while True:
            idx = np.flatnonzero(arrive <= t)
            if not idx.size:
                break
            when = arrive[idx]
            tally.requests(when)
            arrived_at[idx] = when
            is_first = first[idx]
            pending = ((np.searchsorted(normal, when, side="right") > n_cur[idx])
                       | (np.searchsorted(important, when, side="right") > i_cur[idx]))
            now = ~is_first & pending & (when >= due[idx])
            at_once += int(now.sum())
            if is_first.any():
                # A first poll is paced like any other: with no context it
                # counts as answered just now, so it is held one interval and
                # then answered (the recent messages, cursors at the heads).
                f, w = idx[is_first], when[is_first]
                first[f] = False
                opening[f] = True
                held[f] = True
                held_since[f] = w
                arrive[f] = inf
                due[f] = w + tier.interval + tier.jitter * rng.random(f.size)
                n_cur[f] = np.searchsorted(normal, w, side="right")
                i_cur[f] = np.searchsorted(important, w, side="right")
                idx, when, now = idx[~is_first], when[~is_first], now[~is_first]
            if now.any():
                answer(idx[now], when[now], count=True)
            wait = idx[~now]
            held[wait] = True
            held_since[wait] = when[~now]
            arrive[wait] = inf
            if wait.size and bool((i_cur[wait] < cut_upto).any()):
                cut_late = True
        hold = np.flatnonzero(held)
        if not hold.size:
            continue
        n_head = int(np.searchsorted(normal, t, side="right"))
        i_head = int(np.searchsorted(important, t, side="right"))
        imp = i_cur[hold] < i_head
        pending = imp | (n_cur[hold] < n_head)
        # The server's own rule; ticks are exact multiples here, so a hair of
        # slack keeps float rounding from skipping a tick the server would take.
        fire = cut_fires(i_head, cut_upto, cut_late, t + 1e-9, last_cut, sc.cut_every)
        if fire:
            cut_upto, cut_late = i_head, False
            # Only a cut that answers somebody spaces the next one (as the
            # server's ticker does): a room whose polls all had the message
            # already owes nobody.
            if bool(imp.any()):
                last_cut = t
                cuts += 1
        opens = opening[hold]
        release = ((pending | opens) & (t >= due[hold])) | (imp & fire)
        expired = ~pending & ~opens & (t >= held_since[hold] + sc.timeout)
        go = release | expired
        if go.any():
            idx = hold[go]
            held[idx] = False
            at = np.full(idx.size, t)
            if sc.release_spread > 0:
                at += rng.random(idx.size) * sc.release_spread * idx.size / n
            first_answer = opens[go]
            opening[idx] = False
            if first_answer.any():
                answer(idx[first_answer], at[first_answer], count=False)
            if not first_answer.all():
                answer(idx[~first_answer], at[~first_answer], count=True)
    return {"cuts": float(cuts), "answered_on_arrival": float(at_once)}


def simulate(sc: Scenario) -> Result:
    """Run one scenario and measure its window."""
    started = time.perf_counter()
    rng = np.random.default_rng(sc.seed)
    normal, important = message_times(sc, rng)
    rtt = Rtt(sc.rtt_median, sc.rtt_p99, rng)
    n = sc.listeners
    scale = sc.room / n
    end = sc.warmup + sc.window + GRACE
    joins = np.sort(rng.random(n) * sc.join)
    tally = Tally(sc, normal, important)
    tier = sc.tier
    extra: dict[str, float] = {}
    if tier.interval <= 0:
        run_plain(sc, normal, important, rtt, tally, joins, end)
    else:
        extra = run_tiered(sc, tier, normal, important, rtt, tally, joins, end, rng)
    requests = int(tally.bins.sum())
    latency = np.concatenate(tally.latency) if tally.latency else np.empty(0)
    hold = np.concatenate(tally.hold) if tally.hold else np.empty(0)
    expected = n * int(tally.i1 - tally.i0)

    def pct(q: float) -> float:
        return float(np.percentile(latency, q) * 1000) if latency.size else math.nan

    return Result(
        room=sc.room, rate=sc.rate, policy="on" if sc.policy else "off",
        interval=tier.interval, jitter=tier.jitter, listeners=n, scale=scale,
        requests_per_listener_min=requests / n / (sc.window / 60),
        room_requests_per_s=requests * scale / sc.window,
        room_peak_requests_per_s=float(tally.bins.max()) * scale,
        empty_share=tally.empty / tally.answers if tally.answers else 0.0,
        normal_sent=n * int(tally.n1 - tally.n0),
        normal_delivered=tally.delivered, normal_gap=tally.gap,
        important_expected=expected, important_delivered=int(latency.size),
        important_lost=expected - int(latency.size),
        important_p50_ms=pct(50), important_p99_ms=pct(99),
        important_max_ms=float(latency.max() * 1000) if latency.size else math.nan,
        important_hold_max_ms=float(hold.max() * 1000) if hold.size else math.nan,
        seconds=time.perf_counter() - started, extra=extra,
    )


# -- the table ---------------------------------------------------------------------


def _si(value: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}"


def _tier_text(r: Result) -> str:
    if r.interval <= 0:
        return "plain"
    return f"{r.interval:g} s" + (f"+{r.jitter:g}" if r.jitter else "")


def render(results: Sequence[Result], sc: Scenario) -> str:
    """The two tables: requests (off vs on) and deliveries."""
    rtt = (f"log-normal, median {sc.rtt_median * 1000:g} ms, p99 {sc.rtt_p99 * 1000:g} ms"
           if sc.rtt_p99 > sc.rtt_median else f"constant {sc.rtt_median * 1000:g} ms")
    lines = [
        f"adaptive hold, simulated: tiers {sc.tiers or 'off'}; tick {sc.tick:g} s, "
        f"cut-through every {sc.cut_every:g} s, poll timeout {sc.timeout:g} s",
        f"messages: RATE normal/s ({sc.arrivals}) + 1 important every "
        f"{sc.important_every:g} s; round trip {rtt}",
        f"window {sc.window:g} s after {sc.warmup:g} s of warm-up; up to {sc.sample:,} "
        f"listeners simulated per room, figures scaled to the room",
        "",
        "Requests (polls reaching the server)",
        f"{'room':>11} {'tier':>7} {'rate/s':>6} | {'per listener/min':^22} | "
        f"{'room requests/s':^17} | {'busiest s':>9}",
        f"{'':>11} {'':>7} {'':>6} | {'off':>6} {'on':>6} {'cut':>8} | "
        f"{'off':>8} {'on':>8} | {'on':>9}",
    ]
    by_key = {(r.room, r.rate, r.policy): r for r in results}
    rooms = sorted({r.room for r in results})
    rates = sorted({r.rate for r in results})
    for room in rooms:
        for rate in rates:
            off, on = by_key.get((room, rate, "off")), by_key.get((room, rate, "on"))
            ref = on or off
            if ref is None:
                continue
            cut = (f"{(1 - on.requests_per_listener_min / off.requests_per_listener_min):8.1%}"
                   if on and off and off.requests_per_listener_min else f"{'':>8}")
            lines.append(
                f"{room:>11,} {_tier_text(ref):>7} {rate:>6g} | "
                f"{f'{off.requests_per_listener_min:.1f}' if off else '-':>6} "
                f"{f'{on.requests_per_listener_min:.1f}' if on else '-':>6} {cut} | "
                f"{_si(off.room_requests_per_s) if off else '-':>8} "
                f"{_si(on.room_requests_per_s) if on else '-':>8} | "
                f"{_si(on.room_peak_requests_per_s) if on else '-':>9}")
    lines += [
        "",
        "Deliveries (important: message reaching the proxy -> answer leaving; "
        "'held' = the part the server added)",
        f"{'room':>11} {'rate/s':>6} {'pol':>3} | {'important ms':^25} | "
        f"{'lost':>4} | {'normal messages x listeners (sample)':^38} | {'empty':>5}",
        f"{'':>11} {'':>6} {'':>3} | {'p50':>5} {'p99':>5} {'max':>6} {'held':>6} | "
        f"{'':>4} | {'sent':>13} {'delivered':>13} {'gap':>10} | {'ans.':>5}",
    ]
    for r in sorted(results, key=lambda r: (r.room, r.rate, r.policy)):
        lines.append(
            f"{r.room:>11,} {r.rate:>6g} {r.policy:>3} | {r.important_p50_ms:5.0f} "
            f"{r.important_p99_ms:5.0f} {r.important_max_ms:6.0f} "
            f"{r.important_hold_max_ms:6.0f} | {r.important_lost:>4} | "
            f"{r.normal_sent:>13,} {r.normal_delivered:>13,} {r.normal_gap:>10,} | "
            f"{r.empty_share:5.1%}")
    return "\n".join(lines)


def headline(results: Sequence[Result], room: int = 10_000_000, rate: float = 1.0,
             target: float = 0.80) -> str | None:
    """The requirement: the top tier cuts requests by ``target`` with nothing lost."""
    by_key = {(r.room, r.rate, r.policy): r for r in results}
    off, on = by_key.get((room, rate, "off")), by_key.get((room, rate, "on"))
    if off is None or on is None:
        return None
    cut = 1 - on.requests_per_listener_min / off.requests_per_listener_min
    lost = on.important_lost + off.important_lost
    ok = cut >= target and lost == 0
    return (f"{'PASS' if ok else 'FAIL'}: {room:,} online, {rate:g} msg/s: the policy cuts "
            f"requests by {cut:.1%} (need >= {target:.0%}), "
            f"{on.requests_per_listener_min:.1f} vs {off.requests_per_listener_min:.1f} "
            f"per listener per minute; important lost {lost}; important p99 "
            f"{on.important_p99_ms:.0f} ms, max {on.important_max_ms:.0f} ms with the policy")


# -- command line ------------------------------------------------------------------


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(float(x)) for x in text.split(",") if x.strip())


class _Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The docstring as written, and every option's default."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=_Formatter)
    room = parser.add_argument_group("room and traffic")
    room.add_argument("--rooms", type=_ints, default=",".join(map(str, DEFAULT_ROOMS)),
                      help="room sizes (online listeners), comma-separated")
    room.add_argument("--rates", type=_floats, default=",".join(f"{r:g}" for r in DEFAULT_RATES),
                      help="normal messages a second, comma-separated")
    room.add_argument("--arrivals", choices=("poisson", "fixed"), default="poisson",
                      help="normal messages as a Poisson process or evenly spaced")
    room.add_argument("--important-every", type=float, default=10.0,
                      help="seconds between important messages, on top of the rate "
                           "(0: none)")
    room.add_argument("--policy", choices=("both", "on", "off"), default="both",
                      help="which runs: tiers applied, interval 0 everywhere, or both")
    pol = parser.add_argument_group("policy (the server's defaults)")
    pol.add_argument("--tiers", default=DEFAULT_TIERS,
                     help="ONLINE:INTERVAL[+JITTER],... in seconds, or 'off'")
    pol.add_argument("--tick", type=float, default=0.2, help="room tick, seconds")
    pol.add_argument("--cut-every", type=float, default=0.5,
                     help="least spacing of two important cut-throughs, seconds")
    pol.add_argument("--timeout", type=float, default=25.0, help="poll timeout, seconds")
    pol.add_argument("--max-normal", type=int, default=500,
                     help="normal messages an answer carries at most")
    cli = parser.add_argument_group("client")
    cli.add_argument("--rtt-median", type=float, default=80.0,
                     help="round trip (answer out -> next poll in), median, ms")
    cli.add_argument("--rtt-p99", type=float, default=400.0,
                     help="round trip p99, ms (log-normal; equal to the median: constant)")
    pol.add_argument("--release-spread", type=float, default=0.0,
                     help="what if: seconds a node takes to send the answers of a whole-room "
                          "release (server CPU, otherwise not modelled); answers leave "
                          "uniformly over it, a partial release over its share")
    run = parser.add_argument_group("run")
    run.add_argument("--sample", type=int, default=50_000,
                     help="listeners simulated per room at most (the rest scaled)")
    run.add_argument("--join", type=float, default=10.0,
                     help="listeners' first polls spread over this many seconds")
    run.add_argument("--warmup", type=float, default=30.0, help="seconds not measured")
    run.add_argument("--window", type=float, default=300.0, help="seconds measured")
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--jobs", type=int, default=2,
                     help="runs in parallel (processes)")
    run.add_argument("--quick", action="store_true",
                     help="smoke run: 2000 listeners, 40 s window, 20 s warm-up")
    run.add_argument("--json", action="store_true",
                     help="print the results as JSON (stdout) instead of the tables")
    return parser


def scenarios(args: argparse.Namespace) -> tuple[Scenario, list[Scenario]]:
    """The base scenario (for the header) and every run the arguments ask for."""
    parse_tiers(args.tiers)  # fail early on a bad table
    base = Scenario(
        room=0, rate=0.0, policy=True, tiers=args.tiers, arrivals=args.arrivals,
        important_every=args.important_every, tick=args.tick, cut_every=args.cut_every,
        timeout=args.timeout, max_normal=args.max_normal,
        rtt_median=args.rtt_median / 1000, rtt_p99=args.rtt_p99 / 1000,
        release_spread=args.release_spread, sample=args.sample, join=args.join,
        warmup=args.warmup, window=args.window, seed=args.seed)
    if args.quick:
        base = replace(base, sample=min(base.sample, 2000), window=min(base.window, 40.0),
                       warmup=min(base.warmup, 20.0))
    policies = {"both": (False, True), "on": (True,), "off": (False,)}[args.policy]
    # One seed per rate: every room size and both policies see the same messages.
    runs = [replace(base, room=room, rate=rate, policy=p, seed=base.seed + i)
            for room in args.rooms for i, rate in enumerate(args.rates) for p in policies]
    return base, runs


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        base, runs = scenarios(args)
    except ValueError as exc:
        print(f"sim_hold: {exc}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    results: list[Result] = []
    print(f"sim_hold: {len(runs)} runs, {args.jobs} at a time", file=sys.stderr)
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for i, (sc, res) in enumerate(zip(runs, pool.map(simulate, runs), strict=True), 1):
            results.append(res)
            print(f"  [{i}/{len(runs)}] room {sc.room:,}, {sc.rate:g} msg/s, policy "
                  f"{res.policy}: {res.requests_per_listener_min:.1f} requests/listener/min "
                  f"({res.seconds:.1f} s)", file=sys.stderr, flush=True)
    took = time.perf_counter() - started
    line = headline(results)
    if args.json:
        json.dump({"parameters": asdict(base), "seconds": took,
                   "headline": line, "results": [asdict(r) for r in results]},
                  sys.stdout, indent=1)
        print()
    else:
        print(render(results, base))
        if line:
            print("\n" + line)
        print(f"\n({len(runs)} runs in {took:.0f} s; same seed, same figures)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
