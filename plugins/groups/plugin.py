"""The groups plugin's hooks: the ``group`` option and its writer, the job source of every capsule, the slots'
release (a job observer), renewal (the heartbeat) and return at shutdown, and ``kiq.Queue(q).group(g)``."""

from __future__ import annotations

import argparse
import threading
from typing import Any

import kiq
import kiq.ext
from kiq.tabs import Tab

from . import cli
from .group import Group
from .leases import Leases
from .metrics import fleet_readings
from .push import GroupClientMiddleware, GroupWriter
from .source import GroupSource
from .web import groups_tab

SETTINGS = [
    kiq.ext.Setting.integer(
        "group_concurrency",
        0,
        minimum=0,
        help="most jobs of one job group that run at once over every worker (0: no limit); "
        "kiq.Queue(q).group(g).concurrency overrides it per group",
    ),
]


class SlotReleaser:
    """The job observer that gives a grouped job's slot back when its attempt ends (done, failed or requeued)."""

    def __init__(self, leases: Leases) -> None:
        self.leases = leases

    def started(self, queue: str, job: dict[str, Any]) -> None:
        pass

    def finished(self, queue: str, job: dict[str, Any], seconds: float, outcome: kiq.ext.AttemptOutcome) -> None:
        group = job.get("group")
        if isinstance(group, str):
            jid = job.get("jid")
            self.leases.release(queue, group, jid if isinstance(jid, str) else "")


class GroupsPlugin:
    """``plugins = ["groups"]``, in the workers and in the processes that push grouped jobs."""

    def __init__(self) -> None:
        self._leases: Leases | None = None
        self._lock = threading.Lock()

    def leases(self, config: kiq.Config) -> Leases:
        with self._lock:
            if self._leases is None:
                self._leases = Leases(config)
            return self._leases

    @kiq.hookimpl
    def kiq_settings(self) -> list[kiq.ext.Setting]:
        return SETTINGS

    @kiq.hookimpl
    def kiq_job_options(self) -> list[str]:
        return ["group"]

    @kiq.hookimpl
    def kiq_client_middleware(self, chain: kiq.Chain[kiq.ClientMiddleware]) -> None:
        chain.add(GroupClientMiddleware)

    @kiq.hookimpl
    def kiq_job_writer(self) -> GroupWriter:
        return GroupWriter()

    @kiq.hookimpl
    def kiq_job_source(self, capsule: kiq.ext.Capsule) -> GroupSource:
        return GroupSource(capsule.config, self.leases(capsule.config))

    @kiq.hookimpl
    def kiq_job_observer(self, config: kiq.Config) -> SlotReleaser:
        return SlotReleaser(self.leases(config))

    @kiq.hookimpl
    def kiq_heartbeat(self) -> None:
        if self._leases is not None:
            self._leases.renew()

    @kiq.hookimpl
    def kiq_shutdown(self, config: kiq.Config) -> None:
        if self._leases is not None:
            self._leases.release_all(timeout=config.timeout)

    @kiq.hookimpl
    def kiq_queue_group(self, queue: str, name: str, config: kiq.Config) -> Group:
        return Group(queue, name, config)

    @kiq.hookimpl
    def kiq_cli(self, commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        cli.add_commands(commands)

    @kiq.hookimpl
    def kiq_web_tabs(self, config: kiq.Config) -> list[Tab]:
        return [groups_tab(config)]

    @kiq.hookimpl
    def kiq_metrics(self, config: kiq.Config, scope: str) -> list[kiq.ext.Reading] | None:
        """Groups active, jobs waiting and slots in use, per queue (metrics.py)."""
        return fleet_readings(config) if scope == "fleet" else None
