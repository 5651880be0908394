"""Metric readings: what kiq and its plugins report to a metrics exporter (Prometheus' ``/metrics`` of ``kiq worker
--metrics-port`` and ``kiq web``, the OTel plugin's observable instruments), as plain values.

A plugin contributes readings with the ``kiq_metrics(config, scope)`` hook; it returns them, it does not make
Prometheus or OpenTelemetry objects, so one implementation serves both exporters and a plugin needs neither
library. Two scopes, because they add up differently across a fleet:

- ``"process"``: what this worker process counted or holds (a counter of ticks it missed, jobs waiting in it now).
  Asked of a worker at each scrape; a swarm's port sums them over its children (counters also over the children
  that died, gauges over the live ones only).
- ``"fleet"``: what Redis holds for the whole fleet (batches open). Asked once per scrape of any port, cached
  with the other fleet gauges for about a second; every port shows the same value (aggregate with ``max``).

Names start with ``kiq_`` and counters end in ``_total`` (checked, so a typo shows at once); label values must come
from a bounded set (queue names, registered class names, a plugin's own fixed words), never from a payload's data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "gauge"]
NAME = re.compile(r"kiq_[a-z0-9_]+")
LABEL = re.compile(r"[a-z_][a-z0-9_]*")


@dataclass(frozen=True, slots=True)
class Reading:
    """One value of one metric: ``Reading("kiq_batches_open", 3, help="batches not yet complete")``; a counter
    (``kind="counter"``, name ending in ``_total``) only ever grows while its process lives."""

    name: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()
    kind: Kind = "gauge"
    help: str = ""

    def __post_init__(self) -> None:
        if not NAME.fullmatch(self.name):
            raise ValueError(f"metric name {self.name!r}: it must match kiq_[a-z0-9_]+ (e.g. kiq_batches_open)")
        if self.kind == "counter" and not self.name.endswith("_total"):
            raise ValueError(f"counter {self.name!r}: a counter's name ends in _total (e.g. {self.name}_total)")
        if self.kind not in ("counter", "gauge"):
            raise ValueError(f"metric {self.name!r}: kind {self.kind!r} is neither 'counter' nor 'gauge'")
        for label, _ in self.labels:
            if not LABEL.fullmatch(label):
                raise ValueError(f"metric {self.name!r}: label name {label!r} must match [a-z_][a-z0-9_]*")
