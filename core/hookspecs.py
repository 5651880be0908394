"""Every extension point of kiq, as pluggy hook specifications.

A plugin is an object (an instance of a class, or a module) with methods marked ``@kiq.hookimpl`` and named like
these; implement only the hooks you need, with only the arguments you need. Plugins come in through
``config.add_plugin(...)`` (or the ``plugins`` setting, which calls it); a class is made once per config, so a
plugin keeps its state on ``self``.

Two kinds of hooks, two failure rules:

- **Contributions** (``kiq_settings``, ``kiq_job_options``, ``kiq_client_middleware``, ``kiq_server_middleware``,
  ``kiq_job_writer``, ``kiq_fetcher``, ``kiq_job_source``, ``kiq_cli``, ``kiq_worker_options``,
  ``kiq_settings_source``, ``kiq_check``, ``kiq_swarm_startup``) shape the process when a plugin is registered or
  the worker starts; a failure stops the start with an error naming the plugin. The first five are
  pluggy *historic* hooks: a plugin registered at any time gets them called once. ``kiq_web_tabs`` (tabs for the
  dashboard) and ``kiq_metrics`` (readings for the metrics exporters) are isolated instead, like notifications:
  a dashboard or a ``/metrics`` scrape must not fail because one plugin's part could not be made.
  ``kiq_unwrap_job`` (the job a wrapper payload stands for) is asked per job: its failure is that job's failure;
  so are a ``JobWriter``'s (that push's failure: nothing of it is written) and a ``JobSource``'s (that fetch's
  failure, an outage for the worker when Redis is the cause), and ``kiq_queue_group``'s (the caller's).
  ``kiq_job_observer`` is isolated too (a plugin whose observer cannot be made counts nothing; the jobs run), and
  so is each call of an observer it returns (``JobObserver``).
- **Notifications** (everything else) report what happens while kiq runs. kiq calls them through
  ``config.plugins.notify(name, **kwargs)`` (as must a plugin that calls one, e.g. ``kiq_job_dropped``), which runs
  each implementation on its own: one that raises is logged and reported to the ``kiq_error`` hooks, and the others
  still run (a raising ``kiq_error`` implementation is only logged; a ``kiq_death`` or ``kiq_job_dropped`` one
  whose own Redis write was refused is held, ``kiq.ext.hold_write``: a dropped workflow step fails its workflow once
  Redis takes the write, not never). A context manager it returns is entered the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

import pluggy

if TYPE_CHECKING:
    import argparse
    from contextlib import AbstractContextManager

    from .config import Config
    from .connection import DedicatedConnection
    from .fetcher import Capsule, Fetcher
    from .keys import Keyspace
    from .middleware import Chain, ClientMiddleware, ServerMiddleware
    from .readings import Reading
    from .settings import Setting
    from .signature import Signature
    from .tabs import Tab

hookspec = pluggy.HookspecMarker("kiq")
hookimpl = pluggy.HookimplMarker("kiq")

# what an isolated implementation that raises costs: "report": logged and told to the kiq_error hooks; "log": only
# logged (kiq_error's own: telling them would loop); "hold": a write Redis refused for now (kiq.failures.TRANSIENT)
# is held by the worker and the call made again, alone (kiq.ext.hold_write), anything else reported
FailureRule = Literal["report", "log", "hold"]

# the hooks whose implementations are isolated from each other (see the module's doc), each with its failure rule;
# kiq calls them through ``config.plugins.notify(name, **kwargs)``, one implementation at a time
NOTIFICATIONS: Mapping[str, FailureRule] = {
    "kiq_error": "log", "kiq_death": "hold", "kiq_startup": "report", "kiq_quiet": "report",
    "kiq_shutdown": "report", "kiq_heartbeat": "report", "kiq_operation": "report", "kiq_push_bulk": "report",
    "kiq_job_dropped": "hold", "kiq_web_tabs": "report", "kiq_job_progress": "report", "kiq_metrics": "report",
    "kiq_job_observer": "report", "kiq_loop_tick": "report", "kiq_swarm_stopping": "report",
    "kiq_swarm_child_exited": "report", "kiq_swarm_shutdown": "report", "kiq_redact_job": "report",
}  # fmt: skip

# how a job attempt ended, for a JobObserver: it returned, it raised (or a plugin reported its failure with
# kiq.ext.report_failure), a hard shutdown requeued it (no attempt: neither processed nor failed), or an iterable job
# stopped between two items, saved its cursor and was pushed again (kiq.Interrupted: no retry, not processed)
AttemptOutcome = Literal["done", "failed", "requeued", "interrupted"]


class JobObserver(Protocol):
    """What ``kiq_job_observer`` returns: told of every job attempt of one job runner (a processor thread, or a
    capsule's event loop), from that runner's thread only, so it may count without a lock. It sees every attempt,
    also those that fail before the server middleware runs (a class no worker registered). It is on the hot path:
    keep each call to a few additions. A call that raises is reported (``kiq_error``) and the job goes on."""

    def started(self, queue: str, job: dict[str, Any]) -> None:
        """An attempt of ``job`` (the parsed payload) from ``queue`` begins."""

    def finished(self, queue: str, job: dict[str, Any], seconds: float, outcome: AttemptOutcome) -> None:
        """The attempt ended after ``seconds`` (wall clock, ``time.perf_counter``), with ``outcome``."""


class JobWriter(Protocol):
    """What ``kiq_job_writer`` returns: asked, for every job a client pushes to a queue (not a scheduled one), whether
    it writes that job itself. On the path of every push: answer None at once for a job that is not yours."""

    def commands(self, queue: str, jid: str, job: str, keys: Keyspace) -> list[tuple[Any, ...]] | None:
        """The Redis commands that write ``job`` (its JSON; ``jid`` its id) for ``queue`` instead of ``LPUSH
        queue:<queue>``, sent in the push's pipelined round trip (keys of ``keys``, the Redis written to: a script
        runs as ``EVAL``, a pipeline cannot load one), or None to leave the job to kiq. ``SADD queues`` is kiq's."""


