"""Prometheus metrics of one node, in a registry of its own (several nodes can
live in one test process without clashing)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.held_polls = Gauge("liveroom_held_polls", "Polls held waiting for messages",
                                registry=r)
        self.polls = Counter("liveroom_polls", "Polls answered", ["outcome"], registry=r)
        self.deliveries = Counter("liveroom_delivered_messages",
                                  "Messages delivered in poll answers", ["kind"], registry=r)
        self.sends = Counter("liveroom_sends", "Sends", ["outcome"], registry=r)
        self.pulls = Counter("liveroom_pulls", "Room pulls from the store", registry=r)
        self.pull_batches = Counter("liveroom_pull_batches", "Batched store reads", registry=r)
        self.notifies = Counter("liveroom_notifies", "Notifies received", registry=r)
        self.store_errors = Counter("liveroom_store_errors", "Store operations that failed",
                                    ["op"], registry=r)
        self.rooms = Gauge("liveroom_cached_rooms", "Rooms in the recvsvr cache", registry=r)
        self.heartbeats = Counter("liveroom_heartbeats",
                                  "Heartbeats taken by this statsvr node", registry=r)
        self.members = Gauge("liveroom_statsvr_members",
                             "Online members in this statsvr node's tables", registry=r)
        self.merged_rooms = Gauge("liveroom_statsvr_rooms",
                                  "Rooms whose online view this node merges", registry=r)
        self.tasks = Gauge("liveroom_asyncio_tasks", "Tasks alive on the event loop",
                           registry=r)
        self.tasks.set_function(lambda: len(asyncio.all_tasks()))

    def track(self, gauge: Gauge, read: Callable[[], float]) -> None:
        gauge.set_function(read)

    def render(self) -> bytes:
        return generate_latest(self.registry)
