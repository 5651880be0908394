"""Prometheus metrics and Kubernetes probes for kiq workers: ``kiq worker --metrics-port PORT`` serves
``/metrics`` (``prometheus_client``'s text format: ``pip install 'kiq[metrics]'``), ``/livez`` and ``/readyz``, one
port for a whole swarm (``-p N``, its children's counts summed); ``kiq health`` is the exec probe.

The port (the flag, ``metrics_port`` in the config file, or ``KIQ_METRICS_PORT``) enables the plugin by itself:
the setting is declared in the ``kiq.settings`` entry point group, so giving it loads this plugin; ``plugins =
["metrics"]`` is not needed (and does nothing without a port). docs/guide/operations.md and
docs/reference/plugins-metrics.md; the design in docs/architecture.md.
"""

from __future__ import annotations

from .plugin import SETTINGS, MetricsPlugin

__all__ = ["SETTINGS", "MetricsPlugin"]
