"""kiq.ext: what a plugin, a fetcher or a tool built on kiq's Redis data uses, apart from the application API.

``kiq`` (``kiq.__all__``) is what an application needs to define, push and run jobs. This module is the surface of
code that extends kiq or reads and writes its Redis data directly, as pluggy's and Sphinx's extension APIs stand
apart from what their users call. Both lists are pinned by tests/test_public_api.py. The shipped plugins and
``kiq.contrib`` use these, ``kiq`` and the public modules (``kiq.api``, ``kiq.hookspecs``, ``kiq.tabs``,
``kiq.cli.output``, ``kiq.testing``) and nothing else of kiq (an import-linter contract).

- hooks: ``hookimpl`` (also ``kiq.hookimpl``), ``hookspec``, the types of the hooks' arguments and answers
  (``Setting`` for ``kiq_settings``, ``Reading`` for ``kiq_metrics``, ``JobObserver`` and its ``AttemptOutcome``,
  ``JobWriter`` for ``kiq_job_writer``, ``JobSource`` for ``kiq_job_source``);
- fetchers (the ``kiq_fetcher`` hook): ``Fetcher``, ``UnitOfWork``, ``Capsule``, ``QueueOrder``, the batching
  hand-off ``BatchFetch`` with its ``Fetched`` jobs, the pop script ``pop_script`` and its reader ``popped_jobs``;
- Redis keys and scripts: ``keyspace``/``Keyspace`` (every key's name in the ``slots`` layout), ``lua_script``/
  ``LuaScript`` (a declared script), ``ENQUEUE_LUA``/``enqueue_keys`` (push a job from a script),
  ``run_pipeline``, ``master_generation`` (when to drop a connection a plugin keeps: the worker moved to a new
  master);
- Redis failures: ``TRANSIENT`` (the errors of a Redis that will take the write later) and its categories
  ``UNREACHABLE``, ``REFUSED``, ``MOVED`` (kiq.failures); ``hold_write`` (hold a plugin's write for a job until
  Redis takes it); ``Backoff`` (the pauses of a retry loop);
- payloads: ``dumps``/``loads`` (Sidekiq's JSON), ``parse_payload``, ``check_job`` (the push's check that every value
  is native JSON, for a client middleware that hides values from the check after it: encryption), ``new_jid``,
  ``new_public_id``, ``wire_time``/``epoch_seconds`` (times in the ``sidekiq_wire`` form and back), ``error_class``
  (an error's Sidekiq name), ``error_message``/``describe`` (an error's message and a value's repr, bounded,
  never raising);
- results: ``result_form``/``result_value`` (a job's return value to its JSON form by its return annotation, and
  back), ``ResultTypeError``;
- the job running in this thread: ``hold_acknowledgement``, ``report_failure``.
"""

from .backoff import Backoff
from .errors import describe, error_class, error_message
from .failures import MOVED, REFUSED, TRANSIENT, UNREACHABLE
from .fetcher import Capsule, Fetcher, QueueOrder, UnitOfWork, pop_script, popped_jobs
from .handoff import BatchFetch, Fetched
from .held_writes import hold_write
from .hookspecs import AttemptOutcome, JobObserver, JobSource, JobWriter, hookimpl, hookspec
from .keys import Keyspace, keyspace
from .payload import check_job, dumps, epoch_seconds, loads, new_jid, new_public_id, parse_payload, wire_time
from .pipeline import master_generation, run_pipeline
from .readings import Reading
from .returns import ResultTypeError, result_form, result_value
from .scripts import ENQUEUE_LUA, LuaScript, enqueue_keys, lua_script
from .server.acknowledgement import hold_acknowledgement, report_failure
from .settings import Setting

__all__ = [
    "ENQUEUE_LUA",
    "MOVED",
    "REFUSED",
    "TRANSIENT",
    "UNREACHABLE",
    "AttemptOutcome",
    "Backoff",
    "BatchFetch",
    "Capsule",
    "Fetched",
    "Fetcher",
    "JobObserver",
    "JobSource",
    "JobWriter",
    "Keyspace",
    "LuaScript",
    "QueueOrder",
    "Reading",
    "ResultTypeError",
    "Setting",
    "UnitOfWork",
    "check_job",
    "describe",
    "dumps",
    "enqueue_keys",
    "epoch_seconds",
    "error_class",
    "error_message",
    "hold_acknowledgement",
    "hold_write",
    "hookimpl",
    "hookspec",
    "keyspace",
    "loads",
    "lua_script",
    "master_generation",
    "new_jid",
    "new_public_id",
    "parse_payload",
    "pop_script",
    "popped_jobs",
    "report_failure",
    "result_form",
    "result_value",
    "run_pipeline",
    "wire_time",
]
