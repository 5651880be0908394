"""The Python side of the ActiveJob tests: jobs a Rails app enqueues with ``perform_later`` (tests/ruby/activejob.rb
defines their Ruby stand-ins), run by a kiq worker with the ``activejob`` plugin (``-r tests.jobs.activejob``).

Each run is pickled into Redis (the test reads back the Python values themselves, types included).
"""

from __future__ import annotations

import asyncio
import pickle
from datetime import date
from decimal import Decimal
from typing import Any

import kiq

QUEUE = "aj_kiq"
RUBY_QUEUE = "aj_ruby"
RUNS = "interop:activejob:kiq:runs"  # LIST of pickled run dicts


def record(job: kiq.Job, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    run = {"jid": job.jid, "args": list(args), "kwargs": kwargs, "payload_kwargs": job.job.get("kwargs"),
           "active_job": getattr(job, "active_job", None), "class": job.job["class"]}  # fmt: skip
    kiq.default_config().redis.rpush(RUNS, pickle.dumps(run).hex())


def runs(config: kiq.Config) -> list[dict[str, Any]]:
    return [pickle.loads(bytes.fromhex(raw)) for raw in config.redis.lrange(RUNS, 0, -1)]


class ReportJob(kiq.Job):
    kiq_name = "ReportJob"
    kiq_options = {"queue": QUEUE}

    def perform(self, *args: Any, **kwargs: Any) -> None:
        record(self, args, kwargs)


class TypedReportJob(kiq.Job):
    """Annotated parameters: the core converts by annotations what the plugin decoded (no-ops: same types)."""

    kiq_name = "TypedReportJob"
    kiq_options = {"queue": QUEUE}

    def perform(self, amount: Decimal, day: date, mode: str = "slow") -> None:
        record(self, (amount, day), {"mode": mode})


class AsyncReportJob(kiq.Job):
    kiq_name = "AsyncReportJob"
    kiq_options = {"queue": QUEUE}

    async def perform(self, *args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(0)
        record(self, args, kwargs)


class FlakyReportJob(kiq.Job):
    """Always fails in Python; its retry is an hour away, so the entry stays in the retry set for the test."""

    kiq_name = "FlakyReportJob"
    kiq_options = {"queue": QUEUE}

    def perform(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"report failed in Python ({len(args)} arguments)")

    def retry_in(self, count: int, exc: BaseException, job: dict[str, Any]) -> int:
        return 3600
