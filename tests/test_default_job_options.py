"""``default_job_options`` (Sidekiq's ``default_job_options``): options under every class's own ``kiq_options``,
in the pushed payload and in what a worker's retry layer reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

import kiq


class Plain(kiq.Job):
    kiq_name = "tests.defaults.Plain"

    def perform(self) -> None: ...


class Careful(kiq.Job):
    kiq_name = "tests.defaults.Careful"
    kiq_options = {"retry": 2, "queue": "careful"}

    def perform(self) -> None: ...


def test_defaults_go_under_each_class_options(config: kiq.Config, r: redis.Redis) -> None:
    config.default_job_options = {"backtrace": True, "retry": 5, "tags": ["shop"]}
    Plain.perform_async()
    Careful.set(tags=["mine"]).perform_async()
    (plain,) = [json.loads(raw) for raw in r.lrange("queue:default", 0, -1)]
    (careful,) = [json.loads(raw) for raw in r.lrange("queue:careful", 0, -1)]
    assert (plain["backtrace"], plain["retry"], plain["tags"], plain["queue"]) == (True, 5, ["shop"], "default")
    assert (careful["backtrace"], careful["retry"], careful["tags"]) == (True, 2, ["mine"])  # the class's win
    assert Careful.get_options() == {"retry": 2, "queue": "careful", "backtrace": True, "tags": ["shop"]}


def test_without_defaults_the_payload_is_unchanged(config: kiq.Config, r: redis.Redis) -> None:
    assert Plain.get_options() == {"retry": True, "queue": "default"}
    Plain.perform_async()
    (payload,) = [json.loads(raw) for raw in r.lrange("queue:default", 0, -1)]
    assert "backtrace" not in payload and payload["retry"] is True


def test_from_toml_and_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "kiq.toml"
    path.write_text("[default_job_options]\nbacktrace = 20\nretry = 3\n")
    assert kiq.Config.load(path, env={}).default_job_options == {"backtrace": 20, "retry": 3}
    environment = {"KIQ_DEFAULT_JOB_OPTIONS": '{"dead": false}'}
    assert kiq.Config.load(path, env=environment).default_job_options == {"dead": False}


def test_bad_values_name_the_setting(config: kiq.Config) -> None:
    with pytest.raises(kiq.ConfigError, match=r"default_job_options.*expected a table of job options"):
        kiq.Config(default_job_options=["retry", 5])
    with pytest.raises(kiq.ConfigError, match=r"default_job_options.*JSON object"):
        kiq.Config.load(env={"KIQ_DEFAULT_JOB_OPTIONS": "retry=5"})
    config.default_job_options = {"retry": "often"}
    with pytest.raises(kiq.ConfigError, match="default_job_options setting: option 'retry' must be"):
        Plain.perform_async()
