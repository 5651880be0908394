"""The Config: a process's settings (see kiq.settings), its middleware chains, plugins, capsules and Redis.

Plugins come in by one route, ``config.add_plugin(plugin or name)``: the ``plugins`` setting, a ``fetch`` setting
that names a plugin's fetcher (found through the ``kiq.fetchers`` entry points), a setting that an installed plugin
declares (found through the ``kiq.settings`` entry points: giving a feature's one setting, e.g. its port, enables
the plugin that serves it), and helpers such as ``tracker_for`` all go through it, and it
registers each plugin once per config.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .errors import ConfigError
from .logging import log_job_failure
from .middleware import Chain, ClientMiddleware, ServerMiddleware
from .plugin_manager import PluginManager
from .settings import (
    CORE_SETTINGS,
    ENV_PREFIX,
    Queues,
    Setting,
    Source,
    as_int,
    as_queues,
    did_you_mean,
    plugin_sources,
    read_environment,
    read_file,
)

if TYPE_CHECKING:
    import redis

    from .hookspecs import JobWriter

log = logging.getLogger("kiq")
_CONNECTING = threading.Lock()  # making a config's Redis client (Config.redis)

P = TypeVar("P")
FETCHERS_GROUP = "kiq.fetchers"  # entry points: fetcher name -> the plugin that provides it
SETTINGS_GROUP = "kiq.settings"  # entry points: setting name -> the plugin that declares it
DEFAULT_CAPSULE = "default"
JOB_FAILED = "Job raised exception"  # Sidekiq's error-handler context for a job's failure (kiq_error hooks see it)


class Config:
    """All settings of a kiq client or worker, its middleware chains, plugins and Redis connection."""

    redis_url: str | None
    embedded_dir: str
    embedded: bool
    shards: dict[str, str]
    push_replicas: int
    push_replicas_timeout: float
    concurrency: int
    async_concurrency: int
    async_block_warning: float
    processes: int
    max_memory_mb: int
    queues: Queues
    timeout: float
    job_timeout: float
    iteration_flush_interval: float
    max_iteration_runtime: float
    fetch: str
    require: list[str]
    max_retries: int
    default_job_options: dict[str, Any]
    dead_max_jobs: int
    dead_timeout: float
    poll_interval: float
    heartbeat_interval: float
    tag: str | None
    log_level: str
    log_format: str

    def __init__(self, _sources: Iterable[Source] = (), **settings: Any) -> None:
        """Build a config from defaults and ``settings``; ``Config.load`` adds the file and environment."""
        object.__setattr__(self, "_settings", {s.name: s for s in CORE_SETTINGS})
        object.__setattr__(self, "_values", {s.name: s.default for s in CORE_SETTINGS})
        self.client_middleware: Chain[ClientMiddleware] = Chain(self)
        self.server_middleware: Chain[ServerMiddleware] = Chain(self)
        # the job options this config's plugins read (``kiq_job_options``): a push refuses a near miss of one
        self.job_options: frozenset[str] = frozenset()
        # ``config.plugins`` is the manager; the ``plugins`` setting (names) is ``config.get("plugins")``
        self.plugins: PluginManager
        object.__setattr__(self, "plugins", PluginManager(self))
        # historic, like kiq_settings: every plugin, registered now or later, is asked once
        self.plugins.hook.kiq_job_options.call_historic(result_callback=self.declare_job_options, kwargs={})
        # the plugins that write some pushed jobs themselves (``kiq_job_writer``), asked of every push to a queue
        self.job_writers: tuple[JobWriter, ...] = ()
        self.plugins.hook.kiq_job_writer.call_historic(result_callback=self._add_job_writer, kwargs={"config": self})
        self.server = False  # a worker's config (configure_server callbacks ran on it)
        self.identity: str | None = None  # the worker process's identity, once it runs (host:pid:hex)
        # named capsules besides the default one: name -> (queues, concurrency); see add_capsule
        self.capsules: dict[str, tuple[Queues, int]] = {}
        self._redis: redis.Redis | None = None
        self._shard_configs: dict[str, Config] = {}
        sources = [*_sources, Source("arguments", settings)]
        # plugins first: they may declare settings that the other sources use
        for source in sources:
            if "plugins" in source.values:
                self._values["plugins"] = self._parse("plugins", source.values["plugins"], source.origin)
        for name in self._values["plugins"]:
            self.add_plugin(name)
        for source in sources:  # the fetcher's plugin too: its settings may be among the values
            if isinstance(source.values.get("fetch"), str):
                self._load_fetcher_plugin(source.values["fetch"])
        for source in sources:  # a setting no loaded plugin declares: the installed plugin that does, if any
            for key in source.values:
                if key not in self._settings:
                    self._load_setting_plugin(key)
        for source in sources:
            for key, raw in source.values.items():
                if key == "plugins":
                    continue
                if source.lenient and key not in self._settings:
                    hint = did_you_mean(key, self._settings)
                    if hint:  # KIQ_CONCURENCY: not ours to refuse, but most likely a typo of ours
                        log.warning("ignoring %s%s: not a kiq setting%s", ENV_PREFIX, key.upper(), hint)
                    continue
                self._values[key] = self._parse(key, raw, source.origin)

    @classmethod
    def load(
        cls, config_file: str | Path | None = None, env: Mapping[str, str] | None = None, **settings: Any
    ) -> Config:
        """defaults < config file (``config_file``, kiq.toml or [tool.kiq]) < the plugins' settings sources (see
        ``plugin_settings``) < ``KIQ_*`` env < ``settings``."""
        file, environment = read_file(config_file), read_environment(os.environ if env is None else env)
        return cls([file, *plugin_sources(), environment], **settings)

    # -- settings access ----------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("_values")
        if values is not None and name in values:
            return values[name]
        hint = did_you_mean(name, values or ())
        raise AttributeError(f"{type(self).__name__} has no setting or attribute {name!r}{hint}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._settings:
            if name == "fetch" and isinstance(value, str):
                self._load_fetcher_plugin(value)
            self._values[name] = self._parse(name, value, "assignment")
            if name in ("redis_url", "slots"):
                self._redis = None
        elif name in _ATTRIBUTES:
            object.__setattr__(self, name, value)
        elif self._load_setting_plugin(name):
            self._values[name] = self._parse(name, value, "assignment")
        else:  # config.concurency = 5 must not pass silently
            self._parse(name, value, "assignment")

    def get(self, name: str) -> Any:
        """The value of a setting (core or declared by a plugin)."""
        if name not in self._settings:
            raise ConfigError(f"unknown setting {name!r}{did_you_mean(name, self._settings)}")
        return self._values[name]

    @property
    def settings(self) -> dict[str, Any]:
        """A copy of every setting's current value."""
        return dict(self._values)

    def _parse(self, name: str, raw: Any, origin: str) -> Any:
        setting = self._settings.get(name)
        if setting is None:  # a near miss of a setting an installed plugin declares is a typo too
            hint = did_you_mean(name, [*self._settings, *_setting_plugins()])
            raise ConfigError(f"unknown setting {name!r} (from {origin}){hint}; see `kiq settings` for the list")
        try:
            return setting.parse(raw)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"bad value for setting {name!r} (from {origin}): {exc}") from exc

    def declare_settings(self, settings: Iterable[Setting] | None) -> None:
        """Make a plugin's settings known, with their defaults (the ``kiq_settings`` hook's answers)."""
        for setting in settings or ():
            known = self._settings.get(setting.name)
            if known is not None and known != setting:
                raise ConfigError(f"two definitions of the setting {setting.name!r} (a plugin redefines it)")
            self._settings[setting.name] = setting
            self._values.setdefault(setting.name, setting.default)

    def declare_job_options(self, names: Iterable[str] | None) -> None:
        """Make a plugin's job options known (the ``kiq_job_options`` hook's answers)."""
        declared = list(names or ())
        # a bare "track" would declare t, r, a, c and k
        if isinstance(names, str) or not all(isinstance(name, str) and name for name in declared):
            raise ConfigError(f"kiq_job_options must return a list of option names, got {names!r:.80}")
        self.job_options = self.job_options.union(declared)

    def _add_job_writer(self, writer: JobWriter | None) -> None:
        if writer is not None:
            self.job_writers = (*self.job_writers, writer)

    def describe_settings(self) -> list[Setting]:
        """Every setting this config knows (core and its plugins'), by name."""
        return sorted(self._settings.values(), key=lambda setting: setting.name)

    # -- plugins --------------------------------------------------------------------------------------
    @overload
    def add_plugin(self, plugin: type[P], name: str | None = None) -> P: ...

    @overload
    def add_plugin(self, plugin: object, name: str | None = None) -> object: ...

    def add_plugin(self, plugin: object, name: str | None = None) -> object:
        """Register a plugin once: an object, a class (made with no arguments), or a name (an entry point of
        the ``kiq.plugins`` group, or ``module[:attr]``). Returns the registered object."""
        return self.plugins.add(plugin, name)

    def _load_fetcher_plugin(self, fetch: str) -> None:
        """A ``fetch`` value that names a plugin's fetcher brings the plugin along (its settings become known),
        whether the setting is read or assigned."""
        if fetch == "basic" or ":" in fetch:
            return
        for entry_point in importlib.metadata.entry_points(group=FETCHERS_GROUP, name=fetch):
            self.add_plugin(entry_point.load(), entry_point.name)

    def _load_setting_plugin(self, name: str) -> bool:
        """Load the installed plugin that declares the setting ``name`` (the ``kiq.settings`` entry points), if
        there is one; whether the setting is known now."""
        entry_point = _setting_plugins().get(name)
        if entry_point is not None:
            self.add_plugin(entry_point.load())
        return name in self._settings

    # -- capsules ---------------------------------------------------------------------------------------
    def add_capsule(self, name: str, queues: Any, concurrency: int = 1) -> None:
        """Declare a capsule: threads of their own for some queues, e.g. one thread for a queue whose jobs must
        not run in parallel: ``config.add_capsule("serial", queues=["imports"], concurrency=1)``."""
        if name == DEFAULT_CAPSULE:
            raise ConfigError("the default capsule is configured by the queues and concurrency settings")
        try:
            self.capsules[name] = (as_queues(queues), as_int(1)(concurrency))
        except ValueError as exc:
            raise ConfigError(f"capsule {name!r}: {exc}") from exc

    # -- shards -------------------------------------------------------------------------------------------
    def shard_url(self, name: str) -> str:
        """The Redis URL of the shard ``name`` (the ``shards`` setting)."""
        try:
            return self.shards[name]
        except KeyError:
            known = ", ".join(sorted(self.shards)) or "none"
            raise ConfigError(f"no shard {name!r}{did_you_mean(name, self.shards)}; the shards are: {known}") from None

    def for_shard(self, name: str) -> Config:
        """A config like this one (its settings, its plugins by name), on the shard ``name``'s Redis: for the API
        and the CLI to look at that shard, or a client to push there (``Job.set(shard=...)`` uses it)."""
        shard = self._shard_configs.get(name)
        if shard is None:
            shard = self._shard_configs[name] = Config(**{**self.settings, "redis_url": self.shard_url(name)})
        return shard

    # -- errors -------------------------------------------------------------------------------------------
    def handle_exception(self, exc: BaseException, context: dict[str, Any], traceback: bool = True) -> None:
        """Log an error with its context and pass it to every ``kiq_error`` hook (each one's failure is only
        logged). ``traceback=False`` for errors whose message says it all (an unreachable Redis). A job's failure
        (Sidekiq's context ``"Job raised exception"``) is one line with its outcome and the job's own frames."""
        job = context.get("job")
        if context.get("context") == JOB_FAILED and isinstance(job, dict):
            log_job_failure(exc, job, traceback=traceback)
        else:
            log.warning("%s: %s", context.get("context", "error"), exc, exc_info=exc if traceback else None)
        self.plugins.notify("kiq_error", exc=exc, context=context, config=self)

    # -- shared resources ---------------------------------------------------------------------------
    def _connect(self) -> redis.Redis:
        """A new client for this config's Redis (``redis`` makes it once)."""
        from .redis import connect, is_cluster

        threads = self.concurrency + sum(concurrency for _, concurrency in self.capsules.values())
        # every processor may hold a connection (a job's own command); plus each capsule's fetch (two connections
        # when two of its threads fetch at once: BatchFetch.leaders), heartbeat, poller, the poller's wake-up
        # subscription (held for good) and pushes from jobs
        client = connect(
            self.redis_url,
            self.embedded_dir,
            pool_size=threads + 2 * (1 + len(self.capsules)) + 5,
            embedded=self.embedded,
            slots=self.slots,
            timeout=self.redis_timeout,
        )
        if self.push_replicas and is_cluster(client):
            raise ConfigError(
                f"push_replicas = {self.push_replicas} is not supported on a Redis Cluster (a WAIT would not reach "
                "the node that took the push): set push_replicas = 0 (KIQ_PUSH_REPLICAS)"
            )
        return client

    @property
    def redis(self) -> redis.Redis:
        """The pooled Redis client for this config (the embedded server when ``redis_url`` is unset). Made once,
        under a lock: threads asking for it at once (pushers starting together) must share one client, as its pool
        keys what kiq keeps per Redis (reliable push's held jobs: two pools held one thread's jobs in two buffers,
        sent in either order)."""
        if self._redis is None:
            with _CONNECTING:
                if self._redis is None:
                    self._redis = self._connect()
        return self._redis


