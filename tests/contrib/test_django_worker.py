"""``python manage.py kiq_worker`` in a real subprocess: Django is set up in the worker (its job uses the ORM),
the worker reads settings.KIQ (queues, jobs), the environment wins over it (KIQ_REDIS_URL) and flags win over
both (-c)."""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import kiq
from kiq.contrib.django import apply_settings
from tests.contrib.django_project.jobs import CreateUser
from tests.support import FAST, ROOT, child_env, wait_until

pytest_plugins = ["tests.contrib.django_support"]


@pytest.mark.slow
def test_manage_py_kiq_worker_runs_a_job_with_django_set_up(
    e2e_config: kiq.Config, django_project: Path, tmp_path: Path
) -> None:
    from django.contrib.auth.models import User

    apply_settings(e2e_config, keep={"redis_url"})
    assert e2e_config.redis_url is not None
    env = child_env(PYTHONPATH=str(ROOT), TEST_DJANGO_SQLITE=str(django_project), KIQ_REDIS_URL=e2e_config.redis_url)
    log = tmp_path / "worker.log"
    command = [sys.executable, "tests/contrib/django_project/manage.py", "kiq_worker", "-c", "2"]
    with log.open("wb") as output:
        worker = subprocess.Popen(command, cwd=ROOT, env={**env, **FAST}, stdout=output, stderr=subprocess.STDOUT)
    try:
        username = f"from-the-worker-{secrets.token_hex(4)}"
        CreateUser.perform_async(username)
        wait_until(lambda: User.objects.filter(username=username).exists(), timeout=30)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    started = next(line for line in log.read_text().splitlines() if "starting:" in line)
    assert "concurrency=2 queues=django" in started, started  # -c beats settings.KIQ's 3; its queues are read
