"""Job modules that tests import into worker processes with -r."""

from __future__ import annotations

import time
from typing import Any

import redis


def wait_for_release(client: redis.Redis, key: str, seconds: float = 20.0) -> None:
    """Block until the test pushes to ``key`` (at most ``seconds``), a second per BLPOP: kiq's client reads a reply
    for at most ``redis_timeout`` (5 s), so a longer BLPOP would fail the job with a socket timeout."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not client.blpop([key], timeout=1):
        pass


def deep(levels: int) -> list[Any]:
    """A list nested ``levels`` deep: formatting or encoding it recursively raises RecursionError."""
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value
