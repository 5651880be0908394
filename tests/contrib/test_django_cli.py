"""The ``kiq`` command line in a Django project, in real subprocesses: ``kiq <command>`` reads ``settings.KIQ``
when ``DJANGO_SETTINGS_MODULE`` is set (the ``django`` plugin's ``kiq_settings_source``), and ``python manage.py
kiq <command>`` is the whole ``kiq`` command line with Django set up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import kiq
from tests.contrib.django_project.jobs import CreateUser
from tests.support import ROOT, child_env

pytest_plugins = ["tests.contrib.django_support"]

SETTINGS = "tests.contrib.django_project.settings"
MANAGE = "tests/contrib/django_project/manage.py"


def run(command: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    variables = child_env(PYTHONPATH=str(ROOT), **env)
    variables.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(command, cwd=ROOT, env={**variables, **env}, capture_output=True, text=True, timeout=120)


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def three_jobs(e2e_config: kiq.Config, django_project: Path) -> str:
    """Three jobs waiting in the test project's queue on the test's Redis; its URL."""
    assert e2e_config.redis_url is not None
    kiq.Client(e2e_config).push_bulk({"class": CreateUser, "args": [["a"], ["b"], ["c"]]})
    return e2e_config.redis_url


def test_kiq_stats_reads_settings_kiq_when_django_settings_module_is_set(three_jobs: str, django_project: Path) -> None:
    kiq_command = str(Path(sys.executable).with_name("kiq"))
    project = {"TEST_DJANGO_SQLITE": str(django_project), "TEST_DJANGO_REDIS_URL": three_jobs}
    stats = as_json(run([kiq_command, "stats", "--json"], DJANGO_SETTINGS_MODULE=SETTINGS, **project))
    assert stats["queues"] == {"django": 3}  # settings.KIQ's redis_url: the only place that names this Redis
    # without the variable, kiq knows nothing of the project: no Redis to look at
    alone = run([kiq_command, "stats", "--json"], **project)
    assert alone.returncode == 2 and "no Redis to inspect" in alone.stderr, alone.stderr


def test_a_settings_module_that_cannot_be_imported_is_a_clear_error(django_project: Path) -> None:
    done = run([sys.executable, "-m", "kiq", "stats"], DJANGO_SETTINGS_MODULE="no_such_project.settings")
    assert done.returncode == 2
    assert "DJANGO_SETTINGS_MODULE='no_such_project.settings'" in done.stderr and "unset" in done.stderr


def test_manage_py_kiq_runs_every_kiq_command_with_settings_kiq(three_jobs: str, django_project: Path) -> None:
    project = {"TEST_DJANGO_SQLITE": str(django_project), "TEST_DJANGO_REDIS_URL": three_jobs}
    queues = as_json(run([sys.executable, MANAGE, "kiq", "queues", "--json"], **project))
    assert [(queue["name"], queue["size"]) for queue in queues] == [("django", 3)]
    listing = [sys.executable, MANAGE, "kiq", "queues", "django", "--json", "--settings", SETTINGS]
    jobs = as_json(run(listing, **project))  # Django's own --settings is taken too
    assert sorted(job["args"] for job in jobs) == [["a"], ["b"], ["c"]]
    # the installed plugins' commands too, and kiq's own help lists them
    help_text = run([sys.executable, MANAGE, "kiq", "--help"], **project)
    for command in (
        "stats",
        "queues",
        "retries",
        "dead",
        "scheduled",
        "processes",
        "worker",
        "web",
        "periodic",
        "batches",
    ):
        assert command in help_text.stdout, (command, help_text.stdout)
    for command in ("dead", "batches", "periodic"):  # kiq's and installed plugins' commands, on that Redis
        assert as_json(run([sys.executable, MANAGE, "kiq", command, "--json"], **project)) == [], command
