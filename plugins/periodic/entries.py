"""What a periodic job is: a cron expression, a job (by wire name), its arguments (positional and keyword), queue and
time zone; checked where
it is declared (the ``periodic`` setting, or ``kiq.plugins.periodic.register`` in code).

Cron expressions are parsed and evaluated by cronsim (the ``periodic`` extra), which follows Debian's cron, DST
included: in a zone with DST, a time that does not exist that day runs when the clock jumps over it, and a time that
happens twice runs once. Five fields, or six with seconds first (``*/10 * * * * *``: every 10 seconds).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import kiq

if TYPE_CHECKING:
    from collections.abc import Iterator

# the keys of a [[periodic]] table
KEYS = ("cron", "class", "args", "kwargs", "queue", "tz", "name")


def cron_times(cron: str, start: datetime) -> Iterator[datetime]:
    """The times ``cron`` matches after ``start`` (cronsim's iterator). cronsim is imported here, so that a process
    without periodic jobs does not need it (every ``kiq`` command loads the installed plugins)."""
    try:
        from cronsim import CronSim, CronSimError
    except ImportError as exc:
        raise ValueError("periodic jobs need cronsim: pip install 'kiq[periodic]'") from exc
    try:
        return CronSim(cron, start)
    except CronSimError as exc:
        raise ValueError(f"bad cron expression {cron!r}: {exc}") from None


def time_zone(name: str) -> tzinfo:
    if name == "UTC":  # cronsim's plain path (no DST handling to do)
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r} (an IANA name such as 'Europe/Paris' or 'UTC')") from exc


@dataclass(frozen=True)
class PeriodicJob:
    """One periodic job. ``job`` is the wire name of a job class that the worker registers (``-r``); ``tz`` is an
    IANA time zone, UTC by default so that every host computes the same ticks whatever its local zone."""

    cron: str
    job: str
    args: list[Any] = field(default_factory=list, hash=False)  # a list, as in TOML and JSON: not part of the hash
    queue: str | None = None
    tz: str = "UTC"
    name: str = ""  # for listings and logs; the job's name by default
    kwargs: dict[str, Any] = field(default_factory=dict, hash=False)  # keyword arguments, pushed as the job's kwargs

    def __post_init__(self) -> None:
        if not isinstance(self.job, str) or not self.job:
            raise ValueError(f"'class' must be the name of a job, got {self.job!r:.80}")
        if not isinstance(self.args, list):
            raise ValueError(f"'args' must be a list, got {self.args!r:.80}")
        if not isinstance(self.kwargs, dict):
            raise ValueError(f"'kwargs' must be a table of keyword arguments, got {self.kwargs!r:.80}")
        named = [key for key in self.kwargs if not isinstance(key, str) or not key.isidentifier()]
        if named:
            raise ValueError(f"'kwargs' names must be parameter names, got {named[0]!r:.80}")
        if self.queue is not None and (not isinstance(self.queue, str) or not self.queue):
            raise ValueError(f"'queue' must be a queue name, got {self.queue!r:.80}")
        if not isinstance(self.name, str):
            raise ValueError(f"'name' must be a string, got {self.name!r:.80}")
        if not self.name:
            object.__setattr__(self, "name", self.job)
        if not isinstance(self.tz, str):
            raise ValueError(f"'tz' must be a time zone name, got {self.tz!r:.80}")
        if not isinstance(self.cron, str):
            raise ValueError(f"'cron' must be a cron expression, got {self.cron!r:.80}")
        for key in ("args", "kwargs"):
            try:
                json.dumps(getattr(self, key), allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{key!r} must be JSON: {exc}") from exc
        self.next_tick(0.0)  # a bad expression or zone fails here, where the job is declared

    @property
    def id(self) -> str:
        """A stable key for this job's schedule in Redis: a digest of everything that defines it but its name (its
        kwargs only when it has some, so that a job declared before kwargs existed keeps its key)."""
        defined = [self.cron, self.job, self.args, self.queue, self.tz, *([self.kwargs] if self.kwargs else [])]
        identity = json.dumps(defined, sort_keys=True)
        return hashlib.sha256(identity.encode()).hexdigest()[:16]

    def next_tick(self, after: float) -> float:
        """The first time (epoch seconds) after ``after`` at which the job is due, in its time zone."""
        start = datetime.fromtimestamp(after, time_zone(self.tz))
        for tick in cron_times(self.cron, start):
            return tick.timestamp()
        raise ValueError(f"bad cron expression {self.cron!r}: it matches no time in the next 50 years")

    def as_table(self) -> dict[str, Any]:
        """The job as a ``[[periodic]]`` table (how it is shown and stored for ``kiq periodic``); ``kwargs`` only when
        it has some, so that a listing by an older kiq on the same Redis still reads the others."""
        table = {"cron": self.cron, "class": self.job, "args": self.args, "queue": self.queue, "tz": self.tz,
                 "name": self.name}  # fmt: skip
        return {**table, "kwargs": self.kwargs} if self.kwargs else table


def shown(when: float, tz: str) -> str:
    """A time in a job's own zone, as its cron expression reads it: ``2026-03-29 03:00:00 CEST``."""
    return datetime.fromtimestamp(when, time_zone(tz)).strftime("%Y-%m-%d %H:%M:%S %Z")


def from_table(table: Any) -> PeriodicJob:
    if isinstance(table, PeriodicJob):
        return table
    if not isinstance(table, dict):
        raise ValueError(f"expected a table with cron and class, got {table!r:.80}")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (a periodic job has: {', '.join(KEYS)})")
    if "cron" not in table or "class" not in table:
        raise ValueError("a periodic job needs 'cron' and 'class'")
    return PeriodicJob(
        cron=table["cron"],
        job=table["class"],
        args=table.get("args", []),
        kwargs=table.get("kwargs", {}),
        queue=table.get("queue"),
        tz=table.get("tz", "UTC"),
        name=table.get("name") or "",
    )


def parse_setting(raw: Any) -> list[dict[str, Any]]:
    """The ``periodic`` setting: ``[[periodic]]`` tables in kiq.toml (``[[tool.kiq.periodic]]`` in pyproject.toml),
    a list of dicts or PeriodicJobs in code, or JSON text in ``KIQ_PERIODIC``. Each job is checked here; the value
    kept is the list of tables, complete, as a setting's value is shown (``kiq settings``)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"expected a JSON list of periodic jobs: {exc}") from exc
    if not isinstance(raw, list | tuple):
        raise ValueError(f"expected a list of periodic jobs ([[periodic]] tables), got {raw!r:.80}")
    entries = []
    for index, table in enumerate(raw, 1):
        try:
            entries.append(from_table(table).as_table())
        except ValueError as exc:
            described = f" ({table.get('class')})" if isinstance(table, dict) and "class" in table else ""
            raise ValueError(f"periodic job {index}{described}: {exc}") from exc
    return entries


def wire_name(job: type[kiq.Job] | kiq.JobFunction[..., Any] | str) -> str:
    """The wire name of a job given as a class, an ``@kiq.job`` function or a name."""
    if isinstance(job, str):
        return job
    job_class = job.job_class if isinstance(job, kiq.JobFunction) else job
    return job_class.kiq_name