# what a Config holds besides settings (any other name assigned to it must be a setting)
_ATTRIBUTES = frozenset(
    {
        "client_middleware",
        "server_middleware",
        "job_options",
        "job_writers",
        "plugins",
        "server",
        "identity",
        "capsules",
        "_redis",
        "_shard_configs",
    }
)


@functools.cache
def _setting_plugins() -> dict[str, importlib.metadata.EntryPoint]:
    """The ``kiq.settings`` entry points by setting name (read once: a Config is made often, entry points are
    fixed while a process runs)."""
    return {entry_point.name: entry_point for entry_point in importlib.metadata.entry_points(group=SETTINGS_GROUP)}


# -- the process-wide default config and Sidekiq's configure_server / configure_client -----------------
_default: Config | None = None
_server_callbacks: list[Callable[[Config], Any]] = []
# the in-process worker's (kiq.testing.Worker) config, in its threads: there ``config=None`` means it, as a worker
# process's own config is its default (its jobs' settings, its Redis for their pushes). None elsewhere.
worker_config: ContextVar[Config | None] = ContextVar("kiq_worker_config", default=None)


def default_config() -> Config:
    """The Config ``config=None`` means: in an in-process worker's threads, that worker's (``worker_config``); else
    the process-wide one, loaded from the config file and environment on first use."""
    running = worker_config.get()
    if running is not None:
        return running
    global _default
    if _default is None:
        _default = Config.load()
    return _default


def config_or_default(config: Config | None) -> Config:
    """``config``, or the process-wide default when None (what every ``config=None`` parameter means)."""
    return default_config() if config is None else config


def set_default_config(config: Config) -> Config:
    """Make ``config`` the process-wide default (the worker does this with its CLI settings)."""
    global _default
    _default = config
    return config


def enter_server_mode(config: Config) -> None:
    """Mark ``config`` as a worker's and run every ``configure_server`` callback on it."""
    config.server = True
    set_default_config(config)
    for callback in _server_callbacks:
        callback(config)


def configure_server(callback: Callable[[Config], Any]) -> Callable[[Config], Any]:
    """Decorator: run ``callback(config)`` in worker processes only (now, or when the worker starts)."""
    _server_callbacks.append(callback)
    if _default is not None and _default.server:
        callback(_default)
    return callback


def configure_client(callback: Callable[[Config], Any]) -> Callable[[Config], Any]:
    """Decorator: run ``callback(config)`` now, unless this process is a worker."""
    config = default_config()
    if not config.server:
        callback(config)
    return callback
