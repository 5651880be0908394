"""``kiq embedded status|start|stop``, run as a user runs it: a subprocess in a project directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kiq.embedded import EmbeddedRedis
from tests.support import child_env


def kiq(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kiq", "embedded", *args],
        cwd=project,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_start_status_and_stop(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / ".kiq")
    try:
        before = kiq(tmp_path, "status")
        assert before.returncode == 1 and f"not running in {server.dir}" in before.stdout
        assert not server.dir.exists()  # status starts nothing

        started = kiq(tmp_path, "start")
        assert started.returncode == 0 and started.stdout.strip() == server.url
        assert "not for production" in started.stderr and str(server.dir) in started.stderr  # the start's WARNING
        assert server.running_url() == server.url
        assert kiq(tmp_path, "status").stdout.strip() == server.url

        stopped = kiq(tmp_path, "stop")
        assert stopped.returncode == 0 and f"stopped the embedded Redis in {server.dir}" in stopped.stdout
        assert server.running_url() is None
        assert f"not running in {server.dir}" in kiq(tmp_path, "stop").stdout
    finally:
        server.stop()
