"""``kiq health``: an exec probe (Docker ``HEALTHCHECK``, Kubernetes ``exec``) asking a worker's metrics port
(kiq.plugins.metrics.port) for ``/livez`` (or, with ``--ready``, ``/readyz``); exit 0 on 200, else 1."""

from __future__ import annotations

import argparse
import urllib.error
import urllib.request
from typing import Any

import kiq

TIMEOUT = 2.0  # seconds kiq health waits for /livez by default (a SIGSTOPped worker accepts but never answers)


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
    health.add_argument(
        "--timeout",
        type=float,
        default=TIMEOUT,
        help=f"seconds to wait for the answer (default {TIMEOUT:g}: with the command's ~1 s start-up, a hung worker "
        "is reported within Docker's usual 5 s HEALTHCHECK timeout)",
    )
    health.add_argument("-C", "--config", help="config file (default: kiq.toml or [tool.kiq] in pyproject.toml)")
    health.set_defaults(run=run_health)


def run_health(args: argparse.Namespace) -> int:
    # a config without the setting has not loaded the plugin: no port then, not an unknown setting
    port = args.port if args.port is not None else kiq.Config.load(args.config).settings.get("metrics_port")
    if not port:
        raise kiq.ConfigError("kiq health: no metrics port; give --port PORT or set metrics_port (KIQ_METRICS_PORT)")
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
