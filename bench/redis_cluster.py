"""A private Redis Cluster for one benchmark run: ``primaries`` redis-servers (bench/redis_server.py) on loopback,
``base_port`` upward, no replicas, the 16,384 slots split evenly in port order; stopped at the end.

Built from Python, as ``redis-cli --cluster create`` would: each node gets its slot range (``CLUSTER
ADDSLOTSRANGE``) and its own config epoch, the first meets the others, then every node must see every other and
report ``cluster_state:ok``. No replicas: a drain doesn't use them, and on a small machine their replication
would take CPU from the primaries being measured.
"""

from __future__ import annotations

import time

import redis

from bench.redis_server import RedisServer

SLOTS = 16384
READY_TIMEOUT = 30.0


class RedisCluster:
    def __init__(self, base_port: int, primaries: int = 3, cpus: set[int] | None = None) -> None:
        if primaries < 1:
            raise ValueError(f"a cluster needs at least one primary, not {primaries}")
        options = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
        self.nodes = [RedisServer(base_port + index, cpus=cpus, options=options) for index in range(primaries)]
        self.url = f"redis+cluster://127.0.0.1:{base_port}"

    def start(self) -> None:
        try:
            for node in self.nodes:
                node.start()
            self._create()
        except BaseException:
            self.stop()
            raise

    def _create(self) -> None:
        clients = self.clients()
        count = len(clients)
        for index, client in enumerate(clients):
            first, last = index * SLOTS // count, (index + 1) * SLOTS // count - 1
            client.cluster("ADDSLOTSRANGE", first, last)
            client.cluster("SET-CONFIG-EPOCH", index + 1)
        for node in self.nodes[1:]:
            clients[0].cluster("MEET", "127.0.0.1", node.port)
        deadline = time.monotonic() + READY_TIMEOUT
        while not all(_ready(client, count) for client in clients):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster on ports {self.ports()} was not ready within {READY_TIMEOUT:.0f} s")
            time.sleep(0.05)

    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def clients(self) -> list[redis.Redis]:
        """A plain client per primary, in port order: for what each node is asked alone (INFO, FLUSHALL)."""
        return [node.client() for node in self.nodes]

    def slot_owners(self) -> dict[tuple[int, int], int]:
        """(first slot, last slot) -> the port of the primary that serves them, as the cluster reports it."""
        ranges = self.nodes[0].client().cluster("SLOTS")
        return {(int(first), int(last)): int(primary[1]) for first, last, primary, *_ in ranges}

    def version(self) -> str:
        return self.nodes[0].version()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _ready(client: redis.Redis, count: int) -> bool:
    info = client.cluster("INFO")
    return bool(info.get("cluster_state") == "ok" and int(info.get("cluster_known_nodes", 0)) == count)


def owner(owners: dict[tuple[int, int], int], slot: int) -> int:
    """The port of the primary that serves ``slot``."""
    for (first, last), port in owners.items():
        if first <= slot <= last:
            return port
    raise KeyError(f"no primary serves slot {slot}")
