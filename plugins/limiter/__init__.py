"""Rate limiters shared by every process on the Redis, used inside ``perform``:

    from kiq.plugins import limiter

    class SyncOrder(kiq.Job):
        def perform(self, order_id):
            with limiter.concurrent("erp", 2, lock_timeout=60):     # at most 2 at once, fleet-wide
                erp.sync(order_id)
            with limiter.window("stripe", 100, 1.0):                # at most 100 in any second
                stripe.charge(order_id)

A limiter with no room within its ``wait_timeout`` (5 s by default) raises ``OverLimit``; with ``plugins =
["limiter"]`` in the worker, the job is then rescheduled with a backoff, without using a retry or counting as a
failure. ``kiq limiters`` and ``limiter_states()`` show what is in use. See the README, "Rate limiters".
"""

from __future__ import annotations

import argparse

import kiq
import kiq.ext

from . import cli, metrics
from .limiters import (
    BucketLimiter,
    ConcurrentLimiter,
    Lease,
    Limiter,
    OverLimit,
    WindowLimiter,
    bucket,
    concurrent,
    window,
)
from .middleware import OverLimitMiddleware
from .state import LimiterState, limiter_states

__all__ = [
    "BucketLimiter",
    "ConcurrentLimiter",
    "Lease",
    "Limiter",
    "LimiterPlugin",
    "LimiterState",
    "OverLimit",
    "WindowLimiter",
    "bucket",
    "concurrent",
    "limiter_states",
    "window",
]

SETTINGS = [
    kiq.ext.Setting.number(
        "limiter_backoff",
        10.0,
        minimum=0.1,
        help="seconds: a job over a limit is rescheduled in backoff x reschedules so far, plus up to one backoff",
    ),
    kiq.ext.Setting.integer(
        "limiter_max_reschedules",
        20,
        minimum=0,
        help="reschedules of a job over a limit before its OverLimit is an error like any other (retries apply)",
    ),
]


class LimiterPlugin:
    """``plugins = ["limiter"]`` in the workers whose jobs use limiters: an ``OverLimit`` then reschedules the job."""

    @kiq.hookimpl
    def kiq_settings(self) -> list[kiq.ext.Setting]:
        return SETTINGS

    @kiq.hookimpl
    def kiq_job_options(self) -> list[str]:
        return ["overrated"]

    @kiq.hookimpl
    def kiq_server_middleware(self, chain: kiq.Chain[kiq.ServerMiddleware]) -> None:
        # outermost: the other layers (tracking, unique) see the OverLimit as the job's error (enqueued again, lock
        # kept), and only then is it turned into a reschedule
        chain.prepend(OverLimitMiddleware)

    @kiq.hookimpl
    def kiq_metrics(self, config: kiq.Config, scope: str) -> list[kiq.ext.Reading]:
        """Waits for room in this process; the fleet's reschedules (kiq.plugins.limiter.metrics)."""
        return metrics.process_readings() if scope == "process" else metrics.fleet_readings(config)

    @kiq.hookimpl
    def kiq_cli(self, commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        cli.add_commands(commands)
