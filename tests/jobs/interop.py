"""The Python side of tests/test_interop_ruby.py; a kiq worker loads it with ``-r tests.jobs.interop``.

The wire names are plain Ruby-style class names, so Ruby code pushes these jobs by name
(``Sidekiq::Client.push("class" => "InteropJob", ...)``) and kiq pushes the Ruby jobs of tests/ruby/jobs.rb
by theirs. kiq jobs listen on the ``kiq`` queue and Ruby jobs on ``ruby``: each queue belongs to the process
that knows its classes. Every run is written to Redis, where the test reads it back.
"""

from __future__ import annotations

import json
from typing import Any

import kiq
from tests.jobs import wait_for_release

KIQ_QUEUE = "kiq"
RUBY_QUEUE = "ruby"
KIQ_RUNS = "interop:kiq:runs"  # LIST of JSON {"jid", "class", "args", "queue"}, one per finished kiq run
RUBY_RUNS = "interop:ruby:runs"  # the same, written by the Ruby jobs (tests/ruby/jobs.rb uses the same key)
ATTEMPTS = "interop:kiq:attempts"  # HASH jid -> attempts of InteropFlakyJob
RELEASE = "interop:kiq:release:"  # + token: a LIST InteropBlockJob waits on


def record_run(job: kiq.Job, args: list[Any]) -> None:
    run = {"jid": job.jid, "class": job.job["class"], "args": args, "queue": job.job["queue"]}
    kiq.default_config().redis.rpush(KIQ_RUNS, json.dumps(run))


class InteropError(Exception):
    """The failure of InteropFlakyJob (its error_class on the wire is ``tests.jobs.interop.InteropError``)."""


class InteropJob(kiq.Job):
    """Pushed from Ruby by name; records its arguments."""

    kiq_name = "InteropJob"
    kiq_options = {"queue": KIQ_QUEUE}

    def perform(self, *args: Any) -> None:
        record_run(self, list(args))


class InteropFlakyJob(kiq.Job):
    """Fails on its first attempt, with a backtrace; a retry (from Ruby's RetrySet or DeadSet) then succeeds.

    Its retries are far away, so the failed job stays in the retry set until someone retries it by hand.
    """

    kiq_name = "InteropFlakyJob"
    kiq_options = {"queue": KIQ_QUEUE, "backtrace": True}

    def perform(self, *args: Any) -> None:
        if kiq.default_config().redis.hincrby(ATTEMPTS, self.jid, 1) == 1:
            raise InteropError(f"first attempt of {list(args)}")
        record_run(self, list(args))

    def retry_in(self, count: int, exc: BaseException, job: dict[str, Any]) -> int:
        return 3600


class InteropBlockJob(kiq.Job):
    """Keeps a worker thread busy until the test pushes to ``RELEASE + token`` (at most 20 s)."""

    kiq_name = "InteropBlockJob"
    kiq_options = {"queue": KIQ_QUEUE}

    def perform(self, token: str) -> None:
        wait_for_release(kiq.default_config().redis, RELEASE + token)
        record_run(self, [token])


class RubyEcho(kiq.Job):
    """A stand-in for the Ruby class ``RubyEcho``: pushing it from Python runs the Ruby job (no perform here)."""

    kiq_name = "RubyEcho"
    kiq_options = {"queue": RUBY_QUEUE}
