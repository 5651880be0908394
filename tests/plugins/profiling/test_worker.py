"""Profiling in a real worker: a job pushed with a profile token leaves its profile in Sidekiq 8's layout (an entry
in ``profiles`` scored with its expiry, a hash with Sidekiq's fields and the data, kept a day at most); a job
without a token leaves nothing; an ``async def`` job and a failed job are profiled too."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable

import pytest
import redis

import kiq
import kiq.ext
from kiq.plugins.profiling import EXPIRY, profiles
from kiq.plugins.profiling.views import call_tree, session_of
from tests.jobs.profiling import AsyncCrunch, CrunchReport, FailingCrunch
from tests.support import FAST, WorkerProcess, wait_until

StartWorker = Callable[..., WorkerProcess]
WORKER = ("-r", "tests.jobs.profiling", "-c", "2")
ENV = {**FAST, "KIQ_PLUGINS": "profiling"}
SIDEKIQ_FIELDS = {"started_at", "token", "type", "jid", "elapsed", "data", "size"}


@pytest.fixture
def config(e2e_config: kiq.Config) -> kiq.Config:
    e2e_config.add_plugin("profiling")
    return e2e_config


def stored(r: redis.Redis, key: str) -> dict[str, str]:
    wait_until(lambda: r.zscore("profiles", key) is not None, 30, message=f"profile {key} to be stored")
    return r.hgetall(key)


def firefox_json(fields: dict[str, str]) -> dict[str, object]:
    raw = fields["data"].encode("utf-8", "surrogateescape")  # binary, as kiq's clients decode it
    assert len(raw) == int(fields["size"])
    return json.loads(gzip.decompress(raw))


def test_a_cpu_bound_job_with_a_token_leaves_its_profile(config: kiq.Config, start_worker: StartWorker) -> None:
    r = config.redis
    before = time.time()
    jid = CrunchReport.set(profile="ana").perform_async(3000)
    start_worker(*WORKER, env=ENV)
    fields = stored(r, f"ana-{jid}")
    assert set(fields) >= SIDEKIQ_FIELDS
    assert fields["token"] == "ana" and fields["jid"] == jid and fields["type"] == "ProfilingCrunchReport"
    assert int(fields["started_at"]) >= int(before) and float(fields["elapsed"]) > 0
    assert "error" not in fields and "cut" not in fields
    assert 0 < r.ttl(f"ana-{jid}") <= EXPIRY  # a day at most
    assert before + EXPIRY <= r.zscore("profiles", f"ana-{jid}") <= time.time() + EXPIRY
    profile = firefox_json(fields)
    assert profile["meta"]["preprocessedProfileVersion"] == 48  # type: ignore[index]
    (thread,) = profile["threads"]  # type: ignore[misc]
    names = {thread["stringArray"][index] for index in thread["funcTable"]["name"]}
    assert {"crunch_numbers", "square_sum"} <= names
    tree = call_tree(session_of(fields["pyinstrument"].encode("utf-8", "surrogateescape")))
    assert "crunch_numbers" in tree and "CrunchReport.perform" in tree
    (listed,) = profiles(config)
    assert (listed.key, listed.jid, listed.token, listed.type) == (f"ana-{jid}", jid, "ana", "ProfilingCrunchReport")


def test_a_job_without_a_token_leaves_nothing(config: kiq.Config, start_worker: StartWorker) -> None:
    r = config.redis
    CrunchReport.perform_async(200)
    start_worker(*WORKER, env=ENV)
    wait_until(lambda: r.get("stat:processed") == "1", 30, message="the job to run")
    assert r.exists("profiles") == 0
    assert [key for key in r.scan_iter() if not key.startswith(("stat:", "queues", "processes"))
            and ":" not in key] == []  # fmt: skip


def test_an_async_job_is_profiled_in_its_task(config: kiq.Config, start_worker: StartWorker) -> None:
    r = config.redis
    jid = AsyncCrunch.set(profile="bo").perform_async(2000)
    start_worker(*WORKER, env=ENV)
    fields = stored(r, f"bo-{jid}")
    tree = call_tree(session_of(fields["pyinstrument"].encode("utf-8", "surrogateescape")))
    assert "crunch_numbers" in tree and "[await]" in tree  # its awaiting shows as such, not as other work
    assert float(fields["elapsed"]) >= 0.05


def test_a_failed_job_keeps_its_profile(config: kiq.Config, start_worker: StartWorker) -> None:
    r = config.redis
    jid = FailingCrunch.set(profile="cy").perform_async(500)
    start_worker(*WORKER, env=ENV)
    fields = stored(r, f"cy-{jid}")
    assert fields["error"] == "ValueError"
    wait_until(lambda: r.get("stat:failed") == "1", 30, message="the failure to be counted")
    (listed,) = profiles(config)
    assert listed.error == "ValueError"


def test_a_wrong_token_from_another_producer_runs_the_job_unprofiled(
    config: kiq.Config, start_worker: StartWorker
) -> None:
    """A payload pushed without the plugin's check (another app, Ruby): a token kiq cannot use is logged and the job
    runs, unprofiled."""
    r = config.redis
    for token in (True, "nul\x00byte", "\udcff"):  # a bool, a NUL, a byte that is not UTF-8
        job = {"class": "ProfilingCrunchReport", "args": [50], "jid": kiq.ext.new_jid(), "profile": token}
        r.lpush("queue:default", kiq.ext.dumps({**job, "queue": "default"}))
    worker = start_worker(*WORKER, env=ENV)
    wait_until(lambda: r.get("stat:processed") == "3", 30, message="the three jobs to run")
    assert r.exists("profiles") == 0
    assert worker.output().count("not profiled: option 'profile' must be") == 3


@pytest.mark.parametrize("token", ["", True, 7, "a" * 101, "new\nline"])
def test_a_wrong_token_is_refused_at_the_push(config: kiq.Config, token: object) -> None:
    with pytest.raises(kiq.InvalidJobError, match="option 'profile' must be"):
        CrunchReport.set(profile=token).perform_async(1)
    assert config.redis.dbsize() == 0
