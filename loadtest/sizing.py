"""A sizing model: what a fleet needs for a room of 1 M or 15 M listeners, or for
100 000 rooms of 100, from the unit costs the benchmarks measured.

Every input is a measured unit cost, named after the benchmark and commit it
comes from (``UNIT_COSTS``; override any with ``--set NAME=VALUE``). The
requests each listener makes come from ``sim_hold.py`` (the adaptive hold's
simulator, checked against real runs by ``bench_hold.py`` and
``bench_room.py``) for the room's size, tiers and message rate. Outputs, per
scenario: requests a second, server cores, nodes, RAM, Redis masters with
their operations and bytes a second, load-balancer connections, and load-test
machines; each line says which measurements it rests on.

    python loadtest/sizing.py                   # the three scenarios, default tiers
    python loadtest/sizing.py --rate 20 --set node_cores=32
    python loadtest/sizing.py --markdown        # the tables of docs/sizing.md

A model, not a promise: it multiplies costs measured on one 2-core machine
(server and load on the same cores) and assumes they scale with cores, which
the ``--workers`` and several-node runs support only up to the machine's size.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, replace

from sim_hold import Scenario, simulate, tier_for

from liveroom.settings import parse_tiers

UNIT_COSTS: dict[str, tuple[float, str]] = {
    "us_per_request": (
        54.0, "server CPU per poll in a tiered room over Redis, µs: 22.0 µs per listener "
              "a second at 24.4 requests per listener a minute, 50 000 listeners on 3 nodes "
              "(bench_room.py, 1b09b2f; 51 at 6a0b5c7)"),
    "us_per_request_plain": (
        62.1, "server CPU per poll in a plain room, µs (bench_fanout.py --scenario plain, "
              "48dbdf7: one message per answer)"),
    "kib_per_held_poll": (
        4.2, "server memory per listener while a room of 50 000 gets 10 msg/s, KiB (3.3 "
             "KiB held and idle; bench_room.py, 1b09b2f; 40.4 at 6a0b5c7, before the "
             "paced heaps were swept)"),
    "bytes_per_member": (
        138.0, "statsvr memory per online member on the node it heartbeats through, bytes "
               "(bench_statsvr.py)"),
    "presence_kb_per_s_100_nodes": (
        89.5, "store bytes a node reads a second for a huge room's presence at 100 nodes, "
              "kB; grows with nodes x shards, not members (bench_presence.py --grid, "
              "891d22e)"),
    "presence_mb_held": (
        25.0, "memory a node holds for a huge room's presence with pages being read, MB "
              "(bench_presence.py --grid, 891d22e, after 50 random pages)"),
    "commands_per_room_node": (
        35.0, "Redis commands a second per (room, node serving it), a busy room "
              "(bench_kv.py, 1 room, ec16e7a)"),
    "commands_per_small_room": (
        9.5, "Redis commands a second per small room, rooms routed to one node each "
             "(bench_kv.py nodes affinity, ec16e7a)"),
    "redis_ops_per_master": (
        100_000.0, "operations a second one Redis master is planned at (a conservative "
                   "share of redis-benchmark's figures for small commands; not measured here)"),
    "node_cores": (16.0, "cores of one server node (an assumption: set yours)"),
    "node_ram_gb": (64.0, "RAM of one server node, GB (an assumption)"),
    "target_cpu": (0.6, "share of a node's cores planned busy (headroom for bursts: an "
                        "important message releases a whole room at once)"),
    "locust_users_top": (
        21_016.0, "listeners one locust process simulates at the top tier (8-10 s), at 100 % "
                  "of a core (bench_locust.py --kind top, 6a0b5c7)"),
    "locust_polls_plain": (
        5_562.0, "polls a second one locust process completes in a plain room "
                 "(bench_locust.py, 891d22e)"),
    "load_machine_cores": (16.0, "cores of one load-test machine (an assumption)"),
}


@dataclass(frozen=True)
class Room:
    name: str
    listeners: int
    rooms: int = 1
    small: bool = False
    """Sized at ``--small-rate`` (a small room chats less than a big one)."""


SCENARIOS = [Room("one room of 1 M", 1_000_000), Room("one room of 15 M", 15_000_000),
             Room("100 000 rooms of 100", 100, rooms=100_000, small=True)]


def requests_per_listener_min(room: int, rate: float, tiers: str, sample: int) -> float:
    """sim_hold's requests per listener per minute for one room (2 seeds)."""
    base = Scenario(room=room, rate=rate, policy=tiers != "off",
                    tiers="" if tiers == "off" else tiers, arrivals="fixed", sample=sample,
                    window=120.0, warmup=20.0)
    runs = [simulate(replace(base, seed=seed)).requests_per_listener_min for seed in (1, 2)]
    return sum(runs) / len(runs)


