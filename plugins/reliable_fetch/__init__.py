"""Reliable fetch: no job is lost when a worker process is killed (``fetch = "reliable"``).

The hooks here wire the fetcher into the worker's life: they declare the settings, build the fetcher, keep
this process's liveness key fresh, and run orphan recovery at start-up and on the heartbeat (the lease lets
one process of the fleet do it per ``reliable_recovery_interval``). See the README, "Reliable fetch".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiq import Setting, hookimpl
from kiq.config import as_float, as_int

from .fetch import Capsule, ReliableFetch, ReliableUnit, open_fetchers
from .recovery import InterruptedJobError, Recovery, recover_orphans

if TYPE_CHECKING:
    from kiq.config import Config

__all__ = ["InterruptedJobError", "Recovery", "ReliableFetch", "ReliableUnit", "recover_orphans"]

SETTINGS = [
    Setting(
        "reliable_max_interrupts",
        3,
        as_int(1),
        "a job whose worker dies this many times while running it goes to dead (per job: max_interrupts)",
    ),
    Setting("reliable_batch_size", 10, as_int(1), "most jobs one reliable fetch moves per round trip"),
    Setting("reliable_recovery_interval", 30.0, as_float(0.5), "seconds between orphan recoveries across the fleet"),
]


@hookimpl
def kiq_settings() -> list[Setting]:
    return SETTINGS


@hookimpl
def kiq_fetcher(name: str, config: Config, capsule: Capsule) -> ReliableFetch | None:
    return ReliableFetch(capsule) if name == "reliable" else None


@hookimpl
def kiq_startup(config: Config) -> None:
    _recover(config)


@hookimpl
def kiq_heartbeat(config: Config) -> None:
    for fetcher in open_fetchers(config):
        try:
            fetcher.heartbeat()
        except Exception as exc:
            config.handle_exception(exc, {"context": "reliable fetch heartbeat"})
    _recover(config)


@hookimpl
def kiq_quiet(config: Config) -> None:
    for fetcher in open_fetchers(config):
        fetcher.quiet()


def _recover(config: Config) -> None:
    fetchers = open_fetchers(config)
    if not fetchers:
        return  # only a process that keeps a liveness key (one with a reliable fetcher) recovers
    try:
        recover_orphans(config, fetchers[0].identity)
    except Exception as exc:
        config.handle_exception(exc, {"context": "reliable fetch orphan recovery"})