class JobSource(Protocol):
    """What ``kiq_job_source`` returns: where the fetchers of one capsule take jobs from, instead of popping the
    queues' lists (e.g. round-robin over job groups). ``queues`` are names (no ``queue:``) of one hash slot, in the
    fetch order; ``connection`` is the fetcher's own (``kiq.ext.BatchFetch.connection``: ``command``, ``script``)."""

    def pop(
        self, connection: DedicatedConnection, queues: list[str], wanted: int, into: list[str] | None = None
    ) -> list[tuple[str, str]]:
        """At most ``wanted`` jobs as (queue name, raw job) pairs, in one round trip. With ``into`` (a list key per
        queue, in its slot: a reliable fetcher's working lists), each job is also pushed (``LPUSH``) into its
        queue's list by the same script, in the order returned, so none is ever only in the process's memory."""
        ...

    def block(
        self, connection: DedicatedConnection, queues: list[str], timeout: float, into: list[str] | None = None
    ) -> list[tuple[str, str]]:
        """Wait at most ``timeout`` s for work after a ``pop`` found none; return jobs taken meanwhile (``into`` as
        for ``pop``) or [] (the fetcher pops again)."""
        ...


# -- contributions ---------------------------------------------------------------------------------------------
@hookspec(historic=True)
def kiq_settings() -> list[Setting]:
    """Declare extra settings this plugin reads (so they are accepted, parsed and validated like core ones)."""
    raise NotImplementedError


@hookspec(historic=True)
def kiq_job_options() -> list[str]:
    """Declare the job options this plugin reads from payloads (``kiq_options``, ``.set()``), e.g. ``["track"]``.
    Other unknown options travel too (Sidekiq's rule), but a push through a config with this plugin refuses a near
    miss of a declared one (``trak``) with a did-you-mean error instead of ignoring it."""
    raise NotImplementedError