def size(room: Room, rate: float, tiers: str, costs: dict[str, float],
         sample: int) -> list[tuple[str, str, str]]:
    """``(what, figure, rests on)`` lines for one scenario."""
    c = costs
    listeners = room.listeners * room.rooms
    per_min = requests_per_listener_min(room.listeners, rate, tiers, sample)
    requests = listeners * per_min / 60
    tiered = tiers != "off" and tier_for(parse_tiers(tiers), room.listeners).interval > 0
    us = c["us_per_request"] if tiered else c["us_per_request_plain"]
    cores = requests * us / 1e6 / c["target_cpu"]
    ram_gb = listeners * (c["kib_per_held_poll"] * 1024 + c["bytes_per_member"]) / 1e9
    nodes = max(1, math.ceil(cores / c["node_cores"]),
                math.ceil(ram_gb / (c["node_ram_gb"] * 0.7)))
    if room.rooms == 1:
        commands = nodes * c["commands_per_room_node"]
        # Each node reads the index: one entry per (node, shard), so the
        # total grows with nodes squared.
        presence_mb_s = nodes * c["presence_kb_per_s_100_nodes"] * (nodes / 100) / 1000
        ram_gb += nodes * c["presence_mb_held"] / 1000
    else:
        commands = room.rooms * c["commands_per_small_room"]
        presence_mb_s = 0.0
    masters = max(1, math.ceil(commands / c["redis_ops_per_master"]))
    if tiered:
        load_procs = listeners / c["locust_users_top"]
        load_basis = "locust_users_top"
    else:
        load_procs = requests / c["locust_polls_plain"]
        load_basis = "locust_polls_plain"
    load_machines = math.ceil(load_procs / c["load_machine_cores"])
    return [
        ("listeners", f"{listeners:,}", ""),
        ("requests per listener per minute", f"{per_min:.1f}",
         f"sim_hold.py at {rate:g} msg/s and an important one every 10 s, "
         f"{'tiered' if tiered else 'a plain long poll'}"),
        ("requests a second", f"{requests:,.0f}", "listeners x the line above"),
        ("server cores", f"{cores:,.0f}",
         f"requests x {us:g} µs ({'us_per_request' if tiered else 'us_per_request_plain'}) "
         f"/ target_cpu {c['target_cpu']:g}"),
        ("server RAM", f"{ram_gb:,.0f} GB",
         "kib_per_held_poll + bytes_per_member per listener"
         + (", + presence_mb_held per node" if room.rooms == 1 else "")),
        ("nodes", f"{nodes:,}",
         f"cores / node_cores {c['node_cores']:g}, RAM / 70 % of node_ram_gb "
         f"{c['node_ram_gb']:g}"),
        *([("--vip-spread at least", f"{nodes:,}",
            "a vip room spreads over at most --vip-spread nodes (64 by default): the "
            "load balancer hashes room and routing hint")] if room.rooms == 1 else []),
        ("Redis ops a second", f"{commands:,.0f}",
         "commands_per_room_node x nodes" if room.rooms == 1
         else "commands_per_small_room x rooms"),
        ("Redis bytes out a second (presence)", f"{presence_mb_s * 1000:,.1f} kB",
         "presence_kb_per_s_100_nodes, scaled with nodes" if room.rooms == 1
         else "small rooms: a shard each, read when it changes"),
        ("Redis masters", f"{masters:,}",
         f"ops / redis_ops_per_master {c['redis_ops_per_master']:,.0f} (a vip room's "
         "presence spreads over 16 slots; its log stays in one)"),
        ("load-balancer connections", f"{listeners:,} in + {listeners:,} out",
         "one keep-alive long poll per listener, proxied"),
        ("load-test machines", f"{load_machines:,} ({load_procs:,.0f} locust processes)",
         f"{load_basis} {c[load_basis]:,.0f}, load_machine_cores "
         f"{c['load_machine_cores']:g}"),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=10.0,
                        help="messages a second in a big room (default 10)")
    parser.add_argument("--small-rate", type=float, default=1.0,
                        help="messages a second in each small room (default 1)")
    parser.add_argument("--tiers", default="1000:1,10000:2,100000:5,1000000:8+2",
                        help="the server's --tiers (default: the server's default)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override a unit cost (names: " + ", ".join(UNIT_COSTS) + ")")
    parser.add_argument("--sample", type=int, default=5_000,
                        help="listeners sim_hold follows per room (figures scaled)")
    parser.add_argument("--markdown", action="store_true", help="print markdown tables")
    args = parser.parse_args(argv)
    costs = {name: value for name, (value, _) in UNIT_COSTS.items()}
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in costs:
            parser.error(f"--set {item}: no unit cost named {name!r}")
        costs[name] = float(value)
    print(f"# sizing at {args.rate:g} msg/s in a big room, {args.small_rate:g} in a small "
          f"one, tiers {args.tiers}\n")
    for room in SCENARIOS:
        rate = args.small_rate if room.small else args.rate
        lines = size(room, rate, args.tiers, costs, args.sample)
        if args.markdown:
            print(f"### {room.name}\n\n| | figure | rests on |\n| --- | ---: | --- |")
            for what, figure, basis in lines:
                print(f"| {what} | {figure} | {basis} |")
            print()
        else:
            print(room.name)
            for what, figure, basis in lines:
                print(f"  {what:38} {figure:>28}   {basis}")
            print()
    print("unit costs:")
    for name, (_, source) in UNIT_COSTS.items():
        print(f"  {name} = {costs[name]:g}: {source}")


if __name__ == "__main__":
    main()
