"""The worker's metrics port (``kiq worker --metrics-port PORT``): ``/metrics`` (Prometheus), ``/livez`` and
``/readyz`` (Kubernetes probes), and ``kiq health``, the same checks as an exec probe.

- ``/livez``: 200 while the worker's own loops tick (the heartbeat's and the poller's, within
  ``liveness_timeout``; kiq.server.liveness), else 503 with the reason. Local only: Redis being down does not fail
  it (restarting a worker does not bring Redis back).
- ``/readyz``: 200 when Redis answers a PING and the worker takes jobs (not quiet, not stopping), else 503.

The port is served by threads of its own (``ThreadingHTTPServer``: one per request, the listener blocked in
``select`` between requests), not by the job threads, so busy jobs delay an answer only by their share of the
GIL (bench/metrics_cost.py measures a scrape's time under load). In a swarm the parent serves it for all its
children (kiq.server.process_metrics).
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..config import Config
from ..errors import ConfigError
from ..server.process_metrics import Snapshot

log = logging.getLogger("kiq")

PROBE_PATHS = ("/livez", "/readyz")


class MetricsPort:
    """The listening socket (bound when made, so a taken port stops the start) and, once started, its thread."""

    def __init__(self, config: Config) -> None:
        self.config = config
        try:
            self.server = ThreadingHTTPServer((config.metrics_host, config.metrics_port), _Handler)
        except (OSError, OverflowError) as exc:
            raise ConfigError(
                f"metrics_port {config.metrics_port}: cannot listen on {config.metrics_host}:{config.metrics_port} "
                f"({exc}); choose a free port, or 0 for none"
            ) from exc
        self.server.daemon_threads = True
        # a swarm's children are forked after the bind: the port is the parent's alone (a child left draining
        # after its parent died must not hold it against the next parent)
        os.register_at_fork(after_in_child=self.server.socket.close)
        self.snapshot: Callable[[], Snapshot] | None = None
        self._render: Callable[[str | None], tuple[bytes, str]] | None = None

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self, snapshot: Callable[[], Snapshot]) -> None:
        """Serve with ``snapshot`` as the process part (a launcher's, or a swarm's sum)."""
        self.snapshot = snapshot
        try:
            from ..api.exposition import MetricsCollector, exposition, registry_of
            from ..api.fleet import FleetGauges
        except ImportError as exc:  # prometheus_client missing: the probes still work
            log.warning("/metrics needs prometheus_client (pip install 'kiq[metrics]'): %s; serving the probes", exc)
        else:
            registry = registry_of(MetricsCollector(FleetGauges(self.config, processes=False), snapshot))
            self._render = lambda accept: exposition(registry, accept)
        self.server.kiq_port = self  # type: ignore[attr-defined]
        threading.Thread(target=self.server.serve_forever, name="kiq-metrics-port", daemon=True).start()
        log.info("metrics and probes on http://%s:%d (/metrics, /livez, /readyz)", *self.server.server_address[:2])

    def answer(self, path: str, accept: str | None) -> tuple[int, bytes, str]:
        """Status, body and content type for a GET of ``path``."""
        assert self.snapshot is not None
        if path == "/livez":
            stale = self.snapshot().stale
            return (503, _lines(stale), "text/plain") if stale else (200, b"ok\n", "text/plain")
        if path == "/readyz":
            unready = self.snapshot().unready or self._redis_unreachable()
            return (503, _lines([unready]), "text/plain") if unready else (200, b"ok\n", "text/plain")
        if path == "/metrics":
            if self._render is None:
                return 501, b"/metrics needs prometheus_client: pip install 'kiq[metrics]'\n", "text/plain"
            body, content_type = self._render(accept)
            return 200, body, content_type
        return 404, b"not found: /metrics, /livez, /readyz\n", "text/plain"

    def _redis_unreachable(self) -> str:
        try:
            self.config.redis.ping()
        except Exception as exc:
            return f"Redis does not answer: {type(exc).__name__}: {exc}"
        return ""

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    server_version = "kiq"

    def do_GET(self) -> None:
        port: MetricsPort = self.server.kiq_port  # type: ignore[attr-defined]
        try:
            status, body, content_type = port.answer(self.path.split("?", 1)[0], self.headers.get("Accept"))
        except Exception as exc:  # a scrape must not take the port down
            log.exception("metrics port: %s failed", self.path)
            status, body, content_type = 500, f"{type(exc).__name__}: {exc}\n".encode(), "text/plain"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics port: " + format, *args)


def _lines(reasons: list[str]) -> bytes:
    return "".join(f"{reason}\n" for reason in reasons).encode()


# -- kiq health -----------------------------------------------------------------------------------------------
def add_health_command(commands: argparse._SubParsersAction[Any]) -> None:
    health = commands.add_parser(
        "health",
        help="exit 0 when the worker on the metrics port is live (or, with --ready, ready), else 1",
        description="An exec probe (Docker HEALTHCHECK, Kubernetes exec): asks the worker's metrics port for "
        "/livez (or /readyz); exit 0 on 200, 1 otherwise, printing why.",
    )
    health.add_argument("--port", type=int, help="the worker's metrics port (default: the metrics_port setting)")
    health.add_argument("--host", default="127.0.0.1", help="the worker's address (default 127.0.0.1)")
    health.add_argument("--ready", action="store_true", help="check /readyz instead of /livez")
    health.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the answer (default 5)")
    health.add_argument("-C", "--config", help="config file (default: kiq.toml or [tool.kiq] in pyproject.toml)")
    health.set_defaults(run=run_health)


def run_health(args: argparse.Namespace) -> int:
    port = args.port if args.port is not None else Config.load(args.config).metrics_port
    if not port:
        raise ConfigError("kiq health: no metrics port; give --port PORT or set metrics_port (KIQ_METRICS_PORT)")
    url = f"http://{args.host}:{port}{'/readyz' if args.ready else '/livez'}"
    try:
        with urllib.request.urlopen(url, timeout=args.timeout) as response:
            print(f"{url}: {response.status} {response.read().decode().strip()}")
            return 0
    except urllib.error.HTTPError as exc:
        print(f"{url}: {exc.code} {exc.read().decode().strip()}")
    except OSError as exc:  # refused, timed out: no worker answering is not healthy either
        print(f"{url}: no answer ({exc})")
    return 1