@hookspec(historic=True)
def kiq_client_middleware(chain: Chain[ClientMiddleware], config: Config) -> None:
    """Add entries to the client chain (``chain.add(MyMiddleware)``); called once, when the plugin is registered."""


@hookspec(historic=True)
def kiq_server_middleware(chain: Chain[ServerMiddleware], config: Config) -> None:
    """Add entries to the server chain; called once, when the plugin is registered."""


@hookspec(historic=True)
def kiq_job_writer(config: Config) -> JobWriter | None:
    """Return a ``JobWriter`` that writes some pushed jobs itself (e.g. the groups plugin: into its group's list), or
    None; asked once per config, when the plugin is registered (so a pushing process enables the plugin too)."""


@hookspec(firstresult=True)
def kiq_job_source(capsule: Capsule) -> JobSource | None:
    """Return the ``JobSource`` the fetchers of ``capsule`` take jobs from, or None for the queues' lists; asked
    once per fetcher, when a worker makes it. The shipped fetchers (basic, reliable) use it."""


@hookspec(firstresult=True)
def kiq_queue_group(queue: str, name: str, config: Config) -> Any:
    """``kiq.Queue(queue).group(name)``: return this plugin's handle on the job group ``name`` of the queue (e.g.
    its concurrency and pause), or None if this plugin has no job groups. Asked of the queue's config's plugins."""


@hookspec(firstresult=True)
def kiq_fetcher(name: str, config: Config, capsule: Capsule) -> Fetcher | None:
    """Return a fetcher for the ``fetch`` setting ``name`` if this plugin provides it, else None. Name the plugin
    in the ``kiq.fetchers`` entry point group too, so that ``fetch = "<name>"`` loads it."""
    raise NotImplementedError


@hookspec
def kiq_check(config: Config) -> None:
    """Check, in a worker whose job modules are imported, that this plugin can run as configured (e.g. that the
    jobs its settings name are registered); raise ``kiq.ConfigError`` saying what is wrong to stop the worker
    before it fetches anything (``kiq worker`` prints it in one line and exits with status 2)."""


