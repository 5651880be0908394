"""The walk-throughs of examples/, run as a new user runs them: the commands their READMEs and docstrings give,
a real worker process, and the job ran at the end.

- examples/django_app: ``manage.py migrate``, the project's own ``TestCase`` (``manage.py test``), ``manage.py kiq
  worker`` and ``manage.py runserver`` as real processes, a sign-up over HTTP, and the job's mark read back;
- examples/fastapi_app.py: the worker command of its docstring (it must serve the queues the jobs go to), the
  app under FastAPI's TestClient, a job and a tracked task run by the worker.
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kiq
import kiq.api
from tests.support import ROOT, WorkerProcess, child_env, wait_until
from tests.tracking_support import track

DJANGO_APP = ROOT / "examples" / "django_app"


def documented(text: str, prefix: str) -> list[list[str]]:
    """The command lines of ``text`` that start with ``prefix``, without their comments, split as a shell does."""
    lines = (line.strip().partition("  #")[0] for line in text.splitlines())
    return [shlex.split(line) for line in lines if line.startswith(prefix)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def get_json(url: str, data: bytes | None = None) -> Any:
    with urllib.request.urlopen(url, data=data, timeout=10) as answer:
        return json.loads(answer.read())


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


@pytest.mark.slow
def test_the_django_example_walk_through(
    e2e_config: kiq.Config, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    walk_through = (DJANGO_APP / "README.md").read_text().split("```sh\n")[1].split("```")[0]
    assert walk_through in (ROOT / "docs" / "integrations" / "django.md").read_text(), "the docs show it as it is"
    commands = documented(walk_through, "python manage.py")
    assert e2e_config.redis_url is not None
    env = child_env(REDIS_URL=e2e_config.redis_url, SHOP_DATABASE=str(tmp_path / "shop.sqlite3"))
    env.pop("DJANGO_SETTINGS_MODULE", None)
    port = free_port()
    for number, command in enumerate(commands):
        arguments = [sys.executable, *command[1:]]
        if command[2] == "runserver":
            arguments += [f"127.0.0.1:{port}", "--noreload"]
        if command[2] == "runserver" or command[2:4] == ["kiq", "worker"]:  # the long-running ones
            log = (tmp_path / f"{command[2]}.log").open("wb")
            processes.append(subprocess.Popen(arguments, cwd=DJANGO_APP, env=env, stdout=log, stderr=log))
            continue
        done = subprocess.run(arguments, cwd=DJANGO_APP, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (number, command, done.stdout, done.stderr)
    base = f"http://127.0.0.1:{port}"

    def signed_up() -> Any:
        try:
            return get_json(f"{base}/signup", b"username=ada")
        except OSError:  # the server is not listening yet
            return None

    assert wait_until(signed_up, timeout=60, interval=0.2) == {"username": "ada", "welcomed": False}
    wait_until(lambda: get_json(f"{base}/customers/ada")["welcomed"], timeout=60, interval=0.1,
               message="the worker to run the welcome job")  # fmt: skip
    worker_log = (tmp_path / "kiq.log").read_text()
    assert "queues=mail,default" in worker_log and "shop.jobs.WelcomeCustomer" in worker_log, worker_log


@pytest.mark.slow
def test_the_fastapi_example_walk_through(e2e_config: kiq.Config, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from examples.fastapi_app import __doc__ as walk_through
    from examples.fastapi_app import create_app

    [worker_command] = documented(walk_through or "", "kiq worker")
    docs = (ROOT / "docs" / "integrations" / "fastapi.md").read_text()
    assert documented(docs, "kiq worker") == [worker_command], "the docs show the example's worker command"
    database = f"sqlite:///{tmp_path / 'tracking.db'}"
    tracker = track(e2e_config, database)  # the default config: what the app uses
    assert e2e_config.redis_url is not None
    worker = WorkerProcess(
        worker_command[2:],
        e2e_config.redis_url,
        tmp_path / "worker.log",
        {"KIQ_TRACKING_DATABASE_URL": database, "KIQ_TRACKING_FLUSH_INTERVAL": "0.02"},
        fork=False,
    )  # fmt: skip - the app's own worker command, in a fresh interpreter
    try:
        with TestClient(create_app()) as client:
            assert client.post("/feeds", params={"url": "https://example.com/feed"}).json()["jid"]
            task_id = client.post("/imports", json=[1, 2, 3]).json()["task_id"]

            def finished() -> bool:
                task = client.get(f"/tracking/tasks/{task_id}").json()
                return bool(task["complete"] and task["counts"]["finished"] == 3)

            wait_until(finished, timeout=60, interval=0.1, message="the worker to run the imports")
        wait_until(lambda: kiq.api.Stats(e2e_config).processed == 4, timeout=60, message="the feed job to run too")
    finally:
        tracker.writer.close(5)
        worker.stop()
