"""Helpers of the CLI tests: run ``kiq`` in this process against the test Redis, and job payloads to list."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

import kiq
from kiq.cli import main
from kiq.payload import dumps


def job_json(jid: str, queue: str = "default", **extra: Any) -> str:
    return dumps({"class": "HardJob", "args": [jid, 1], "jid": jid, "queue": queue, "retry": True, **extra})


def failed_json(jid: str) -> str:
    return job_json(jid, error_class="ValueError", error_message=f"broke {jid}", failed_at=time.time(), retry_count=1)


class Cli:
    """``cli("dead", "--limit", "2")``: runs ``kiq dead --redis-url <the test Redis> --limit 2``, checks the exit
    code and returns stdout (stderr when a non-zero ``code`` is expected)."""

    def __init__(self, config: kiq.Config, capsys: pytest.CaptureFixture[str]) -> None:
        self.url = config.redis_url
        self.capsys = capsys

    def __call__(self, *args: str, code: int = 0) -> str:
        assert self.url is not None
        assert main([args[0], "--redis-url", self.url, *args[1:]]) == code
        captured = self.capsys.readouterr()
        return captured.out if code == 0 else captured.err

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json"))