@hookspec
def kiq_cli(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add subcommands to the ``kiq`` command line (``commands.add_parser(...)``, with ``set_defaults(run=f)``
    where ``f(args) -> int``). Asked of every installed plugin (the ``kiq.plugins`` entry points)."""


@hookspec
def kiq_worker_options(options: argparse._ArgumentGroup) -> None:
    """Add options to ``kiq worker`` (``options.add_argument("--audit-level", dest="audit_level")``).
    An option whose ``dest`` names a setting overrides it when given (flag > ``KIQ_*`` env > file), like the
    core flags; give no default (None: not given). Asked of every installed plugin (the ``kiq.plugins`` entry
    points) when the command line is built, whether or not the plugin is enabled: name the setting in the
    ``kiq.settings`` entry point group too, so that giving it loads the plugin (``Config``)."""


@hookspec
def kiq_swarm_startup(config: Config) -> None:
    """A swarm's parent (``kiq worker -p N``, shards, ``max_memory_mb``) is about to fork its first worker; runs in
    the parent only, which runs no jobs (its children are workers and get ``kiq_startup``). What a plugin sets up
    here, the children inherit (e.g. a directory they report to; one port the parent serves for all). Raise
    ``kiq.ConfigError`` to stop the swarm before any child starts (``kiq worker`` exits with status 2)."""


@hookspec
def kiq_settings_source() -> tuple[str, Mapping[str, Any]] | None:
    """Settings from a place this plugin knows, as ``(origin, values)`` (``origin`` names the place in error
    messages), or None where the place does not apply. Asked of every installed plugin (the ``kiq.plugins`` entry
    points) before a ``kiq`` command runs; the values sit between the config file and the ``KIQ_*`` environment
    in every config the command loads. E.g. ``kiq.contrib.django`` gives ``settings.KIQ`` when
    ``DJANGO_SETTINGS_MODULE`` is set. A failure stops the command with an error naming the plugin."""


@hookspec
def kiq_web_tabs(config: Config) -> list[Tab] | None:
    """Return the tabs this plugin adds to the web dashboard (``kiq.tabs``), or None; asked once when a dashboard
    is made for ``config``. Isolated like a notification: an implementation that raises is logged and its tabs are
    left out, the dashboard still serves the others."""


@hookspec
def kiq_metrics(config: Config, scope: str) -> list[Reading] | None:
    """Return this plugin's metric readings (``kiq.ext.Reading``) for ``scope``, or None: ``"process"`` for what this
    worker process counted or holds (asked in each worker at every scrape of its metrics port; summed over a
    swarm's children), ``"fleet"`` for what Redis holds for all (asked once per scrape of any port, ``kiq web``'s
    included, and cached for about a second). Keep it cheap: a fleet reading is at most one pipelined round trip.
    Isolated like a notification: an implementation that raises (or returns something else than a list of
    readings) is logged and its readings are left out of that scrape; the others are served (kiq.readings)."""


@hookspec(firstresult=True)
def kiq_unwrap_job(job: dict[str, Any], config: Config) -> str | None:
    """A payload whose ``class`` no job is registered under may be a *wrapper* of one (e.g. Rails ActiveJob's
    ``JobWrapper``): if this plugin knows the wrapper, rewrite ``job`` in memory into the wrapped job's form and
    return the wire name of the registered job to run; else return None.

    The rewrite replaces values, it never mutates the nested ones: ``args`` (the positional arguments, any Python
    values), ``kwargs`` (keyword arguments, a dict, only when there are some) and in-memory extras the plugin's
    middleware read. ``class`` stays the wrapper's, and the stored payload is untouched: a retry or dead entry
    keeps the wrapper's envelope, so the side that wrote it can still run it. Asked by a worker only for classes it
    does not know (no cost for the others), and by the API on a copy of the payload to show the wrapped job's
    arguments. An implementation that raises fails that job into the retry set with its error, as an unknown
    class does."""
    raise NotImplementedError


@hookspec(firstresult=True)
def kiq_compose(left: Signature, right: Signature) -> Any:
    """``left | right`` of two signatures (``kiq.Signature``, ``MyJob.s()``): return what runs them one after the
    other (e.g. the workflow plugin's chain), or None if this plugin does not compose signatures. Asked of the
    default config's plugins each time ``|`` is used; with none answering, the ``|`` raises a TypeError saying which
    plugin to enable, and a failure is raised to the caller of ``|``."""
    raise NotImplementedError


@hookspec
def kiq_job_observer(config: Config) -> JobObserver | None:
    """Return a ``JobObserver`` to be told of every job attempt of one job runner, or None. Asked once per runner
    when a worker makes its runners (before ``kiq_startup``): an observer of its own per runner (a processor
    thread, a capsule's event loop) can count without locks; sum them when read. E.g. the metrics plugin's
    per-queue-and-class counts and duration histogram. Isolated like a notification."""


# -- notifications ---------------------------------------------------------------------------------------------
@hookspec
def kiq_push_bulk(config: Config, queue: str, count: int) -> AbstractContextManager[None] | None:
    """Return a context manager to run around a whole ``push_bulk`` (every job's client middleware and the
    Redis writes), or None; e.g. one tracing span for the batch."""


@hookspec
def kiq_operation(name: str, config: Config) -> AbstractContextManager[None] | None:
    """Return a context manager to run around one of a worker's internal operations, or None: ``"poll"`` (one
    pass of the scheduled/retry poller) or ``"heartbeat"`` (one heartbeat); e.g. a tracing span."""


@hookspec
def kiq_error(exc: BaseException, context: dict[str, Any], config: Config) -> None:
    """An error happened (a job raised, or an internal component failed); ``context`` says where."""


@hookspec
def kiq_death(job: dict[str, Any], exc: BaseException | None, config: Config) -> None:
    """A job died: its retries were exhausted, it was not retryable, or it was killed. In a worker, an
    implementation whose own Redis write is refused (unreachable, ``OOM``, ``READONLY``, ``LOADING``) is called again
    with the same arguments once Redis takes writes (a held outcome, docs/guide/guarantees.md): keep it idempotent."""


@hookspec
def kiq_startup(config: Config) -> None:
    """The worker process has started and is about to fetch jobs."""


@hookspec
def kiq_quiet(config: Config) -> None:
    """The worker stopped fetching new jobs (TSTP, or the first step of a stop)."""


@hookspec
def kiq_shutdown(config: Config) -> None:
    """The worker's jobs are finished or requeued; its fetchers close after this (a plugin may still release
    acknowledgements it holds, see ``kiq.ext.hold_acknowledgement``)."""


@hookspec
def kiq_heartbeat(config: Config) -> None:
    """Called on every heartbeat (every ``heartbeat_interval`` seconds) from the heartbeat thread."""


@hookspec
def kiq_loop_tick(name: str, due_within: float | None, config: Config) -> None:
    """One of a worker's own loops came round: ``"heartbeat"`` or ``"poller"`` (the scheduled/retry poller). It
    will come round again within ``due_within`` seconds plus the time of its work (``0``: its work begins now;
    the wait after it, which for the poller is random and grows with the number of processes); ``None``: the loop
    ended on purpose (the poller of a quiet worker, every loop of a stopping one). A liveness probe can tell a
    loop stuck in a hung call from one that waits. Called from the loop's own thread: keep it cheap."""


@hookspec
def kiq_swarm_stopping(config: Config) -> None:
    """A swarm's parent passes the first stop signal (TERM, INT) on to its children; in the parent only."""


@hookspec
def kiq_swarm_child_exited(config: Config, index: int, pid: int, code: int) -> None:
    """A swarm's parent reaped its child ``index`` (process ``pid``, exit status ``code``; negative: killed by that
    signal); unless the swarm is stopping, a new child takes the index later. In the parent only."""


@hookspec
def kiq_swarm_shutdown(config: Config) -> None:
    """A swarm's children are all gone and its parent is about to exit; in the parent only."""


@hookspec
def kiq_job_dropped(job: dict[str, Any], reason: str, config: Config) -> None:
    """A worker dropped a job without running it, and it did not die: a plugin's server middleware decided it must
    not run (e.g. the expiry plugin: its deadline passed before it started). Not a failure: no retry, no death hooks,
    and the job is acknowledged. ``reason`` says why, for logs and records (e.g. a tracking status); a plugin may also
    release what the job held (e.g. a unique lock). Called by the plugin that drops the job. An implementation whose
    own Redis write is refused (an outage, maxmemory) is held in a worker and called again, alone, once Redis takes
    writes (as a ``kiq_death`` one is)."""


@hookspec
def kiq_job_progress(job: dict[str, Any], done: float, total: float | None, config: Config) -> None:
    """A running job reported how far it is (``self.progress(done, total)`` in ``perform`` or an iterable job's
    ``each_iteration``): ``done`` units of ``total`` (None: not known), both numbers >= 0 as the job gave them
    (``done`` may pass an estimated ``total``). Called on the job's thread for every report: keep it cheap (e.g.
    keep the latest value and write it in the background, as the tracking plugin does)."""


@hookspec
def kiq_redact_job(job: dict[str, Any], config: Config) -> None:
    """Hide what must not be shown of a payload: ``job`` is a copy made to show a stored payload (the dashboard,
    the CLI, ``kiq.api``'s ``display_args`` and ``as_dict``, a plugin's records such as tracking's params; all ask
    ``kiq.api.shown_job``). Assign new values to its fields (e.g. ``job["args"] = [*job["args"][:-1], "[hidden]"]``),
    never change the nested ones: they are the payload's own. Asked for every payload shown (a listing asks it once
    per row): keep it cheap, and never decrypt or look up anything. Isolated like a notification: one that raises is
    reported and the others still redact."""
