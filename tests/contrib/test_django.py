"""kiq.contrib.django in a real Django project (tests/contrib/django_project), on SQLite and PostgreSQL: pushes
wait for the transaction's commit, settings.KIQ takes its place in the settings' precedence, and the tracking
endpoints under /admin/kiq/ serve staff users only."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import kiq
import kiq.ext
from kiq.contrib.django import apply_settings, config, database_url
from kiq.plugins.tracking import tracker_for
from tests.contrib.django_project.jobs import CreateUser
from tests.tracking_support import track, work_off

pytest_plugins = ["tests.contrib.django_support"]


@pytest.fixture
def django_config(config: kiq.Config, django_project: Path) -> Iterator[kiq.Config]:
    """The ``config`` fixture (the process default, on the test's Redis) with the project's settings.KIQ."""
    apply_settings(config, keep={"redis_url"})
    yield config
    tracker_for(config).writer.close(5)


def queued(r: redis.Redis) -> list[str]:
    return r.lrange("queue:django", 0, -1)


def test_a_job_pushed_in_a_transaction_that_rolls_back_is_never_pushed(
    django_config: kiq.Config, r: redis.Redis, database: str
) -> None:
    from django.db import transaction

    with pytest.raises(RuntimeError, match="roll back"), transaction.atomic(using=database):
        assert CreateUser.perform_async("never") is None  # deferred: the jid is not known to the caller yet
        raise RuntimeError("roll back")
    assert queued(r) == []


def test_a_job_pushed_in_a_transaction_that_commits_is_pushed_at_the_commit(
    django_config: kiq.Config, r: redis.Redis, database: str
) -> None:
    from django.db import transaction

    with transaction.atomic(using=database):
        CreateUser.perform_async("committed")
        assert queued(r) == []  # not before the commit
    [payload] = queued(r)
    job = kiq.ext.loads(payload)
    assert job["args"] == ["committed"] and "on_commit" not in job


def test_a_savepoint_that_rolls_back_drops_only_its_own_jobs(
    django_config: kiq.Config, r: redis.Redis, database: str
) -> None:
    from django.db import transaction

    with transaction.atomic(using=database):
        CreateUser.perform_async("outer")
        with pytest.raises(RuntimeError), transaction.atomic(using=database):
            CreateUser.perform_async("inner")
            raise RuntimeError
    assert [kiq.ext.loads(p)["args"] for p in queued(r)] == [["outer"]]


def test_a_push_waits_for_every_open_transaction(django_config: kiq.Config, r: redis.Redis, database: str) -> None:
    from django.db import connections, transaction

    others = [alias for alias in connections if alias != database]
    with transaction.atomic(using=database):
        for alias in others:  # a transaction on the other database too, committed first
            with transaction.atomic(using=alias):
                CreateUser.perform_async("both")
            assert queued(r) == []
        if not others:
            CreateUser.perform_async("both")
    assert len(queued(r)) == 1


def test_pushes_at_once_when_told_per_push_or_by_the_setting(
    django_config: kiq.Config, r: redis.Redis, database: str
) -> None:
    from django.db import transaction

    with transaction.atomic(using=database):
        assert CreateUser.set(on_commit=False).perform_async("now") is not None
        assert len(queued(r)) == 1
        django_config.django_on_commit = False
        assert CreateUser.perform_async("now too") is not None
        assert len(queued(r)) == 2
    assert all("on_commit" not in kiq.ext.loads(p) for p in queued(r))


def test_outside_a_transaction_a_push_happens_at_once(django_config: kiq.Config, r: redis.Redis) -> None:
    assert CreateUser.perform_async("now") is not None
    assert len(queued(r)) == 1


def test_a_tracking_task_created_in_a_transaction_is_pushed_at_once(
    django_config: kiq.Config, r: redis.Redis, database: str
) -> None:
    """Its events are committed in the tracking database first; deferring its jobs would drop them from it."""
    from django.db import transaction

    tracker = tracker_for(django_config)
    with transaction.atomic(using=database):
        task_id = tracker.create_task(CreateUser, [["a"], ["b"]])
        assert len(queued(r)) == 2
    summary = tracker.task(task_id, with_events=False)
    assert summary is not None and summary["total"] == 2


def test_settings_come_from_file_then_settings_kiq_then_environment_then_arguments(
    django_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.test import override_settings

    monkeypatch.chdir(tmp_path)
    (tmp_path / "kiq.toml").write_text('tag = "from-file"\nconcurrency = 2\ntimeout = 1\n')
    monkeypatch.setenv("KIQ_TIMEOUT", "8")
    monkeypatch.setenv("KIQ_POLL_INTERVAL", "3")
    monkeypatch.setenv("KIQ_TRACKING_FLUSH_INTERVAL", "0.5")  # a setting of a plugin that settings.KIQ adds
    monkeypatch.setenv("KIQ_DJANGO_ON_COMMIT", "false")  # the Django plugin's own
    django_kiq = {"concurrency": 3, "timeout": 7, "plugins": ["tracking"], "tracking_flush_interval": 0.1}
    with override_settings(KIQ=django_kiq):
        built = config(poll_interval=4)
    assert (built.tag, built.concurrency, built.timeout, built.poll_interval) == ("from-file", 3, 8.0, 4.0)
    assert built.get("tracking_flush_interval") == 0.5
    assert built.get("django_on_commit") is False


def test_a_bad_value_in_settings_kiq_is_refused_naming_it(django_project: Path) -> None:
    from django.test import override_settings

    refused = r"settings\.KIQ: unknown setting 'concurency'.*did you mean 'concurrency'"
    with override_settings(KIQ={"concurency": 3}), pytest.raises(kiq.ConfigError, match=refused):
        config()
    with override_settings(KIQ=["not", "a", "dict"]), pytest.raises(kiq.ConfigError, match="must be a dict"):
        config()


def test_database_url_gives_the_tracking_plugin_djangos_database(
    config: kiq.Config, django_project: Path, database: str
) -> None:
    """Tracking on Django's own database: a task written through the URL is read back through Django."""
    from django.db import connections

    url = database_url(database)
    assert url.startswith("sqlite:///" if connections[database].vendor == "sqlite" else "postgresql+psycopg://")
    tracker = track(config, url)
    try:
        task_id = tracker.create_task(CreateUser, [["a"], ["b"]])
        with connections[database].cursor() as cursor:
            cursor.execute("SELECT total FROM kiq_tracking_tasks WHERE id = %s", [task_id])
            assert cursor.fetchone() == (2,)
    finally:
        tracker.writer.close(5)
        tracker.store.engine.dispose()


def test_database_url_refuses_a_database_other_processes_cannot_open() -> None:
    with pytest.raises(kiq.ConfigError, match="file other processes can open"):
        database_url({"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"})
    with pytest.raises(kiq.ConfigError, match="no tracking database for the Django backend"):
        database_url({"ENGINE": "django.db.backends.oracle", "NAME": "x"})


# -- /admin/kiq/: the tracking endpoints for staff ------------------------------------------------------------
def user(staff: bool) -> object:
    from django.contrib.auth.models import User

    return User.objects.create(username=f"user-{secrets.token_hex(4)}", is_staff=staff)


@pytest.fixture
def task_id(django_config: kiq.Config) -> str:
    """A finished task in the project's tracking database (Django's SQLite, as settings.KIQ says)."""
    tracker = tracker_for(django_config)
    created = tracker.create_task(CreateUser, [[f"tracked-{secrets.token_hex(4)}"]])
    work_off(django_config, "django")
    tracker.writer.flush()
    return created


def test_the_tracking_endpoints_serve_staff_users(task_id: str) -> None:
    from django.test import Client

    browser = Client()
    browser.force_login(user(staff=True))
    answer = browser.get(f"/admin/kiq/tasks/{task_id}")
    assert answer.status_code == 200, answer.content
    assert answer.json()["counts"]["finished"] == 1
    jid = answer.json()["events"][0]["job_id"]
    assert browser.get(f"/admin/kiq/jobs/{jid}").json()["task_id"] == task_id  # staff may know the task
    page = browser.get(f"/admin/kiq/tasks/{task_id}/page")
    assert page.status_code == 200 and page["Content-Security-Policy"].startswith("default-src 'none'")


def test_the_tracking_endpoints_refuse_users_who_are_not_staff(task_id: str) -> None:
    from django.test import Client

    browser = Client()
    browser.force_login(user(staff=False))
    for path in (f"/admin/kiq/tasks/{task_id}", f"/admin/kiq/tasks/{task_id}/page", "/admin/kiq/"):
        answer = browser.get(path)
        assert answer.status_code == 403 and task_id.encode() not in answer.content, path


def test_anonymous_visitors_are_sent_to_the_admin_login(task_id: str) -> None:
    from django.test import Client

    answer = Client().get(f"/admin/kiq/tasks/{task_id}")
    assert answer.status_code == 302
    assert answer["Location"].startswith("/admin/login/?next=/admin/kiq/tasks/")
