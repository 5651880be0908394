"""The profiles a worker kept, listed: ``kiq profiles`` (a table, ``--json``, ``--limit``) and Sidekiq 8's own reads
(tests/ruby/profiles.rb: its ProfileSet and ProfileRecord conversions and its Data route, run by Ruby on the same
Redis); an expired profile is dropped from ``profiles`` by the next listing, as Sidekiq's ProfileSet drops it."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

import kiq
from kiq.plugins.profiling import profiles
from kiq.plugins.profiling.store import save
from tests.cli.helpers import Cli
from tests.jobs.profiling import CrunchReport, FailingCrunch
from tests.support import FAST, ROOT, WorkerProcess, missing_service, wait_until

StartWorker = Callable[..., WorkerProcess]


@pytest.fixture
def kept(e2e_config: kiq.Config, start_worker: StartWorker) -> tuple[kiq.Config, list[str]]:
    """Two profiles a worker kept: a finished job's (first) and a failed one's (last, so listed first)."""
    e2e_config.add_plugin("profiling")
    jids = [CrunchReport.set(profile="ana").perform_async(300), FailingCrunch.set(profile="bo").perform_async(300)]
    start_worker("-r", "tests.jobs.profiling", "-c", "1", env={**FAST, "KIQ_PLUGINS": "profiling"})
    wait_until(lambda: e2e_config.redis.zcard("profiles") == 2, 30, message="both profiles to be stored")
    return e2e_config, [str(jid) for jid in jids]


def test_kiq_profiles_lists_them_newest_first(
    kept: tuple[kiq.Config, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    config, (done, failed) = kept
    cli = Cli(config, capsys)
    listed = cli.json("profiles")
    assert [(p["key"], p["type"], p["error"]) for p in listed] == [
        (f"bo-{failed}", "ProfilingFailingCrunch", "ValueError"),
        (f"ana-{done}", "ProfilingCrunchReport", None),
    ]
    assert all(p["size"] > 0 and p["elapsed"] > 0 and p["cut"] is None for p in listed)
    assert [p["key"] for p in cli.json("profiles", "--limit", "1")] == [f"bo-{failed}"]
    lines = cli("profiles", "--utc").splitlines()
    assert lines[0].split() == ["STARTED", "CLASS", "JID", "TOKEN", "ELAPSED", "BYTES", "OUTCOME"]
    assert f"ProfilingFailingCrunch  {failed}  bo" in lines[1] and "failed: ValueError" in lines[1]
    assert f"ProfilingCrunchReport   {done}  ana" in lines[2] and lines[2].rstrip().endswith("done")


def test_an_expired_profile_is_dropped_from_the_listing(kept: tuple[kiq.Config, list[str]]) -> None:
    config, (done, _) = kept
    config.redis.zadd("profiles", {f"ana-{done}": time.time() - 1})  # as a day later
    assert [p.token for p in profiles(config)] == ["bo"]
    assert config.redis.zscore("profiles", f"ana-{done}") is None


@pytest.mark.slow
def test_sidekiq_8s_reads_list_kiqs_profiles(kept: tuple[kiq.Config, list[str]]) -> None:
    config, (done, failed) = kept
    read = read_by_ruby(config)
    assert [(p["key"], p["type"], p["token"]) for p in read] == [
        (f"bo-{failed}", "ProfilingFailingCrunch", "bo"),
        (f"ana-{done}", "ProfilingCrunchReport", "ana"),
    ]
    for seen in read:
        assert seen["size"] == seen["data_bytes"] and seen["elapsed"] > 0 and seen["started_at"] <= time.time()
        assert seen["product"] == "Python/kiq (pyinstrument)" and seen["threads"] == 1


def test_ruby_reads_a_profile_whose_gzip_time_reads_as_a_character(e2e_config: kiq.Config) -> None:
    """The reader above failed now and then (4 runs of 17 in a loop) with "invalid block type": the gzip header's
    time bytes (``c5 88``: a UTF-8 character) in a string the redis gem tags UTF-8 throw Zlib.gunzip off. It reads
    the data as the Data route serves it, bytes; kiq's own profiles have no time in their header (encode.gzipped)."""
    data = gzip.compress(b'{"meta": {"product": "Ruby/Vernier"}, "threads": []}', mtime=0x6B0B88C5)
    assert data[4:6] == b"\xc5\x88"
    save(e2e_config.redis, {"started_at": int(time.time()), "token": "cy", "type": "Timed", "jid": "c" * 24,
                            "elapsed": 0.5, "data": data, "size": len(data)})  # fmt: skip
    [seen] = read_by_ruby(e2e_config)
    assert (seen["key"], seen["product"], seen["data_bytes"]) == (f"cy-{'c' * 24}", "Ruby/Vernier", len(data))


def read_by_ruby(config: kiq.Config) -> list[dict[str, Any]]:
    """What Sidekiq 8's Profiles page shows of each profile and its Data route serves (tests/ruby/profiles.rb)."""
    ruby = os.environ.get("KIQ_TEST_RUBY") or shutil.which("ruby")
    probe = subprocess.run([ruby or "ruby", "-e", 'require "redis"'], capture_output=True) if ruby else None
    if ruby is None or probe is None or probe.returncode != 0:
        missing_service("Ruby with the redis gem (Debian: apt-get install ruby-redis)")
    assert ruby is not None
    done_run = subprocess.run(
        [ruby, str(ROOT / "tests" / "ruby" / "profiles.rb")], capture_output=True, text=True, timeout=60,
        env={**os.environ, "REDIS_URL": str(config.redis_url)},
    )  # fmt: skip
    assert done_run.returncode == 0, f"Ruby's reader failed:\n{done_run.stderr}"
    return [json.loads(line) for line in done_run.stdout.splitlines()]
