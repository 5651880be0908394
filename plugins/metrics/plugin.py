"""``MetricsPlugin``: the hooks that make a worker serve ``/metrics``, ``/livez`` and ``/readyz``.

Where each piece comes from (all public hooks, kiq.hookspecs):

- the settings ``metrics_port``, ``metrics_host``, ``liveness_timeout`` (``kiq_settings``), the flag
  ``kiq worker --metrics-port`` (``kiq_worker_options``) and ``kiq health`` (``kiq_cli``);
- the job counts and busy threads: a ``JobTally`` per job runner (``kiq_job_observer``);
- liveness: the heartbeat's and the poller's ticks (``kiq_loop_tick``); readiness: ``kiq_quiet``,
  ``kiq_shutdown``, and a Redis PING at each ``/readyz``;
- a single worker binds its port in ``kiq_check`` (a taken port stops the start, exit status 2) and serves from
  ``kiq_startup``; a swarm's parent binds and serves in ``kiq_swarm_startup`` and sums its children's snapshot
  files (``kiq_swarm_child_exited`` retires a reaped child's, ``kiq_swarm_stopping``, ``kiq_swarm_shutdown``),
  while each child writes its file instead of serving.

Without a port (``metrics_port`` 0) the plugin does nothing: it counts only what a port would serve.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
from typing import Any

import kiq
import kiq.ext

from .health import add_health_command
from .liveness import liveness_timeout
from .port import MetricsPort
from .snapshot import WorkerMetrics
from .swarm import SnapshotWriter, SwarmMetrics, snapshot_path
from .tally import JobTally

log = logging.getLogger("kiq")

SETTINGS = [
    kiq.ext.Setting.integer(
        "metrics_port", 0, 0, "port serving /metrics (Prometheus), /livez and /readyz from kiq worker; 0: none"
    ),
    kiq.ext.Setting.text("metrics_host", "0.0.0.0", "address the metrics port binds (0.0.0.0: every interface)"),
    kiq.ext.Setting.number(
        "liveness_timeout",
        0.0,
        0.0,
        "seconds the heartbeat or poller loop may be late before /livez fails; 0: three heartbeat_intervals (when "
        "reliable fetch takes the worker for dead and recovers its jobs)",
    ),
]


class MetricsPlugin:
    """Prometheus metrics and health probes of ``kiq worker --metrics-port PORT`` (one port for a swarm)."""

    def __init__(self) -> None:
        self.worker: WorkerMetrics | None = None  # a worker process's counts and health
        self.port: MetricsPort | None = None  # a single worker's, or a swarm parent's
        self.swarm: SwarmMetrics | None = None  # set in a swarm's parent; its children inherit it (fork)
        self.writer: SnapshotWriter | None = None  # a swarm child's

    # -- contributions ---------------------------------------------------------------------------------------
    @kiq.hookimpl
    def kiq_settings(self) -> list[kiq.ext.Setting]:
        return SETTINGS

    @kiq.hookimpl
    def kiq_worker_options(self, options: argparse._ArgumentGroup) -> None:
        options.add_argument(
            "--metrics-port",
            type=int,
            dest="metrics_port",
            metavar="PORT",
            help="serve /metrics (Prometheus), /livez and /readyz on this port (one for a whole swarm); default: none",
        )

    @kiq.hookimpl
    def kiq_cli(self, commands: argparse._SubParsersAction[Any]) -> None:
        add_health_command(commands)

    @kiq.hookimpl
    def kiq_job_observer(self, config: kiq.Config) -> JobTally | None:
        worker = self._worker(config)
        return None if worker is None else worker.new_tally()

    @kiq.hookimpl
    def kiq_check(self, config: kiq.Config) -> None:
        # a single worker binds its port here, so a taken one stops the start; a swarm's child serves none
        if config.get("metrics_port") and self.swarm is None and self.port is None:
            self.port = MetricsPort(config)

    @kiq.hookimpl
    def kiq_swarm_startup(self, config: kiq.Config) -> None:
        if not config.get("metrics_port"):
            return
        port = MetricsPort(config)  # bound before the children fork: the port is the parent's alone
        self.swarm = SwarmMetrics(tempfile.mkdtemp(prefix="kiq-swarm-metrics-"), liveness_timeout(config))
        port.start(self.swarm.snapshot)
        self.port = port

    # -- a worker process (alone, or a swarm's child) -------------------------------------------------------
    @kiq.hookimpl
    def kiq_startup(self, config: kiq.Config) -> None:
        worker = self._worker(config)
        if worker is None:
            return
        if self.swarm is not None:
            self.writer = SnapshotWriter(worker.snapshot, snapshot_path(self.swarm.directory, os.getpid()))
            self.writer.start()
        elif self.port is not None:
            self.port.start(worker.snapshot)

    @kiq.hookimpl
    def kiq_loop_tick(self, name: str, due_within: float | None) -> None:
        if self.worker is not None:
            self.worker.liveness.tick(name, due_within)

    @kiq.hookimpl
    def kiq_quiet(self) -> None:
        if self.worker is not None:
            self.worker.unready = "quiet"
            if self.writer is not None:  # the parent's /readyz sees it at once
                self.writer.write()

    @kiq.hookimpl
    def kiq_shutdown(self) -> None:
        if self.worker is not None:
            self.worker.unready = "stopping"
        if self.writer is not None:  # its last counts, kept by the parent once it reaps this child
            self.writer.stop()
            self.writer = None
        elif self.swarm is None and self.port is not None:
            self.port.close()
            self.port = None

    def _worker(self, config: kiq.Config) -> WorkerMetrics | None:
        if self.worker is None and config.get("metrics_port"):
            self.worker = WorkerMetrics(config)
        return self.worker

    # -- a swarm's parent --------------------------------------------------------------------------------
    @kiq.hookimpl
    def kiq_swarm_stopping(self) -> None:
        if self.swarm is not None:
            self.swarm.unready = "stopping"

    @kiq.hookimpl
    def kiq_swarm_child_exited(self, pid: int) -> None:
        if self.swarm is not None:
            self.swarm.child_exited(pid)

    @kiq.hookimpl
    def kiq_swarm_shutdown(self) -> None:
        if self.port is not None:
            self.port.close()
            self.port = None
        if self.swarm is not None:
            shutil.rmtree(self.swarm.directory, ignore_errors=True)
