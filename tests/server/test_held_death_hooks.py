"""A ``kiq_death`` hook whose own Redis write is refused is held by the worker's OutcomeKeeper and called again, alone,
once Redis takes writes (kiq.plugin_manager, kiq.server.outcomes). The refusal is real: a redis-server of the test's
own at ``maxmemory`` with ``noeviction`` refuses the hook's ``SADD``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import kiq
import kiq.ext
from kiq.plugins import workflow
from kiq.server import dead
from kiq.server.outcomes import OutcomeKeeper, RedisOutage
from tests.jobs.workflow_adversarial import Value
from tests.outage_support import config_at_maxmemory

JOB = {"class": "Audited", "jid": "0123456789abcdef01234567", "args": [1]}


class AuditLog:
    """Writes each death to Redis, as an audit log would."""

    def __init__(self) -> None:
        self.calls = 0

    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any], config: kiq.Config) -> None:
        self.calls += 1
        config.redis.sadd("audit:deaths", job["jid"])


class Notes:
    """Writes nothing to Redis: it hears of each death once."""

    def __init__(self) -> None:
        self.jids: list[str] = []

    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any]) -> None:
        self.jids.append(job["jid"])


@pytest.fixture
def full(tmp_path: Path) -> Iterator[tuple[kiq.Config, redis.Redis]]:
    """A config on a redis-server of its own that refuses every write needing memory."""
    with config_at_maxmemory(tmp_path / "redis") as full:
        yield full


def test_a_refused_death_hook_is_held_and_called_again_alone_once_redis_takes_writes(
    full: tuple[kiq.Config, redis.Redis],
) -> None:
    config, admin = full
    audit, notes = AuditLog(), Notes()
    config.add_plugin(audit)
    config.add_plugin(notes)
    keeper = OutcomeKeeper(config, RedisOutage(config))
    dead.notify_death(config, dict(JOB), None)
    assert notes.jids == [JOB["jid"]]  # the other hooks ran
    assert keeper.held == 1  # the refused one is held, not only logged
    admin.config_set("maxmemory", 0)
    assert keeper.wait(lambda: False, 30)
    assert admin.smembers("audit:deaths") == {JOB["jid"]}
    assert audit.calls >= 2 and notes.jids == [JOB["jid"]]  # called again, and only it


def test_a_death_hook_still_refused_at_a_stop_is_one_error_line(
    full: tuple[kiq.Config, redis.Redis], caplog: pytest.LogCaptureFixture
) -> None:
    config, _ = full
    config.add_plugin(AuditLog())
    keeper = OutcomeKeeper(config, RedisOutage(config))
    dead.notify_death(config, dict(JOB), None)
    with caplog.at_level(logging.ERROR, logger="kiq"):
        assert keeper.give_up() == 1
    lines = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    jid = JOB["jid"]
    assert lines == [
        f"unwritten job outcome: the kiq_death hook of plugin 'AuditLog' did not run for Audited jid={jid} "
        f'(its own Redis write was refused); job: {{"class":"Audited","jid":"{jid}","args":[1]}}'
    ]


def test_outside_a_worker_a_refused_death_hook_is_reported_as_before(full: tuple[kiq.Config, redis.Redis]) -> None:
    config, _ = full
    errors: list[str] = []

    class Errors:
        @kiq.hookimpl
        def kiq_error(self, exc: BaseException, context: dict[str, Any]) -> None:
            errors.append(f"{context['context']}: {type(exc).__name__}")

    config.add_plugin(AuditLog())
    config.add_plugin(Errors())
    dead.notify_death(config, dict(JOB), None)  # no OutcomeKeeper: the API, a web request
    assert errors == ["plugin 'AuditLog' failed in kiq_death: OutOfMemoryError"]


def test_a_dropped_workflow_step_whose_death_redis_refused_fails_its_workflow_once_redis_takes_writes(
    full: tuple[kiq.Config, redis.Redis],
) -> None:
    """``kiq_job_dropped`` (an expired step, dropped unrun) fails the step's workflow; refused by Redis, that write
    is held like a death hook's (it was only reported, and the workflow stayed ``running`` until it expired)."""
    config, admin = full
    config.add_plugin("workflow")
    admin.config_set("maxmemory", 0)
    started = workflow.chain(Value.s(1), Value.s()).perform_async(config=config)
    step = kiq.ext.loads(admin.lindex("queue:default", 0))
    admin.config_set("maxmemory", 1)  # from here Redis refuses the step script's writes
    keeper = OutcomeKeeper(config, RedisOutage(config))
    config.plugins.notify("kiq_job_dropped", job=step, reason="expired", config=config)
    assert keeper.held == 1  # held, not only reported
    admin.config_set("maxmemory", 0)
    assert keeper.wait(lambda: False, 30)
    found = workflow.status(started.id, config)
    assert found is not None and found.state == "failed" and found.step("0").state == "dead"
