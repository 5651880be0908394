"""Settings: precedence defaults < file < env < arguments, and clear errors for unknown or bad settings."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import kiq
from kiq import config as kiq_config
from kiq.config import Config


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_defaults() -> None:
    config = Config()
    assert config.concurrency == 10 and config.timeout == 25.0 and config.fetch == "basic"
    assert config.queues == [("default", 0)] and config.redis_url is None
    assert config.max_retries == 25 and config.dead_max_jobs == 10_000 and config.dead_timeout == 180 * 86400


def test_precedence_file_env_arguments(in_tmp: Path) -> None:
    (in_tmp / "pyproject.toml").write_text(
        '[project]\nname = "app"\n[tool.kiq]\nconcurrency = 3\ntimeout = 8\nqueues = ["critical,2", "low"]\n'
    )
    env = {"KIQ_TIMEOUT": "9", "KIQ_TAG": "from-env", "KIQ_UNRELATED_TOOL": "x"}
    config = Config.load(env=env, tag="from-args")
    assert config.concurrency == 3  # file
    assert config.timeout == 9.0  # env beats file
    assert config.tag == "from-args"  # arguments beat env
    assert config.queues == [("critical", 2), ("low", 0)]


def test_kiq_toml_wins_over_pyproject(in_tmp: Path) -> None:
    (in_tmp / "pyproject.toml").write_text("[tool.kiq]\nconcurrency = 3\n")
    (in_tmp / "kiq.toml").write_text("concurrency = 4\n")
    assert Config.load(env={}).concurrency == 4


def test_explicit_config_file(in_tmp: Path) -> None:
    path = in_tmp / "worker.toml"
    path.write_text('fetch = "reliable"\n')
    assert Config.load(path, env={}).fetch == "reliable"
    with pytest.raises(kiq.ConfigError, match="does not exist"):
        Config.load(in_tmp / "missing.toml", env={})


def test_queue_forms() -> None:
    assert Config(queues="critical,2 default").queues == [("critical", 2), ("default", 0)]
    assert Config(queues=[["a", 1], ["b", 1]]).queues == [("a", 1), ("b", 1)]
    assert Config(queues=["a"]).queues == [("a", 0)]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"concurency": 5}, "unknown setting 'concurency'"),
        ({"concurrency": 0}, "'concurrency'.*at least 1"),
        ({"concurrency": "many"}, "'concurrency'"),
        ({"timeout": -1}, "'timeout'"),
        ({"queues": []}, "'queues'"),
        ({"queues": ["a,heavy"]}, "'queues'"),
        ({"log_format": "xml"}, "'log_format'.*plain, json"),
        ({"plugins": ["no_such_plugin_module"]}, "plugin 'no_such_plugin_module'"),
    ],
)
def test_bad_settings_fail_clearly(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(kiq.ConfigError, match=message):
        Config(**settings)


def test_bad_file_value_names_the_file(in_tmp: Path) -> None:
    (in_tmp / "kiq.toml").write_text("concurrency = -2\nbogus = 1\n")
    with pytest.raises(kiq.ConfigError, match=r"kiq\.toml"):
        Config.load(env={})


def test_bad_env_value_names_the_variable(in_tmp: Path) -> None:
    with pytest.raises(kiq.ConfigError, match=r"KIQ_CONCURRENCY|environment"):
        Config.load(env={"KIQ_CONCURRENCY": "ten"})


def test_assignment_is_validated() -> None:
    config = Config()
    config.fetch = "reliable"
    assert config.fetch == "reliable"
    with pytest.raises(kiq.ConfigError):
        config.concurrency = 0
    with pytest.raises(kiq.ConfigError, match="unknown setting"):
        config.get("nope")


def test_configure_server_runs_only_in_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kiq_config, "_server_callbacks", [])
    monkeypatch.setattr(kiq_config, "_default", Config())
    calls: list[str] = []
    kiq.configure_server(lambda c: calls.append("server"))
    kiq.configure_client(lambda c: calls.append("client"))
    assert calls == ["client"]
    worker = Config()
    kiq_config.enter_server_mode(worker)
    assert calls == ["client", "server"]
    assert kiq.default_config() is worker
    kiq.configure_client(lambda c: calls.append("client-in-worker"))
    kiq.configure_server(lambda c: calls.append("late-server"))
    assert calls == ["client", "server", "late-server"]


def test_env_from_process(monkeypatch: pytest.MonkeyPatch, in_tmp: Path) -> None:
    monkeypatch.setenv("KIQ_CONCURRENCY", "7")
    assert os.environ["KIQ_CONCURRENCY"] == "7"
    assert Config.load().concurrency == 7


def test_a_misspelt_setting_gets_a_suggestion_wherever_it_is_written(
    in_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(kiq.ConfigError, match=r"unknown setting 'concurency' \(from .*\) \(did you mean 'concurrency'"):
        Config(concurency=5)
    (in_tmp / "kiq.toml").write_text("heartbeat_intreval = 1\n")
    with pytest.raises(kiq.ConfigError, match=r"kiq\.toml.*did you mean 'heartbeat_interval'"):
        Config.load(env={})
    (in_tmp / "kiq.toml").unlink()
    config = Config()
    with pytest.raises(kiq.ConfigError, match="did you mean 'redis_url'"):
        config.redis_ulr = "redis://x"
    with pytest.raises(AttributeError, match="did you mean 'timeout'"):
        _ = config.timout
    # an environment variable is not ours to refuse (KIQ_ may be another tool's prefix), but a near miss is pointed out
    with caplog.at_level("WARNING", logger="kiq"):
        assert Config.load(env={"KIQ_CONCURENCY": "3", "KIQ_UNRELATED_THING": "x"}).concurrency == 10
    warnings = [record.getMessage() for record in caplog.records]
    assert warnings == ["ignoring KIQ_CONCURENCY: not a kiq setting (did you mean 'concurrency'?)"]
