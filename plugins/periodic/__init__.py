"""Periodic (cron) jobs, enqueued once per tick however many workers run.

In kiq.toml (``[[tool.kiq.periodic]]`` in pyproject.toml), next to ``plugins = ["periodic"]``:

    [[periodic]]
    cron = "*/5 * * * *"              # five fields, or six with seconds first
    class = "myapp.jobs.SyncPrices"   # the job's wire name; the worker must register it (-r)
    args = [42]
    kwargs = { region = "eu" }        # keyword arguments (JSON values, as args)
    tz = "Europe/Paris"               # default UTC

or in code, in the workers:

    @kiq.configure_server
    def schedule(config):
        kiq.plugins.periodic.register(config, "0 6 * * MON", WeeklyReport, args=["sales"], kwargs={"top": 10},
                                      tz="America/New_York")

``kiq periodic`` lists them with their last and next run. See the README, "Periodic jobs".
"""

from __future__ import annotations

from typing import Any

import kiq

from .entries import PeriodicJob, wire_name
from .plugin import PeriodicPlugin
from .store import PeriodicStatus, statuses

__all__ = ["PeriodicJob", "PeriodicPlugin", "PeriodicStatus", "periodic_statuses", "register"]


def register(
    config: kiq.Config,
    cron: str,
    job: type[kiq.Job] | kiq.JobFunction[..., Any] | str,
    *,
    args: list[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    queue: str | None = None,
    tz: str = "UTC",
    name: str = "",
) -> PeriodicJob:
    """Run ``job`` at every tick of ``cron`` (in ``tz``) in the workers of ``config``, which gets the plugin. A bad
    expression, zone, argument list or keyword arguments raises ``kiq.ConfigError`` here."""
    try:
        periodic = PeriodicJob(cron, wire_name(job), [] if args is None else args, queue, tz, name, kwargs or {})
    except ValueError as exc:
        raise kiq.ConfigError(f"periodic job {wire_name(job)}: {exc}") from exc
    config.add_plugin(PeriodicPlugin).declare(periodic)
    return periodic


def periodic_statuses(config: kiq.Config | None = None) -> list[PeriodicStatus]:
    """The periodic jobs the workers on the config's Redis run, with their last and next run, soonest first."""
    return statuses((config or kiq.default_config()).redis)
