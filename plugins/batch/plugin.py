"""The batch plugin: its settings, its middleware, the deaths and drops it counts, and the writer it stops."""

from __future__ import annotations

import argparse
import threading
from typing import Any

import kiq
import kiq.ext
from kiq.tabs import Tab

from . import cli
from .context import running_job
from .metrics import fleet_readings
from .middleware import BatchClientMiddleware, BatchServerMiddleware
from .scripts import Changes
from .web import batches_tab
from .writer import OutcomeWriter

DAY = 24 * 60 * 60

SETTINGS = [
    kiq.ext.Setting.integer(
        "batch_expiry",
        30 * DAY,
        minimum=60,
        help="seconds a batch stays in Redis after its last change, until it succeeds",
    ),
    kiq.ext.Setting.integer(
        "batch_retention", DAY, minimum=1, help="seconds a batch stays in Redis after it succeeded"
    ),
    kiq.ext.Setting.number(
        "batch_shutdown_timeout", 10.0, help="seconds a stopping worker waits to write its jobs' outcomes to batches"
    ),
]


class BatchPlugin:
    """``plugins = ["batch"]`` in the workers that run batch jobs; ``Batch(...)`` adds it to the config it pushes
    with. One per config: it holds that config's program and outcome writer."""

    def __init__(self) -> None:
        self._changes: Changes | None = None
        self._writer: OutcomeWriter | None = None
        self._lock = threading.Lock()

    def changes(self, config: kiq.Config) -> Changes:
        with self._lock:
            if self._changes is None:
                self._changes = Changes(config)
            return self._changes

    def record(self, config: kiq.Config, op: str, bid: str, jid: str) -> None:
        """A job's outcome (``succeeded``, ``failed``, ``died``) for its batch; see OutcomeWriter.submit."""
        writer = self._writer
        if writer is None:
            changes = self.changes(config)
            with self._lock:
                writer = self._writer = self._writer or OutcomeWriter(changes)
        writer.submit(op, bid, jid)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until the outcomes recorded so far are written (tests, and code that reads a status right after)."""
        return self._writer is None or self._writer.flush(timeout)

    @kiq.hookimpl
    def kiq_settings(self) -> list[kiq.ext.Setting]:
        return SETTINGS

    @kiq.hookimpl
    def kiq_job_options(self) -> list[str]:
        return ["batch_callback"]

    @kiq.hookimpl
    def kiq_client_middleware(self, chain: kiq.Chain[kiq.ClientMiddleware]) -> None:
        chain.add(BatchClientMiddleware)

    @kiq.hookimpl
    def kiq_server_middleware(self, chain: kiq.Chain[kiq.ServerMiddleware]) -> None:
        # appended, like tracking's and unique's: the limiter (prepended) stays outside, so a job it reschedules is
        # seen here as an attempt that failed, not as a success
        chain.add(BatchServerMiddleware, self)

    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any], config: kiq.Config) -> None:
        bid, jid = job.get("bid"), job.get("jid")
        if isinstance(bid, str) and isinstance(jid, str):
            self.record(config, "died", bid, jid)

    @kiq.hookimpl
    def kiq_job_dropped(self, job: dict[str, Any], reason: str, config: kiq.Config) -> None:
        running = running_job.get()
        if running is not None and running.job is job:  # dropped inside our layer: it records the outcome
            running.dropped = reason
            return
        bid, jid = job.get("bid"), job.get("jid")
        if isinstance(bid, str) and isinstance(jid, str):  # dropped by an outer layer, before ours ran
            self.record(config, "failed", bid, jid)

    @kiq.hookimpl
    def kiq_shutdown(self, config: kiq.Config) -> None:
        if self._writer is not None:
            self._writer.close(config.get("batch_shutdown_timeout"))

    @kiq.hookimpl
    def kiq_metrics(self, config: kiq.Config, scope: str) -> list[kiq.ext.Reading] | None:
        """The fleet's batches, open and in all (kiq.plugins.batch.metrics)."""
        return fleet_readings(config) if scope == "fleet" else None

    @kiq.hookimpl
    def kiq_web_tabs(self, config: kiq.Config) -> list[Tab]:
        """The "Batches" tab of the dashboard: the newest batches, and each batch in full (see web.py)."""
        return [batches_tab(config)]

    @kiq.hookimpl
    def kiq_cli(self, commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        cli.add_commands(commands)
