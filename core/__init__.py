"""kiq: Redis-backed background jobs for Python, wire-compatible with Sidekiq 7.

Everything an application or a plugin uses is here; the modules below are organised in layers (see the README's
"Architecture"): the base, the extension surface, the client and the server, then the API (``kiq.api``) and CLI.
"""

from __future__ import annotations

from .api.queue import Queue  # Sidekiq::Queue's place: kiq.Queue(name).pause()
from .async_client import AsyncClient
from .backoff import Backoff
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
    error_class,
)
from .failures import TRANSIENT as REDIS_REFUSALS
from .fetcher import Capsule, Fetcher, QueueOrder, UnitOfWork, pop_script, popped_jobs
from .handoff import BatchFetch, Fetched
from .held_writes import hold_write
from .hookspecs import hookimpl, hookspec
from .iteration import IterableJob, IterationState, cancel
from .job import AsyncJobSetter, Call, Job, JobFunction, JobSetter, job
from .job_registry import registry
from .keys import Keyspace, keyspace
from .middleware import Chain, ClientMiddleware, ServerMiddleware, Wrapper
from .payload import dumps, epoch_seconds, loads, new_jid, new_public_id, parse_payload, wire_time
from .pipeline import run_pipeline
from .readings import Reading
from .scripts import ENQUEUE_LUA, LuaScript, enqueue_keys, lua_script
from .server.acknowledgement import hold_acknowledgement, report_failure
from .settings import Setting
from .signature import Signature
from .version import __version__

__all__ = [
    "ENQUEUE_LUA",
    "REDIS_REFUSALS",
    "ArgumentError",
    "AsyncClient",
    "AsyncJobSetter",
    "Backoff",
    "BatchFetch",
    "Call",
    "Capsule",
    "Chain",
    "Client",
    "ClientMiddleware",
    "Config",
    "ConfigError",
    "Fetched",
    "Fetcher",
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
    "Keyspace",
    "KiqError",
    "LuaScript",
    "NotReplicated",
    "PayloadTooLarge",
    "PushBufferFull",
    "Queue",
    "QueueOrder",
    "Reading",
    "RegistryError",
    "ServerMiddleware",
    "Setting",
    "Shutdown",
    "Signature",
    "UnitOfWork",
    "UnknownJobError",
    "Wrapper",
    "__version__",
    "cancel",
    "configure_client",
    "configure_server",
    "default_config",
    "dumps",
    "enqueue_keys",
    "epoch_seconds",
    "error_class",
    "hold_acknowledgement",
    "hold_write",
    "hookimpl",
    "hookspec",
    "job",
    "keyspace",
    "loads",
    "lua_script",
    "new_jid",
    "new_public_id",
    "parse_payload",
    "pop_script",
    "popped_jobs",
    "registry",
    "report_failure",
    "run_pipeline",
    "wire_time",
]
