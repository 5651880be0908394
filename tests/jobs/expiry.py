"""Jobs and a recording plugin for tests/plugins/expiry (a worker loads them with ``-r tests.jobs.expiry`` and
``KIQ_PLUGINS=expiry,unique,tests.jobs.expiry:Recorder``)."""

from __future__ import annotations

import json
from typing import Any

import kiq

RUNS = "expiry-test:runs"  # LIST of jids, one per perform
DEATHS = "expiry-test:deaths"  # LIST of jids the death hook saw
DROPPED = "expiry-test:dropped"  # LIST of {"jid", "reason"} the kiq_job_dropped hook saw


class Quote(kiq.Job):
    kiq_name = "ExpiryQuote"
    kiq_options = {"expires_in": 60}

    def perform(self, number: int) -> None:
        kiq.default_config().redis.rpush(RUNS, self.jid)


class UniqueQuote(Quote):
    kiq_name = "ExpiryUniqueQuote"
    kiq_options = {"unique_for": 60}


class Recorder:
    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any], config: kiq.Config) -> None:
        config.redis.rpush(DEATHS, str(job.get("jid")))

    @kiq.hookimpl
    def kiq_job_dropped(self, job: dict[str, Any], reason: str, config: kiq.Config) -> None:
        config.redis.rpush(DROPPED, json.dumps({"jid": job.get("jid"), "reason": reason}))
