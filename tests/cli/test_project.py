"""``kiq`` as a new user runs it: ``python -m kiq``, and the ``kiq`` script from a project directory whose own
modules (not installed) hold the jobs and a plugin named by class in ``kiq.toml``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import kiq
import kiq.ext
from kiq.payload import dumps, new_jid
from tests.support import child_env, wait_until

# the console script, as installed: its sys.path[0] is the environment's bin directory, not the project
KIQ_SCRIPT = Path(sys.executable).with_name("kiq")

AUDIT = '''
import kiq

class AuditPlugin:
    """Named by class in kiq.toml: kiq makes one per config."""

    @kiq.hookimpl
    def kiq_settings(self):
        return [kiq.ext.Setting.text("audit_key", "audit", help="where the audit plugin writes")]

    @kiq.hookimpl
    def kiq_startup(self, config):
        config.redis.rpush(config.get("audit_key"), f"startup {id(self)}")
'''

JOBS = """
import kiq

class Ping(kiq.Job):
    kiq_name = "Ping"

    def perform(self, word):
        kiq.default_config().redis.rpush("pinged", word)
"""


def test_python_m_kiq_runs_the_cli(config: kiq.Config, tmp_path: Path) -> None:
    def python_m_kiq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kiq", *args], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )

    version = python_m_kiq("--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"kiq {kiq.__version__}")
    config.redis.set("stat:processed", 3)
    stats = python_m_kiq("stats", "--redis-url", str(config.redis_url), "--json")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["processed"] == 3


@pytest.mark.slow
def test_a_project_plugin_and_jobs_from_the_project_directory(e2e_config: kiq.Config, tmp_path: Path) -> None:
    if not KIQ_SCRIPT.exists():
        pytest.skip(f"no kiq script next to {sys.executable}")
    project = tmp_path / "project"
    project.mkdir()
    (project / "kiq.toml").write_text('plugins = ["audit:AuditPlugin"]\nrequire = ["jobs"]\n')
    (project / "audit.py").write_text(textwrap.dedent(AUDIT))
    (project / "jobs.py").write_text(textwrap.dedent(JOBS))
    env = child_env(KIQ_REDIS_URL=str(e2e_config.redis_url))
    r = e2e_config.redis

    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [str(KIQ_SCRIPT), "worker", "--log-format", "json"], cwd=project, env=env, stdout=log, stderr=log
        )
        try:
            wait_until(lambda: r.llen("audit") or worker.poll() is not None, 30, message="the startup hook")
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()
            job = {"class": "Ping", "args": ["hello"], "jid": new_jid(), "queue": "default", "retry": False}
            r.lpush("queue:default", dumps({**job, "created_at": time.time(), "enqueued_at": time.time()}))
            wait_until(lambda: r.lrange("pinged", 0, -1) == ["hello"], 30, message="the project's job to run")
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(30) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)
    assert len(r.lrange("audit", 0, -1)) == 1  # one instance of the class, started once
    output = (tmp_path / "worker.log").read_text()
    assert all(json.loads(line)["msg"] for line in output.splitlines()), output  # --log-format json

    for command in (["dead"], ["settings"]):  # the inspection CLI reads the same settings, plugin included
        run = subprocess.run(
            [str(KIQ_SCRIPT), *command], cwd=project, env=env, capture_output=True, text=True, timeout=60
        )
        assert run.returncode == 0, run.stderr
    assert run.stdout.count("audit_key") == 1
