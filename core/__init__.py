"""kiq: Redis-backed background jobs for Python, wire-compatible with Sidekiq 7.

What an application uses is here (``kiq.__all__``); what a plugin, a fetcher or a tool on kiq's Redis data uses
besides is in ``kiq.ext``. The modules below are organised in layers (docs/architecture.md): the base, the
extension surface, the client and the server, then the API (``kiq.api``) and CLI.
"""

import importlib as _importlib
import typing as _typing

from .async_client import AsyncClient
from .client import Client
from .config import Config, configure_client, configure_server, default_config
from .errors import (
    ArgumentError,
    ConfigError,
    Interrupted,
    InvalidJobError,
    InvalidPayload,
    JobArgumentError,
    JobTimeout,
    KiqError,
    NotReplicated,
    PayloadTooLarge,
    PushBufferFull,
    RegistryError,
    Shutdown,
    UnknownJobError,
)
from .hookspecs import hookimpl
from .job import Job, JobFunction, job
from .job_registry import registry
from .job_setter import AsyncJobSetter, Call, JobSetter
from .middleware import Chain, ClientMiddleware, ServerMiddleware, Wrapper
from .signature import Signature
from .version import __version__

if _typing.TYPE_CHECKING:
    from .api.queue import Queue  # Sidekiq::Queue's place: kiq.Queue(name).pause()
    from .iteration import IterableJob, IterationState, cancel

# Loaded on first use (PEP 562), so that a process that only pushes jobs loads neither the API, whose queues and
# sets reach into the server package, nor the iteration package (a worker's modules import both).
_LAZY = {
    "Queue": "kiq.api.queue",
    "IterableJob": "kiq.iteration",
    "IterationState": "kiq.iteration",
    "cancel": "kiq.iteration",
}

if not _typing.TYPE_CHECKING:  # mypy reads the imports above; a __getattr__ it saw would accept any name

    def __getattr__(name: str) -> object:
        if name not in _LAZY:
            raise AttributeError(f"module 'kiq' has no attribute {name!r}")
        value = getattr(_importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # the next look-up finds it without this function
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "ArgumentError",
    "AsyncClient",
    "AsyncJobSetter",
    "Call",
    "Chain",
    "Client",
    "ClientMiddleware",
    "Config",
    "ConfigError",
    "Interrupted",
    "InvalidJobError",
    "InvalidPayload",
    "IterableJob",
    "IterationState",
    "Job",
    "JobArgumentError",
    "JobFunction",
    "JobSetter",
    "JobTimeout",
    "KiqError",
    "NotReplicated",
    "PayloadTooLarge",
    "PushBufferFull",
    "Queue",
    "RegistryError",
    "ServerMiddleware",
    "Shutdown",
    "Signature",
    "UnknownJobError",
    "Wrapper",
    "__version__",
    "cancel",
    "configure_client",
    "configure_server",
    "default_config",
    "hookimpl",
    "job",
    "registry",
]
