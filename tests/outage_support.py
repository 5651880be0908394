"""A redis-server of a test's own that the test stops and restarts (AOF): outages, and anything a test must not do
to the shared server."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

import kiq
from tests.sentinel_support import free_port
from tests.support import redis_server_binary, wait_until


class AofRedis:
    """A redis-server with AOF (``appendfsync always``) in a directory of its own; ``stop`` takes it away, ``start``
    brings it back on the same port and directory.

    ``stop("kill")`` is SIGKILL mid-traffic, as a crash (only what the AOF holds survives); ``stop("term")`` is
    SIGTERM mid-traffic, as an operator's stop (Redis finishes its command, writes its AOF, and closes every
    connection without sending what it had not sent yet). Either can catch a fetch with its reply lost.
    ``stop("pause")`` first pauses every client's writes (``CLIENT PAUSE WRITE``), waits until what was executed has
    been answered, then kills it: no fetch is caught so. With basic fetch such a fetch loses its jobs
    (an at-most-once window of basic fetch, docs/guide/guarantees.md), which is not the failure path a test of held
    outcomes is about."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir()
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> AofRedis:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", "",
                "--appendonly", "yes", "--appendfsync", "always"]  # fmt: skip
        with open(self.dir / "server.log", "ab") as log:
            self.process = subprocess.Popen([redis_server_binary(), *args], stdout=log, stderr=subprocess.STDOUT)
        wait_until(self._answers, 20, message=f"redis-server on {self.port}")
        return self

    def stop(self, how: str = "pause") -> None:
        assert self.process is not None and how in ("pause", "kill", "term"), how
        if self.process.poll() is None:
            if how == "pause":
                pauser = redis.Redis(port=self.port, decode_responses=True)
                try:
                    pauser.execute_command("CLIENT", "PAUSE", 600_000, "WRITE")
                    # the pause's OK may leave before the replies of commands run in the same turn of Redis's event
                    # loop (a basic fetch's pop, in the AOF already: its job lost with the reply): kill only once
                    # every other client's reply is sent (CLIENT LIST runs in a later turn; obl/oll: unsent output)
                    me = pauser.client_id()
                    wait_until(lambda: all(c["obl"] == "0" and c["oll"] == "0" for c in pauser.client_list()
                                           if int(c["id"]) != me), 5, message="the replies sent")  # fmt: skip
                finally:
                    pauser.close()
            self.process.send_signal(signal.SIGTERM if how == "term" else signal.SIGKILL)
        self.process.wait(20)

    def client(self) -> redis.Redis:
        """A client of this server that answers text."""
        return redis.Redis(port=self.port, decode_responses=True)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(20)

    def _answers(self) -> bool:
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()


@contextmanager
def aof_redis(directory: Path) -> Iterator[AofRedis]:
    """A started ``AofRedis``, killed at the end."""
    server = AofRedis(directory).start()
    try:
        yield server
    finally:
        server.kill()


@contextmanager
def config_at_maxmemory(directory: Path) -> Iterator[tuple[kiq.Config, redis.Redis]]:
    """A config on a redis-server of its own that refuses every write needing memory, and an admin client of that
    server (``admin.config_set("maxmemory", 0)`` lets writes in again)."""
    with aof_redis(directory) as server:
        config = kiq.Config(redis_url=server.url)
        admin = redis.Redis(port=server.port, decode_responses=True)
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", 1)
        try:
            yield config, admin
        finally:
            admin.close()
            config.redis.close()
