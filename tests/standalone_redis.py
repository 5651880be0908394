"""A redis-server of a test's own, on a free loopback port in a temporary directory, with the append-only file on
(``appendfsync always``), that the test stops and starts again: an outage, without touching the shared server."""

from __future__ import annotations

import subprocess
from pathlib import Path

import redis

from tests.sentinel_support import free_port
from tests.support import redis_server_binary, wait_until


class StandaloneRedis:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> StandaloneRedis:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", "always"]
        log = open(self.dir / "redis.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen([redis_server_binary(), *args], stdout=log, stderr=subprocess.STDOUT)
        wait_until(self._answers, 20, message=f"redis-server on {self.port}")
        return self

    def stop(self) -> None:
        """Stop the server (SIGTERM: it finishes its append-only file) and wait until it has exited."""
        if self.process is not None:
            self.process.terminate()
            self.process.wait(20)
            self.process = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True)

    def _answers(self) -> bool:
        try:
            with redis.Redis(port=self.port, socket_connect_timeout=0.5) as probe:
                return bool(probe.ping())
        except redis.RedisError:
            return False
