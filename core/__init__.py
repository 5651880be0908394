"""kiq: Redis-backed background jobs for Python, wire-compatible with Sidekiq 7."""

from __future__ import annotations

from .acknowledgement import hold_acknowledgement
from .client import Client
from .config import Config, Setting, configure_client, configure_server, default_config
from .errors import ConfigError, JobArgumentError, KiqError, RegistryError, UnknownJobError
from .hookspecs import hookimpl, hookspec
from .job import Job, JobFunction, JobSetter, job, registry
from .middleware import Chain, ClientMiddleware, ServerMiddleware

__version__ = "0.1.0"

__all__ = [
    "Chain",
    "Client",
    "ClientMiddleware",
    "Config",
    "ConfigError",
    "Job",
    "JobArgumentError",
    "JobFunction",
    "JobSetter",
    "KiqError",
    "RegistryError",
    "ServerMiddleware",
    "Setting",
    "UnknownJobError",
    "__version__",
    "configure_client",
    "configure_server",
    "default_config",
    "hold_acknowledgement",
    "hookimpl",
    "hookspec",
    "job",
    "registry",
]
