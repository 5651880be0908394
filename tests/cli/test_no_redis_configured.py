"""With no ``redis_url``, the inspection commands read the embedded Redis only if it already runs: they never start
one (in whatever directory they were run from) to report an empty Redis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from kiq.cli import main
from kiq.embedded import EmbeddedRedis

# kiq's and the plugins' (kiq periodic, kiq limiters): all share kiq.cli.output.inspected_config
COMMANDS = ["stats", "queues", "retries", "scheduled", "dead", "processes", "periodic", "limiters"]


@pytest.fixture
def no_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from an empty directory, with no KIQ_* variable: no setting names a Redis."""
    monkeypatch.chdir(tmp_path)
    for name in ("KIQ_REDIS_URL", "KIQ_EMBEDDED_DIR"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.mark.parametrize("command", COMMANDS)
def test_no_redis_url_and_no_embedded_server_is_an_error(
    command: str, no_settings: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kiq: error: ")
    assert f"no embedded Redis is running in {no_settings / '.kiq'}" in err
    assert "--redis-url" in err and "KIQ_REDIS_URL" in err and "project directory" in err
    assert not (no_settings / ".kiq").exists()  # nothing was started


def test_a_running_embedded_server_is_inspected(no_settings: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = EmbeddedRedis(no_settings / ".kiq")
    url = server.ensure_running()
    try:
        assert server.running_url() == url
        client = redis.Redis.from_url(url)
        client.set("stat:processed", 7)
        client.close()
        assert main(["stats", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["processed"] == 7
    finally:
        server.stop()
    assert server.running_url() is None
