"""A local Redis Cluster on loopback: 3 masters and 3 replicas of ``redis-server``.

For the tests (a session fixture in ``conftest.py``) and the KV-load benchmark
(``loadtest/bench_kv.py``). It needs nothing but the ``redis-server`` and
``redis-cli`` binaries of the ``redis-server`` package (7 or later: sharded
pub/sub). Nodes run with ``appendonly yes`` and a short
``cluster-node-timeout``, so a master killed by a test is replaced by its
replica within a few seconds; every process is killed by its PID at the end.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis
from redis.crc import key_slot

NODE_TIMEOUT_MS = 1000
"""``cluster-node-timeout``: a master silent this long is failed over (a
failover then takes about twice this)."""


def _ephemeral_low() -> int:
    """The first port of the kernel's range for outgoing connections (Linux's
    ``ip_local_port_range``; 32768 where it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int) -> list[int]:
    """Ports on 127.0.0.1 nobody listens on now, each with its cluster bus port
    (port + 10000) free as well, both below the range the kernel gives
    outgoing connections: a node killed and started again (a failover test)
    must find its ports free, and a client connection of the suite (thousands
    of them, the hostile ones) could otherwise take one meanwhile."""
    high = min(_ephemeral_low(), 65536) - 10000
    low = max(1024, high - 12000)
    rng = random.Random()
    ports: list[int] = []
    while len(ports) < count:
        port = rng.randrange(low, high)
        if port in ports:
            continue
        try:
            with socket.socket() as sock, socket.socket() as bus:
                sock.bind(("127.0.0.1", port))
                bus.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        ports.append(port)
    return ports


def _client(port: int) -> redis.Redis:
    return redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=2)


class LocalCluster:
    """Six ``redis-server`` processes made one cluster by ``redis-cli --cluster create``."""

    def __init__(self, folder: Path, ports: list[int] | None = None) -> None:
        binary, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if binary is None or cli is None:
            raise RuntimeError("redis-server and redis-cli are needed: run "
                               "scripts/install-test-deps")
        self.binary, self.cli = binary, cli
        self.folder = folder
        self.ports = ports or free_ports(6)
        self._processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """The store URL naming every node as a seed."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    # -- processes ---------------------------------------------------------------

    def start_node(self, port: int) -> None:
        """Start one node (again, after a kill: it rejoins from its nodes.conf)."""
        folder = self.folder / str(port)
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "log").open("ab") as log:
            self._processes[port] = subprocess.Popen(
                [self.binary, "--port", str(port), "--bind", "127.0.0.1",
                 "--dir", str(folder), "--cluster-enabled", "yes",
                 "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                 "--appendonly", "yes", "--save", "", "--daemonize", "no",
                 # A replica that rejoins syncs at once (the default waits 5 s
                 # for more replicas to share one transfer).
                 "--repl-diskless-sync-delay", "0"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            if self._processes[port].poll() is not None:
                raise RuntimeError(f"redis-server on {port} exited; see {folder / 'log'}")
            try:
                with _client(port) as client:
                    client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on {port} did not answer") from None
                time.sleep(0.02)

    def kill(self, port: int) -> None:
        """Kill one node at once (SIGKILL: what a crash looks like)."""
        process = self._processes.pop(port, None)
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)

    def revive(self) -> list[int]:
        """Start again every node that is not running (a test that killed one
        and failed before restarting it); returns their ports."""
        dead = [p for p in self.ports
                if p not in self._processes or self._processes[p].poll() is not None]
        for port in dead:
            self.start_node(port)
        return dead

    def start(self) -> None:
        """Start the six nodes and join them: masters first, one replica each."""
        for port in self.ports:
            self.start_node(port)
        subprocess.run(
            [self.cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
             "--cluster-replicas", "1", "--cluster-yes"],
            check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, timeout=60)
        self.wait_healthy()

    def stop(self) -> None:
        for port in list(self._processes):
            self.kill(port)

    # -- state -------------------------------------------------------------------

    def roles(self) -> dict[int, str]:
        """``master`` or ``slave`` by port, as the running nodes say."""
        roles = {}
        for port in self._processes:
            with _client(port) as client:
                roles[port] = client.execute_command("ROLE")[0].decode()
        return roles

    def masters(self) -> list[int]:
        return sorted(p for p, role in self.roles().items() if role == "master")

    def master_of(self, key: str) -> int:
        """The port of the master serving ``key``'s slot now."""
        slot = key_slot(key.encode())
        for port in self.masters():
            with _client(port) as client:
                layout = client.execute_command("CLUSTER", "SLOTS")
            for start, end, master, *_ in layout:
                if start <= slot <= end:
                    return int(master[1])
        raise RuntimeError(f"no master serves {key!r}")

    def replica_of(self, master: int) -> int:
        """The port of ``master``'s (first) replica."""
        with _client(master) as client:
            replica = client.info("replication")["slave0"]
        return int(replica["port"])

    def node_id(self, port: int) -> str:
        with _client(port) as client:
            return str(client.execute_command("CLUSTER", "MYID").decode())

    def move_slot(self, slot: int, target: int) -> None:
        """Move ``slot`` with its keys to master ``target``, the way
        ``redis-cli --cluster reshard`` does (clients see ``ASK`` while keys
        move, then ``MOVED``)."""
        source = next(p for p in self.masters()
                      if any(start <= slot <= end for start, end in self._slots_of(p)))
        source_id, target_id = self.node_id(source), self.node_id(target)
        with _client(source) as src, _client(target) as dst:
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            while True:
                names = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10)
                if not names:
                    break
                src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000,
                                    "KEYS", *names)
            for port in self.masters():
                with _client(port) as client:
                    client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)

    def _slots_of(self, master: int) -> list[tuple[int, int]]:
        with _client(master) as client:
            layout = client.execute_command("CLUSTER", "SLOTS")
        return [(start, end) for start, end, owner, *_ in layout if int(owner[1]) == master]

    def healthy(self) -> bool:
        """Every node up, the cluster ok on each, 3 masters with a synced replica each."""
        try:
            roles = self.roles()
            if len(roles) != len(self.ports) or sum(r == "master" for r in roles.values()) != 3:
                return False
            for port in roles:
                with _client(port) as client:
                    if b"cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):
                        return False
                    if roles[port] == "master":
                        replicas = client.info("replication")
                        if replicas.get("connected_slaves", 0) < 1 or \
                                replicas.get("slave0", {}).get("state") != "online":
                            return False
            return True
        except (redis.RedisError, OSError):
            return False

    def wait_healthy(self, within: float = 30.0) -> None:
        deadline = time.monotonic() + within
        while not self.healthy():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster is not healthy after {within} s; "
                                   f"see the logs under {self.folder}")
            time.sleep(0.05)

    def flushall(self) -> None:
        """Empty every master (replicas follow) and wait until replicas caught up."""
        for port in self.masters():
            with _client(port) as client:
                client.flushall()
                client.execute_command("WAIT", 1, 2000)
