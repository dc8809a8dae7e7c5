"""Prometheus metrics of one node, in one process or summed over the workers of
``liveroom serve --workers N``.

**One process** (the default): every node has a registry of its own, so several
nodes can live in one test process without clashing, and a tracked gauge reads
its value (held polls, cached rooms, ...) when it is rendered.

**Workers** (prometheus-client's multiprocess mode: ``PROMETHEUS_MULTIPROC_DIR``
set before ``prometheus_client`` is imported, as the supervisor does for each
worker): values live in files of that directory, one per process, and
``GET /metrics`` on any worker renders every worker's. Counters are summed over
every worker that ran, the dead included, so a total never goes back when a
worker is restarted; gauges are summed over the live workers (``livesum``: the
supervisor marks a dead worker's files dead). A file cannot call back into the
process that wrote it, so a tracked gauge is written from its read function
instead: whenever its own worker renders, and every :meth:`Metrics.refresh_every`
seconds (the other workers' figures are at most that old). Limits of the mode:
one :class:`Metrics` per process (two would write the same values of one file),
no ``_created`` series, no per-worker breakdown.
"""

from __future__ import annotations

import asyncio
import glob
import os
from collections.abc import Callable, Iterable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, values
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector

from . import __version__, build


def multiprocess() -> bool:
    """Whether prometheus-client chose its multiprocess mode when imported."""
    return bool(getattr(values.ValueClass, "_multiprocess", False))


class TrackedGauge(Gauge):
    """A gauge whose value is read from a function.

    One process: ``set_function``, read when rendered. Multiprocess: the value
    is written by :meth:`refresh`; as with ``set_function``, other writes are
    ignored once the gauge is tracked (a cache that sets its own size to a gauge
    that sums two caches must not overwrite the sum).
    """

    _read: Callable[[], float] | None = None

    def track(self, read: Callable[[], float]) -> None:
        if multiprocess():
            self._read = read
        else:
            self.set_function(read)

    def set(self, value: float) -> None:
        if self._read is None:
            super().set(value)

    def refresh(self) -> None:
        if self._read is not None:
            super().set(self._read())


