"""kiq.testing: fake mode captures pushes with no Redis and drains them through the real server steps (middleware,
retry rules, death hooks); inline mode runs each job at its push through both chains; the pytest fixtures."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import kiq
from kiq import config as kiq_config
from kiq import testing
from tests.support import ROOT, child_env

ran: list[tuple[str, Any]] = []
deaths: list[str] = []


class Welcome(kiq.Job):
    kiq_options = {"queue": "mail", "retry": 2}

    def perform(self, email: str) -> None:
        ran.append(("welcome", email))


class Flaky(kiq.Job):
    """Fails on its first run only (``retry_count`` appears with the first retry)."""

    kiq_options = {"retry": 3}

    def perform(self, n: int) -> None:
        if "retry_count" not in self.job:
            raise RuntimeError(f"flaky {n}")
        ran.append(("flaky", n))


class Broken(kiq.Job):
    kiq_options = {"retry": 2}

    def perform(self) -> None:
        raise ValueError("always")


class AsyncPing(kiq.Job):
    async def perform(self, n: int) -> int:
        await asyncio.sleep(0)
        ran.append(("ping", n))
        Welcome.perform_async(f"{n}@example.com")  # a job that pushes another: drained too
        return n


class RecordDeaths:
    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any]) -> None:
        deaths.append(job["class"])


@pytest.fixture(autouse=True)
def unreachable_default() -> Iterator[kiq.Config]:
    """The default config points at a Redis nobody listens on: any connection attempt fails the test."""
    previous = kiq_config._default
    config = kiq_config.set_default_config(kiq.Config(redis_url="redis://127.0.0.1:1/0"))
    config.add_plugin(RecordDeaths())
    ran.clear()
    deaths.clear()
    yield config
    kiq_config._default = previous


def test_fake_captures_pushes_per_class_and_queue_without_redis() -> None:
    with testing.fake() as fake:
        Welcome.perform_async("ada@example.com")
        Welcome.perform_in(60, "grace@example.com")
        Flaky.perform_bulk([[1], [2]])
        asyncio.run(AsyncPing.aio.perform_async(7))
        assert [job["args"] for job in Welcome.jobs] == [["ada@example.com"], ["grace@example.com"]]
        assert [job["args"] for job in testing.jobs(queue="default")] == [[1], [2], [7]]
        assert [job["class"] for job in fake.jobs(job=Flaky)] == [Flaky.kiq_name] * 2
        assert fake.scheduled[0][0] > 0 and len(fake.queues["mail"]) == 1
    assert Welcome.jobs == [] and testing.jobs() == []  # outside the block: nothing captured
    assert ran == []  # captured, not run


def test_drain_runs_jobs_through_the_retry_rules_and_death_hooks(unreachable_default: kiq.Config) -> None:
    seen_by_middleware: list[str] = []

    class Audit(kiq.ServerMiddleware):
        def call(self, job_instance: Any, job: dict[str, Any], queue: str) -> Any:
            seen_by_middleware.append(job["class"].rsplit(".", 1)[-1])
            yield

    unreachable_default.server_middleware.add(Audit)
    with testing.fake() as fake:
        Flaky.perform_async(1)
        Broken.perform_async()
        AsyncPing.perform_async(3)
        runs = fake.drain()
    assert sorted(ran) == [("flaky", 1), ("ping", 3), ("welcome", "3@example.com")]
    # Flaky: a failure then its retry; Broken: its run and two retries, then dead; AsyncPing and the job it pushed
    assert runs == 2 + 3 + 2
    assert [job["class"] for job in fake.dead_jobs] == [Broken.kiq_name] and deaths == [Broken.kiq_name]
    dead = fake.dead_jobs[0]
    assert (dead["error_class"], dead["error_message"], dead["retry_count"]) == ("ValueError", "always", 2)
    assert sorted(set(seen_by_middleware)) == ["AsyncPing", "Broken", "Flaky", "Welcome"]
    assert fake.jobs() == [] and fake.retries == []


def test_drain_of_one_class_leaves_the_others() -> None:
    with testing.fake() as fake:
        Welcome.perform_async("a@example.com")
        Flaky.set(retry=False).perform_async(5)
        assert fake.drain(Welcome) == 1
        assert [job["class"] for job in fake.jobs()] == [Flaky.kiq_name]
        assert fake.drain(Flaky, retries=False) == 1 and fake.dead == []  # retry False: no retry, no dead set


def test_inline_runs_each_job_at_its_push_through_both_chains(unreachable_default: kiq.Config) -> None:
    order: list[str] = []

    class Client(kiq.ClientMiddleware):
        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Any:
            order.append("client")
            yield

    class Server(kiq.ServerMiddleware):
        def call(self, job_instance: Any, job: dict[str, Any], queue: str) -> Any:
            order.append("server")
            yield

    unreachable_default.client_middleware.add(Client)
    unreachable_default.server_middleware.add(Server)
    with testing.inline():
        jid = Welcome.perform_async("ada@example.com")
        assert ran == [("welcome", "ada@example.com")] and order == ["client", "server"] and jid
        asyncio.run(AsyncPing.aio.perform_async(1))  # an async job, pushed from a running event loop
        with pytest.raises(ValueError, match="always"):
            Broken.perform_async()  # the job's error reaches the code that pushed it
        assert Welcome.jobs == []
    assert ("ping", 1) in ran and ("welcome", "1@example.com") in ran


def test_disable_pushes_to_redis_inside_a_fake(config: kiq.Config) -> None:
    with testing.fake() as fake, testing.disable():
        Welcome.set(config=config).perform_async("real@example.com")
    assert fake.jobs() == [] and config.redis.llen("queue:mail") == 1


def test_the_pytest_fixtures_in_a_users_test_suite() -> None:
    """examples/testing: a user's app, its kiq.toml (an unreachable Redis, its death handler as a plugin) and its
    tests, which use kiq_fake and kiq_inline as installed (the pytest11 entry point), run by pytest in a process of
    their own from the app's directory."""
    app = ROOT / "examples" / "testing"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(app), str(app)],
        cwd=app,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 passed" in run.stdout, run.stdout


class Progress(kiq.Job):
    kiq_options = {"track": True}

    def perform(self) -> None:
        from kiq.plugins.tracking import message

        message(self, "half way")
        ran.append(("progress", None))


def test_tracking_messages_outside_a_tracking_worker_open_no_database(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)  # where the default tracking database would be created
    Progress().perform()  # a unit test calling perform directly
    with testing.fake() as fake:
        Progress.perform_async()
        fake.drain()
    assert ran == [("progress", None)] * 2 and list(tmp_path.iterdir()) == []
