"""The worker's metrics port (``kiq worker --metrics-port PORT``): ``/metrics`` (Prometheus), ``/livez`` and
``/readyz`` (Kubernetes probes); ``kiq health`` asks the same as an exec probe (kiq.plugins.metrics.health).

- ``/livez``: 200 while the worker's own loops tick (the heartbeat's and the poller's, within
  ``liveness_timeout``; kiq.plugins.metrics.liveness), else 503 with the reason. Local only: Redis being down does
  not fail it (restarting a worker does not bring Redis back).
- ``/readyz``: 200 when Redis answers a PING and the worker takes jobs (not quiet, not stopping), else 503.

The port is served by threads of its own (``ThreadingHTTPServer``: one per request, the listener blocked in
``select`` between requests), not by the job threads, so busy jobs delay an answer only by their share of the
GIL (bench/metrics_cost.py measures a scrape's time under load). In a swarm the parent serves it for all its
children (kiq.plugins.metrics.swarm).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kiq
from kiq.api.fleet import FleetGauges

from .snapshot import Snapshot

log = logging.getLogger("kiq")

PROBE_PATHS = ("/livez", "/readyz")


class MetricsPort:
    """The listening socket (bound when made, so a taken port stops the start) and, once started, its thread."""

    def __init__(self, config: kiq.Config) -> None:
        self.config = config
        host, port = config.get("metrics_host"), config.get("metrics_port")
        try:
            self.server = _Server((host, port), _Handler)
        except (OSError, OverflowError) as exc:
            raise kiq.ConfigError(
                f"metrics_port {port}: cannot listen on {host}:{port} ({exc}); choose a free port, or 0 for none"
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
            from .exposition import MetricsCollector, exposition, registry_of
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


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # the prober gave up before the answer (kiq health's timeout while the worker was stopped or busy): the
        # answer written later finds the peer gone; socketserver would print a traceback on stderr for it
        if isinstance(sys.exc_info()[1], ConnectionError):  # BrokenPipeError, ConnectionResetError
            log.debug("metrics port: %s left before its answer", client_address)
            return
        log.exception("metrics port: a request from %s failed", client_address)


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
