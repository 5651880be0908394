"""A private redis-server for one benchmark run: no persistence, loopback only, stopped at the end."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


class RedisServer:
    """``cpus``: the CPUs the server may run on (Linux), None: any; ``options``: more ``--name value`` arguments
    (a cluster node's, bench/redis_cluster.py)."""

    def __init__(
        self, port: int, binary: str = "redis-server", cpus: set[int] | None = None, options: tuple[str, ...] = ()
    ) -> None:
        self.port = port
        self.binary = binary
        self.cpus = cpus
        self.options = options
        self.url = f"redis://127.0.0.1:{port}/0"
        self._process: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None

    def start(self) -> None:
        if _port_open(self.port):
            raise RuntimeError(f"port {self.port} is already in use; pick another with --port")
        if shutil.which(self.binary) is None:
            raise RuntimeError(f"{self.binary} not found (Debian: apt-get install redis-server)")
        if self._dir is None:  # else a restart: the same directory, so a server that persists finds its data
            self._dir = Path(tempfile.mkdtemp(prefix="kiq-bench-redis-"))
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(self._dir), "--logfile", str(self._dir / "redis.log"), *self.options]
        self._process = subprocess.Popen(args, stdin=subprocess.DEVNULL, start_new_session=True)
        if self.cpus:
            os.sched_setaffinity(self._process.pid, self.cpus)
        client = self.client()
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.05)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, decode_responses=True)

    def version(self) -> str:
        return str(self.client().info("server")["redis_version"])

    def restart(self, down: float) -> None:
        """A graceful SHUTDOWN (a server with ``--appendonly yes`` writes its data out), ``down`` seconds without a
        server, then the same server again on the same port and directory."""
        if self._process is not None:
            self._process.terminate()
            self._process.wait(30)
            self._process = None
        time.sleep(down)
        self.start()

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0