class Metrics:
    def __init__(self) -> None:
        self.multiprocess = multiprocess()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._tracked: list[TrackedGauge] = []
        self._before_render: list[Callable[[], None]] = []
        self._refresh: asyncio.TimerHandle | None = None

        def gauge(name: str, documentation: str) -> TrackedGauge:
            return TrackedGauge(name, documentation, registry=r, multiprocess_mode="livesum")

        self.held_polls = gauge("liveroom_held_polls", "Polls held waiting for messages")
        self.connections = gauge("liveroom_connections",
                                 "Client connections open (listener front and aiohttp)")
        self.refused_connections = Counter(
            "liveroom_connections_refused",
            "Connections refused past --connections-max (answered 503)", registry=r)
        self.shed_connections = Counter(
            "liveroom_connections_shed",
            "Connections the front closed to protect the node, by reason", ["reason"],
            registry=r)
        self.polls = Counter("liveroom_polls", "Polls answered", ["outcome"], registry=r)
        # The roles are imported by the time a node makes its metrics.
        Gauge("liveroom_build_info",
              "The build this node runs (1): its listener path compiled or pure Python, "
              "and the version", ["build", "version"], registry=r,
              multiprocess_mode="max").labels(build.kind(), __version__).set(1)
        self.deliveries = Counter("liveroom_delivered_messages",
                                  "Messages delivered in poll answers", ["kind"], registry=r)
        self.refused_polls = Counter("liveroom_polls_refused",
                                     "Polls answered 503 instead of held", ["reason"],
                                     registry=r)
        self.superseded_polls = Counter(
            "liveroom_polls_superseded",
            "Held polls answered empty because a newer poll of the same listener came",
            registry=r)
        self.sends = Counter("liveroom_sends", "Sends", ["outcome"], registry=r)
        self.masked_sends = Counter(
            "liveroom_masked_sends", "Sends stored with words a mask list of the word filter "
            "holds masked (also counted as stored)", registry=r)
        self.moderation_actions = Counter(
            "liveroom_moderation_actions", "Moderation through this node, by action (mute, "
            "unmute, ban, unban, slow, recall: a moderator's or the backend's; own_recall: a "
            "sender's of its own message; approve, deny: a held message's review)", ["action"],
            registry=r)
        self.review_held = Counter(
            "liveroom_review_held", "Messages held for review through this node (a word "
            "filter's or the send hook's)", registry=r)
        self.review_dropped = Counter(
            "liveroom_review_dropped", "Held messages a full review queue dropped (the oldest, "
            "pushed out by a hold through this node)", registry=r)
        self.send_hook_calls = Counter(
            "liveroom_send_hook_calls", "Calls to the send hook's backend, by outcome (ok; "
            "error: no answer, or not 200; timeout: none within --send-hook-timeout; "
            "bad_answer: not a valid verdict for each of its messages)", ["outcome"],
            registry=r)
        self.send_hook_messages = Counter(
            "liveroom_send_hook_messages", "Sends the send hook screened, by the backend's "
            "verdict (accept, reject, hold) or, where --send-hook-failure decided, by why "
            "(late, failed, circuit: it was open, stopped: the node was)", ["verdict"],
            registry=r)
        self.send_hook_circuit = gauge(
            "liveroom_send_hook_circuit_open", "1 while the send hook's circuit is open (or "
            "trying one call): screened sends get --send-hook-failure without a call")
        self.send_hook_opened = Counter(
            "liveroom_send_hook_circuit_opened", "Times the send hook's circuit opened (after "
            "--send-hook-trip failed calls in a row)", registry=r)
        self.webhook_queued = Counter(
            "liveroom_webhook_events", "Events this node wrote to the webhooks' outbox, by "
            "type", ["type"], registry=r)
        self.webhook_lost = Counter(
            "liveroom_webhook_events_lost", "Events whose outbox write failed (the store was "
            "unavailable): their actions stand, the backend never hears of them", registry=r)
        self.webhook_delivered = Counter(
            "liveroom_webhook_delivered", "Events this node delivered (the backend answered "
            "2xx)", registry=r)
        self.webhook_attempts = Counter(
            "liveroom_webhook_attempts_failed", "Delivery attempts that failed, by why "
            "(status: an answer but 2xx; error: no answer; timeout), each retried",
            ["why"], registry=r)
        self.webhook_failed = Counter(
            "liveroom_webhook_failed", "Events this node gave up after --webhook-retry-for "
            "(kept in the failed list: liveroom webhooks failed)", registry=r)
        self.webhook_lag = gauge(
            "liveroom_webhook_lag_seconds", "Seconds the oldest event this node holds for "
            "delivery has waited since its action (0: none waiting, or this node does not "
            "deliver)")
        self.webhook_holding = gauge(
            "liveroom_webhook_events_held", "Events read from the outbox and not yet "
            "delivered by this node (0 unless it holds the delivery lease)")
        self.webhook_lease = gauge(
            "liveroom_webhook_lease", "1 while this node holds the webhooks' delivery lease")
        self.gifts = Counter("liveroom_gifts", "Gifts given through this node", registry=r)
        self.gift_value = Counter("liveroom_gift_value",
                                  "The value of the gifts given through this node (the "
                                  "backend's unit)", registry=r)
        self.pulls = Counter("liveroom_pulls", "Room pulls from the store", registry=r)
        self.pull_batches = Counter("liveroom_pull_batches", "Batched store reads", registry=r)
        self.notifies = Counter("liveroom_notifies", "Notifies received", registry=r)
        self.store_errors = Counter("liveroom_store_errors", "Store operations that failed",
                                    ["op"], registry=r)
        self.rooms = gauge("liveroom_cached_rooms", "Rooms in the recvsvr cache")
        self.evictions = Counter("liveroom_cache_evictions",
                                 "Rooms evicted from a full recvsvr cache (rooms_max)",
                                 registry=r)
        self.undecodable = Counter("liveroom_undecodable_entries",
                                   "Store entries recvsvr could not decode and skipped",
                                   registry=r)
        self.heartbeats = Counter("liveroom_heartbeats",
                                  "Heartbeats taken by this statsvr node", registry=r)
        self.members = gauge("liveroom_statsvr_members",
                             "Online members in this statsvr node's tables")
        self.merged_rooms = gauge("liveroom_statsvr_rooms",
                                  "Rooms whose online view this node merges")
        self.vip_moves = Counter(
            "liveroom_vip_moves", "Rooms this node moved between sects, by direction "
            "(to_vip, to_normal) and reason (auto: the rule; pin, operator: an operator)",
            ["direction", "reason"], registry=r)
        self.likes_taps = Counter("liveroom_likes_taps",
                                  "Taps acknowledged (a like request carries 1 to 100)",
                                  registry=r)
        self.likes_refused = Counter(
            "liveroom_likes_refused", "Like requests refused by this node's bounds, by reason "
            "(rate_limited: the uid's windows; full: the rooms or uids it may hold)",
            ["reason"], registry=r)
        self.likes_flushes = Counter("liveroom_likes_flushes",
                                     "Writes of this node's likes to the store, by outcome",
                                     ["outcome"], registry=r)
        self.likes_pending = gauge("liveroom_likes_pending_taps",
                                   "Taps acknowledged and not yet written to the store")
        self.likes_flush_lag = gauge("liveroom_likes_flush_lag_seconds",
                                     "Seconds the oldest taps not yet written have waited")
        self.tasks = gauge("liveroom_asyncio_tasks", "Tasks alive on the event loop")
        self.track(self.tasks, lambda: len(asyncio.all_tasks()))
        self.workers = gauge("liveroom_workers",
                             "Worker processes alive (1 without serve --workers)")
        self.workers.set(1)

    def track(self, gauge: Gauge, read: Callable[[], float]) -> None:
        """Make ``gauge`` (one of this object's) report ``read()``."""
        if not isinstance(gauge, TrackedGauge):
            raise TypeError(f"{gauge!r} is not a gauge of Metrics")
        gauge.track(read)
        self._tracked.append(gauge)

    def tally(self, counters: Sequence[Counter]) -> list[int]:
        """Counts for ``counters`` (children of this object's counters) kept
        in a list of plain integers, one each, for a hot path to add to (a
        Prometheus increment takes a lock); they are added to the counters
        and zeroed before every render and refresh."""
        kept = tuple(counters)
        counts = [0] * len(kept)

        def flush() -> None:
            for i, counter in enumerate(kept):
                if counts[i]:
                    counter.inc(counts[i])
                    counts[i] = 0

        self.before_render(flush)
        return counts

    def before_render(self, flush: Callable[[], None]) -> None:
        """Call ``flush`` before every render and refresh: counts kept in plain
        integers on a hot path are added to their counters then."""
        self._before_render.append(flush)

    def refresh(self) -> None:
        """Write every tracked gauge's value (multiprocess mode; harmless otherwise).
        Runs on the event loop: a read function may look at loop state."""
        for flush in self._before_render:
            flush()
        if self.multiprocess:
            for gauge in self._tracked:
                gauge.refresh()

    def refresh_every(self, seconds: float) -> None:
        """Refresh the tracked gauges every ``seconds`` on the running loop (a loop
        timer, not a task, so ``liveroom_asyncio_tasks`` does not count it), until
        :meth:`stop_refreshing` or the loop closes. Only multiprocess mode needs it."""
        loop = asyncio.get_running_loop()

        def tick() -> None:
            self._refresh = loop.call_later(seconds, tick)
            self.refresh()

        self.stop_refreshing()
        tick()

    def stop_refreshing(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
            self._refresh = None

    def render(self) -> bytes:
        if not self.multiprocess:
            for flush in self._before_render:
                flush()
            return generate_latest(self.registry)
        self.refresh()
        registry = CollectorRegistry()
        registry.register(WorkerFiles(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
        return generate_latest(registry)


class WorkerFiles:
    """Every worker's values, from the files of ``directory``: prometheus-client's
    ``MultiProcessCollector``, less the files a starting worker has not sized yet.

    A worker opens each new file (0 bytes) before it sizes it: a scrape that
    read it then failed (``struct.error``, a 500 from ``/metrics`` while a
    killed worker came back). An empty file holds no value yet, and a file's
    size never goes back to 0, so skipping the empty ones skips nothing.
    A file gone since the directory was listed (a dead worker's ``live*``
    gauges) is skipped as the library skips it.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def collect(self) -> Iterable[Metric]:
        files = []
        for name in glob.glob(os.path.join(self.directory, "*.db")):
            try:
                if os.stat(name).st_size > 0:
                    files.append(name)
            except FileNotFoundError:
                continue
        merged: Iterable[Metric] = MultiProcessCollector.merge(  # type: ignore[no-untyped-call]
            files, accumulate=True)
        return merged
