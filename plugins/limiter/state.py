"""What the limiters in use look like now: every limiter recorded in the registry hash, how much of its limit is
taken, and how many jobs it sent back to the schedule (``kiq limiters``, ``limiter_states()``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kiq
import kiq.ext

from .limiters import Limiter, bucket, concurrent, window
from .scripts import LISTING

log = logging.getLogger("kiq.limiter")


@dataclass(frozen=True)
class LimiterState:
    kind: str
    name: str
    limit: int
    rate: str  # the limit in words: "2 at once", "10 per 1 s"
    in_use: int  # concurrent: slots held; window: admissions in the last interval; bucket: tokens taken
    overrated: int  # jobs rescheduled because it was full

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "limit": self.limit,
            "rate": self.rate,
            "in_use": self.in_use,
            "overrated": self.overrated,
        }


_FROM_DEFINITION: dict[str, Callable[[dict[str, Any]], Limiter]] = {
    "concurrent": lambda d: concurrent(d["name"], d["limit"], lock_timeout=d["lock_timeout"]),
    "window": lambda d: window(d["name"], d["limit"], d["interval"]),
    "bucket": lambda d: bucket(d["name"], d["limit"], d["interval"]),
}


def limiter_states(config: kiq.Config | None = None) -> list[LimiterState]:
    """Every limiter used on the config's Redis, by kind and name. A limiter used with different definitions in
    different processes is shown with the last one used."""
    redis = (config or kiq.default_config()).redis
    listing = redis.register_script(LISTING.source)
    (secs, micros), definitions, overrated = listing(keys=LISTING.keys(kiq.ext.keyspace(redis)))
    now_ms = int(secs) * 1000 + int(micros) / 1000
    counts = _fields(overrated)
    states = []
    for field, text in sorted(_fields(definitions).items()):
        try:
            definition = json.loads(text)
            limiter = _FROM_DEFINITION[definition["kind"]](definition)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("skipping the unreadable limiter definition %s: %r (%s)", field, text, exc)
            continue
        states.append(
            LimiterState(
                limiter.kind,
                limiter.name,
                limiter.limit,
                limiter.limit_text(),
                limiter.in_use(redis, now_ms),
                int(counts.get(field, 0)),
            )
        )
    return states


def _fields(flat: list[str]) -> dict[str, str]:
    """A hash read by a script (``HGETALL``: fields and values in turn) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))
