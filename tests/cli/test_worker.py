"""``kiq worker``: flags and their precedence, clear start-up errors, signals through the self-pipe, remote
signals from ``<identity>-signals``, and an unreachable Redis at start."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

import kiq
from kiq.cli import build_parser
from kiq.cli.worker import _module_name, worker_overrides
from kiq.config import Config
from kiq.errors import ConfigError
from kiq.plugin_manager import PluginManager
from tests.jobs.basic import Record
from tests.support import FAST, ROOT, WorkerProcess, child_env, identity_of, wait_until

StartWorker = Callable[..., WorkerProcess]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kiq.cli", *args],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_flags_map_to_settings_and_beat_env_and_file(tmp_path: Path) -> None:
    (tmp_path / "kiq.toml").write_text('concurrency = 3\ntag = "file"\nqueues = ["a"]\ntimeout = 4\n')
    args = build_parser().parse_args(
        ["worker", "-r", "app.jobs", "-q", "critical,2", "-q", "default", "-c", "7", "-a", "500", "--tag", "cli", "-v"]
    )
    env = {"KIQ_CONCURRENCY": "5", "KIQ_TIMEOUT": "6", "KIQ_FETCH": "reliable", "KIQ_ASYNC_CONCURRENCY": "50"}
    config = Config.load(tmp_path / "kiq.toml", env=env, **worker_overrides(args))
    assert config.concurrency == 7 and config.async_concurrency == 500 and config.tag == "cli"  # flag > env > file
    assert config.queues == [("critical", 2), ("default", 0)] and config.require == ["app.jobs"]
    assert config.timeout == 6.0 and config.fetch == "reliable"  # env > file, no flag given
    assert config.log_level == "DEBUG"


class TagOption:
    """Adds a worker option whose dest names a setting (kiq_worker_options)."""

    @kiq.hookimpl
    def kiq_worker_options(self, options: argparse._ArgumentGroup) -> None:
        options.add_argument("--label", dest="tag", help="the process list's tag, by another name")


def test_a_plugins_worker_option_overrides_the_setting_its_dest_names_when_given(tmp_path: Path) -> None:
    plugins = PluginManager(None)
    plugins.register(TagOption())
    parser = build_parser(plugins)
    (tmp_path / "kiq.toml").write_text('tag = "file"\n')
    given = parser.parse_args(["worker", "--label", "flag"])
    assert Config.load(tmp_path / "kiq.toml", env={}, **worker_overrides(given)).tag == "flag"
    not_given = parser.parse_args(["worker"])
    assert Config.load(tmp_path / "kiq.toml", env={}, **worker_overrides(not_given)).tag == "file"


class FlagPlugin:
    """A plugin for the --plugins flag (no hooks needed: being registered is what is checked)."""


def test_plugins_and_log_format_flags_beat_env_and_file(tmp_path: Path) -> None:
    (tmp_path / "kiq.toml").write_text('plugins = ["no_such_module:FromFile"]\nlog_format = "plain"\n')
    env = {"KIQ_PLUGINS": "no_such_module:FromEnv", "KIQ_LOG_FORMAT": "plain"}
    args = build_parser().parse_args(["worker", "--plugins", f"{__name__}:FlagPlugin", "--log-format", "json"])
    config = Config.load(tmp_path / "kiq.toml", env=env, **worker_overrides(args))
    assert config.get("plugins") == [f"{__name__}:FlagPlugin"] and config.plugins.find(FlagPlugin) is not None
    assert config.log_format == "json"
    args = build_parser().parse_args(["worker", "--plugins", "reliable_fetch,tracking", "--plugins", "otel"])
    assert worker_overrides(args)["plugins"] == ["reliable_fetch", "tracking", "otel"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["worker", "--log-format", "xml"])


def test_require_paths_become_module_names(tmp_path: Path) -> None:
    assert _module_name("tests.jobs.basic", ROOT) == "tests.jobs.basic"
    assert _module_name("tests/jobs/basic.py", ROOT) == "tests.jobs.basic"
    assert _module_name("tests/jobs", ROOT) == "tests.jobs"
    with pytest.raises(ConfigError, match="no such file"):
        _module_name("tests/jobs/missing.py", ROOT)
    outside = tmp_path / "standalone_jobs.py"
    outside.write_text("")
    assert _module_name(str(outside), ROOT) == "standalone_jobs" and str(tmp_path) in sys.path
    sys.path.remove(str(tmp_path))


def test_a_bad_module_path_is_a_clear_error() -> None:
    result = run_cli("worker", "--redis-url", "redis://127.0.0.1:1", "-r", "tests.jobs.no_such_module")
    assert result.returncode == 2
    assert "there is no module 'tests.jobs.no_such_module'" in result.stderr


def test_a_bad_url_scheme_names_every_accepted_one() -> None:
    result = run_cli("worker", "--redis-url", "localhost:6379", "-r", "tests.jobs.basic")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("kiq: error: bad redis_url 'localhost:6379': it must start with one of ")
    assert all(scheme in result.stderr for scheme in ("redis://", "rediss://", "unix://", "redis+sentinel://"))


def test_celerys_comma_list_of_queues_is_refused_at_once_naming_the_fix() -> None:
    """Celery's ``-Q default,mail`` habit: the comma stays Sidekiq's ``name,weight``; the error says to repeat -q."""
    result = run_cli("worker", "--redis-url", "redis://127.0.0.1:1", "-r", "tests.jobs.basic", "-q", "default,mail")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "the part after the comma is a weight" in result.stderr and "-q default -q mail" in result.stderr
    assert kiq.settings.as_queues(["default,2", "mail"]) == [("default", 2), ("mail", 0)]  # weights still work


def test_a_plugin_that_cannot_load_is_quiet_unless_the_settings_name_it(tmp_path: Path) -> None:
    """As otel without its extra: installed (an entry point) but its import fails. Every command ran with a
    plain-text warning about it; now only a config that names it fails, with one line naming the cause."""
    dist = tmp_path / "brokenplug-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[kiq.plugins]\nbroken = no_such_module_xyz:Plugin\n")
    env = child_env(PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")

    def kiq_cli(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kiq.cli", *args], cwd=tmp_path, env={**env, **extra},
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip

    quiet = kiq_cli("settings", "--json")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    named = kiq_cli("settings", KIQ_PLUGINS="broken")
    assert named.returncode == 2 and named.stderr.count("\n") == 1, named.stderr
    assert "plugin 'broken' is installed but cannot be loaded: ModuleNotFoundError" in named.stderr
    assert "no_such_module_xyz" in named.stderr and "Traceback" not in named.stderr


def test_no_registered_jobs_is_a_clear_error() -> None:
    result = run_cli("worker", "--redis-url", "redis://127.0.0.1:1", "-r", "tests.jobs")
    assert result.returncode == 2 and "no jobs are registered after importing tests.jobs" in result.stderr
    result = run_cli("worker", "--redis-url", "redis://127.0.0.1:1")
    assert result.returncode == 2 and "-r MODULE" in result.stderr


@pytest.mark.slow
def test_unreachable_redis_at_start_is_logged_once_and_term_still_stops(tmp_path: Path) -> None:
    with WorkerProcess(["-r", "tests.jobs.basic"], "redis://127.0.0.1:1", tmp_path / "w.log", FAST) as worker:
        wait_until(lambda: "is unreachable" in worker.output(), 30, message="the outage to be logged")
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        output = worker.output()
        assert output.count("is unreachable") == 1, output
        # one line each: the outage (with the URL and the cause), no chained traceback of the refused connection
        (outage,) = [line for line in output.splitlines() if "is unreachable" in line]
        assert "WARNING: Redis at redis://127.0.0.1:1 is unreachable" in outage and "Connection refused" in outage
        assert "Traceback" not in output, output
        assert all(line.startswith("20") for line in output.splitlines()), output  # each line is a log record


@pytest.mark.slow
def test_a_file_path_flags_and_ttin(start_worker_process: StartWorker, e2e_config: kiq.Config) -> None:
    r = e2e_config.redis
    env = {**FAST, "KIQ_CONCURRENCY": "5"}
    worker = start_worker_process(
        "-r", "tests/jobs/basic.py", "-c", "2", "--tag", "t1", "-q", "a,2", "-q", "b", env=env
    )
    info = json.loads(wait_until(lambda: r.hget(identity_of(r, worker), "info"), 30, message="info"))
    assert info["concurrency"] == 2 and info["tag"] == "t1" and info["queues"] == ["a", "b"]
    assert info["weights"] == [{"a": 2, "b": 0}]
    worker.signal(signal.SIGTTIN)
    wait_until(lambda: "thread kiq-default-1" in worker.output(), 30, message="a thread dump")
    Record.set(queue="b").perform_async("via-file-path")
    wait_until(lambda: r.hexists("performed", "via-file-path"), 30, message="the job to run")
    assert worker.stop() == 0


@pytest.mark.slow
def test_remote_signals(start_worker: StartWorker, e2e_config: kiq.Config) -> None:
    r: redis.Redis = e2e_config.redis
    worker = start_worker("-r", "tests.jobs.basic", env=FAST)
    key = identity_of(r, worker)
    r.lpush(f"{key}-signals", "TSTP")
    wait_until(lambda: r.hget(key, "quiet") == "true", 30, message="quiet after a remote TSTP")
    assert worker.running  # quiet, not suspended
    r.lpush(f"{key}-signals", "TERM")
    assert worker.wait(30) == 0
    assert not r.sismember("processes", key)
