"""How the metrics plugin is enabled: ``metrics_port`` alone (the flag, the environment, the file, an assignment)
loads it through the ``kiq.settings`` entry points; without a port it counts nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

import kiq
from kiq.cli import build_parser
from kiq.cli.worker import worker_overrides
from kiq.plugins.metrics import MetricsPlugin
from kiq.plugins.metrics.liveness import liveness_timeout
from kiq.plugins.reliable_fetch.keys import liveness_ttl_ms
from tests.plugins.metrics.support import free_port


def test_the_metrics_port_flag_alone_enables_the_plugin(tmp_path: Path) -> None:
    args = build_parser().parse_args(["worker", "-r", "app.jobs", "--metrics-port", "9100"])
    assert worker_overrides(args)["metrics_port"] == 9100
    (tmp_path / "kiq.toml").write_text("")
    config = kiq.Config.load(tmp_path / "kiq.toml", env={}, **worker_overrides(args))
    assert config.plugins.find(MetricsPlugin) is not None and config.get("metrics_port") == 9100
    without = build_parser().parse_args(["worker", "-r", "app.jobs"])
    assert "metrics_port" not in worker_overrides(without)


def test_the_setting_from_the_environment_the_file_or_an_assignment_enables_it_too(tmp_path: Path) -> None:
    (tmp_path / "empty.toml").write_text("")
    assert kiq.Config.load(tmp_path / "empty.toml", env={"KIQ_METRICS_PORT": "9101"}).get("metrics_port") == 9101
    (tmp_path / "kiq.toml").write_text("metrics_port = 9102\nliveness_timeout = 30\n")
    from_file = kiq.Config.load(tmp_path / "kiq.toml", env={})
    assert (from_file.get("metrics_port"), from_file.get("liveness_timeout")) == (9102, 30.0)
    config = kiq.Config()
    assert config.plugins.find(MetricsPlugin) is None
    config.metrics_port = 9103
    assert config.plugins.find(MetricsPlugin) is not None and config.get("metrics_port") == 9103


def test_a_bad_port_is_refused_naming_the_setting_and_a_near_miss_is_still_a_typo(tmp_path: Path) -> None:
    with pytest.raises(kiq.ConfigError, match="'metrics_port'"):
        kiq.Config(metrics_port=-1)
    with pytest.raises(kiq.ConfigError, match="did you mean 'metrics_port'"):
        kiq.Config(metrics_prot=9100)


def test_without_a_port_the_plugin_counts_nothing() -> None:
    config = kiq.Config(plugins=["metrics"])
    assert config.plugins.find(MetricsPlugin) is not None and config.get("metrics_port") == 0
    assert config.plugins.hook.kiq_job_observer(config=config) == []
    ported = kiq.Config(metrics_port=9104)
    (tally,) = ported.plugins.hook.kiq_job_observer(config=ported)
    tally.started("default", {"class": "X"})
    tally.finished("default", {"class": "X"}, 0.02, "failed")
    assert tally.counts[("default", "X")][:2] == [1, 1] and tally.busy == 0


def test_kiq_health_without_a_port_says_how_to_give_one_and_with_one_in_the_file_asks_it(tmp_path: Path) -> None:
    (tmp_path / "kiq.toml").write_text("")
    args = build_parser().parse_args(["health", "-C", str(tmp_path / "kiq.toml")])
    with pytest.raises(kiq.ConfigError, match="no metrics port; give --port PORT or set metrics_port"):
        args.run(args)
    (tmp_path / "kiq.toml").write_text(f"metrics_port = {free_port()}\n")  # nothing listens there: unhealthy
    args = build_parser().parse_args(["health", "-C", str(tmp_path / "kiq.toml"), "--timeout", "2"])
    assert args.run(args) == 1


@pytest.mark.parametrize("heartbeat", [10.0, 2.0, 0.5])
def test_livez_fails_by_default_when_reliable_fetch_takes_the_worker_for_dead(tmp_path: Path, heartbeat: float) -> None:
    """A hung worker (a swarm child stopped by SIGSTOP) had its jobs recovered and run by a sibling after ~30 s (3
    heartbeats: reliable fetch's liveness TTL) while /livez failed only at 60 s: the default now agrees, and follows
    heartbeat_interval (down to a 5 s floor: a swarm child's snapshot comes every second); a value set wins."""
    (tmp_path / "kiq.toml").write_text(f"metrics_port = 9104\nheartbeat_interval = {heartbeat}\n")
    config = kiq.Config.load(tmp_path / "kiq.toml", env={})
    assert liveness_timeout(config) == max(liveness_ttl_ms(config) / 1000, 5.0) == max(3 * heartbeat, 5.0)
    config.liveness_timeout = 45
    assert liveness_timeout(config) == 45.0
