"""Every extension point of kiq, as pluggy hook specifications.

A plugin is any object (often a module) with functions marked ``@kiq.hookimpl`` and named like these.
Plugins are registered with ``config.plugins.register(obj)`` or named in the ``plugins`` setting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from .config import Config, Setting
    from .fetch import Fetcher
    from .manager import Capsule
    from .middleware import Chain

hookspec = pluggy.HookspecMarker("kiq")
hookimpl = pluggy.HookimplMarker("kiq")


@hookspec
def kiq_settings() -> list[Setting]:
    """Declare extra settings this plugin reads (so they are accepted, parsed and validated like core ones)."""
    raise NotImplementedError


@hookspec
def kiq_client_middleware(chain: Chain[Any], config: Config) -> None:
    """Add entries to the client chain (``chain.add(MyMiddleware)``); called once, when the plugin is registered."""


@hookspec
def kiq_server_middleware(chain: Chain[Any], config: Config) -> None:
    """Add entries to the server chain; called once, when the plugin is registered."""


@hookspec
def kiq_push_bulk(config: Config, queue: str, count: int) -> AbstractContextManager[None] | None:
    """Return a context manager to run around a whole ``push_bulk`` (every job's client middleware and the
    Redis writes), or None; e.g. one tracing span for the batch."""


@hookspec
def kiq_operation(name: str, config: Config) -> AbstractContextManager[None] | None:
    """Return a context manager to run around one of a worker's internal operations, or None: ``"poll"`` (one
    pass of the scheduled/retry poller) or ``"heartbeat"`` (one heartbeat); e.g. a tracing span."""


@hookspec(firstresult=True)
def kiq_fetcher(name: str, config: Config, capsule: Capsule) -> Fetcher | None:
    """Return a fetcher for the ``fetch`` setting ``name`` if this plugin provides it, else None."""
    raise NotImplementedError


@hookspec
def kiq_error(exc: BaseException, context: dict[str, Any], config: Config) -> None:
    """An error happened (a job raised, or an internal component failed); ``context`` says where."""


@hookspec
def kiq_death(job: dict[str, Any], exc: BaseException | None, config: Config) -> None:
    """A job died: its retries were exhausted, it was not retryable, or it was killed."""


@hookspec
def kiq_startup(config: Config) -> None:
    """The worker process has started and is about to fetch jobs."""


@hookspec
def kiq_quiet(config: Config) -> None:
    """The worker stopped fetching new jobs (TSTP, or the first step of a stop)."""


@hookspec
def kiq_shutdown(config: Config) -> None:
    """The worker is shutting down; running jobs are finished or requeued."""


@hookspec
def kiq_heartbeat(config: Config) -> None:
    """Called on every heartbeat (every ``heartbeat_interval`` seconds) from the heartbeat thread."""
