"""Settings: one validated place for every knob, read from defaults < kiq.toml / [tool.kiq] < KIQ_* env < code/CLI.

Every value is parsed and checked when the Config is built or a setting is assigned, so a typo or a bad value
stops the process at start-up with a message naming the setting and where it came from.
"""

from __future__ import annotations

import logging
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import ConfigError
from .middleware import Chain
from .plugin_manager import PluginManager, resolve

if TYPE_CHECKING:
    import redis

    from .client import Client

ENV_PREFIX = "KIQ_"


@dataclass(frozen=True)
class Setting:
    """A named setting: its default and the parser that turns a raw value (TOML, env text, Python) into it."""

    name: str
    default: Any
    parse: Callable[[Any], Any]
    help: str = ""


# -- parsers: each takes the raw value and returns the parsed one or raises ValueError ------------------
def as_int(minimum: int | None = None) -> Callable[[Any], int]:
    def parse(raw: Any) -> int:
        if isinstance(raw, bool) or not isinstance(raw, int | str):
            raise ValueError(f"expected an integer, got {raw!r}")
        value = int(raw)
        if minimum is not None and value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def as_float(minimum: float = 0.0) -> Callable[[Any], float]:
    def parse(raw: Any) -> float:
        if isinstance(raw, bool) or not isinstance(raw, int | float | str):
            raise ValueError(f"expected a number, got {raw!r}")
        value = float(raw)
        if not value >= minimum:  # also refuses NaN
            raise ValueError(f"must be a number of at least {minimum}, got {raw!r}")
        return value

    return parse


def as_optional_float(minimum: float = 0.0) -> Callable[[Any], float | None]:
    number = as_float(minimum)
    return lambda raw: None if raw is None or raw == "" else number(raw)


def as_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
        return raw.strip().lower() in {"1", "true", "yes", "on"}
    raise ValueError(f"expected true or false, got {raw!r}")


def as_str(raw: Any) -> str:
    if not isinstance(raw, str) or not raw:
        raise ValueError(f"expected a non-empty string, got {raw!r}")
    return raw


def as_optional_str(raw: Any) -> str | None:
    return None if raw is None or raw == "" else as_str(raw)


def as_choice(*choices: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        if raw not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return str(raw)

    return parse


def as_str_list(raw: Any) -> list[str]:
    """A list of strings; from the environment, a comma- or space-separated string."""
    if isinstance(raw, str):
        raw = raw.replace(",", " ").split()
    if not isinstance(raw, list | tuple) or not all(isinstance(item, str) and item for item in raw):
        raise ValueError(f"expected a list of names, got {raw!r}")
    return list(raw)


def as_queues(raw: Any) -> list[tuple[str, int]]:
    """Queues as Sidekiq takes them: ``"critical,2"``, ``["critical", 2]`` or a list of those.

    From the environment: ``"critical,2 default"`` (space-separated). A queue without a weight has weight 0;
    all zero means strict order, all one means random, anything else weighted (Sidekiq's ``queues=``).
    """
    items = raw.split() if isinstance(raw, str) else raw
    if not isinstance(items, list | tuple) or not items:
        raise ValueError(f"expected a non-empty list of queues, got {raw!r}")
    if len(items) == 2 and isinstance(items[0], str) and isinstance(items[1], int) and "," not in items[0]:
        items = [items]  # one ["name", weight] pair
    queues: list[tuple[str, int]] = []
    for item in items:
        parts = item.split(",") if isinstance(item, str) else item
        if not isinstance(parts, list | tuple) or not 1 <= len(parts) <= 2:
            raise ValueError(f"a queue is 'name' or 'name,weight', got {item!r}")
        name = parts[0].strip() if isinstance(parts[0], str) else ""
        if not name:
            raise ValueError(f"a queue needs a name, got {item!r}")
        weight = as_int(0)(str(parts[1]).strip()) if len(parts) == 2 else 0
        queues.append((name, weight))
    return queues


DAY = 24 * 60 * 60

CORE_SETTINGS = [
    Setting("redis_url", None, as_optional_str, "Redis URL; unset: the embedded server in embedded_dir"),
    Setting("embedded_dir", ".kiq", as_str, "where the embedded Redis keeps its socket and data"),
    Setting("concurrency", 10, as_int(1), "processor threads per worker process"),
    Setting("queues", [("default", 0)], as_queues, "queues to fetch from, 'name' or 'name,weight'"),
    Setting("timeout", 25.0, as_float(0), "seconds a stop waits for running jobs before requeueing them"),
    Setting("fetch", "basic", as_str, "fetch strategy: basic, reliable, or a plugin's name"),
    Setting("plugins", [], as_str_list, "plugins to load: entry point names or module[:attr]"),
    Setting("require", [], as_str_list, "modules the worker imports to register its jobs"),
    Setting("max_retries", 25, as_int(0), "retries for a job with retry: true"),
    Setting("dead_max_jobs", 10_000, as_int(0), "the dead set keeps at most this many jobs"),
    Setting("dead_timeout", 180.0 * DAY, as_float(0), "seconds a job stays in the dead set"),
    Setting("poll_interval", 5.0, as_float(0.1), "average seconds between scheduled/retry polls"),
    Setting("heartbeat_interval", 10.0, as_float(0.1), "seconds between heartbeats"),
    Setting("tag", None, as_optional_str, "a tag shown with this process in the process list"),
    Setting("log_level", "INFO", as_choice("DEBUG", "INFO", "WARNING", "ERROR"), "log level of the worker"),
    Setting("log_format", "plain", as_choice("plain", "json"), "log line format of the worker"),
]


def read_file(path: str | Path | None = None, cwd: str | Path = ".") -> tuple[dict[str, Any], str | None]:
    """Settings from ``path``, else ``kiq.toml``, else ``[tool.kiq]`` of ``pyproject.toml`` in ``cwd``."""
    if path is not None:
        candidates = [Path(path)]
        if not candidates[0].exists():
            raise ConfigError(f"config file {path} does not exist")
    else:
        candidates = [Path(cwd) / "kiq.toml", Path(cwd) / "pyproject.toml"]
    for candidate in candidates:
        if not candidate.exists():
            continue
        try:
            data = tomllib.loads(candidate.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read {candidate}: {exc}") from exc
        if candidate.name == "pyproject.toml" and path is None:
            data = data.get("tool", {}).get("kiq")
            if data is None:
                continue
        elif candidate.name == "pyproject.toml":
            data = data.get("tool", {}).get("kiq", {})
        if not isinstance(data, dict):
            raise ConfigError(f"{candidate}: kiq settings must be a table")
        return data, str(candidate)
    return {}, None


class Source(NamedTuple):
    origin: str
    values: Mapping[str, Any]
    lenient: bool = False


class Config:
    """All settings of a kiq client or worker, its middleware chains, plugins and Redis connection."""

    redis_url: str | None
    embedded_dir: str
    concurrency: int
    queues: list[tuple[str, int]]
    timeout: float
    fetch: str
    require: list[str]
    max_retries: int
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
        self.client_middleware: Chain[Any] = Chain(self)
        self.server_middleware: Chain[Any] = Chain(self)
        # ``config.plugins`` is the manager; the ``plugins`` setting (names) is ``config.get("plugins")``
        self.plugins: PluginManager
        object.__setattr__(self, "plugins", PluginManager(self))
        self.server = False
        # named capsules besides the default one: name -> (queues, concurrency); see kiq.manager.add_capsule
        self.capsules: dict[str, tuple[list[tuple[str, int]], int]] = {}
        self._redis: redis.Redis | None = None
        self._client: Client | None = None
        sources = [*_sources, Source("arguments", settings)]
        # plugins first: they may declare settings that the other sources use
        for source in sources:
            if "plugins" in source.values:
                self._values["plugins"] = self._parse("plugins", source.values["plugins"], source.origin)
        for name in self._values["plugins"]:
            self.add_plugin(resolve(name), name)
        for source in sources:  # before the values: the fetcher's plugin may declare settings they use
            self._register_fetch_plugin(source.values.get("fetch"))
        for source in sources:
            for key, raw in source.values.items():
                if key == "plugins" or (source.lenient and key not in self._settings):
                    continue
                self._values[key] = self._parse(key, raw, source.origin)

    @classmethod
    def load(
        cls, config_file: str | Path | None = None, env: Mapping[str, str] | None = None, **settings: Any
    ) -> Config:
        """defaults < config file (``config_file``, kiq.toml or [tool.kiq]) < ``KIQ_*`` env < ``settings``."""
        file_values, origin = read_file(config_file)
        env = os.environ if env is None else env
        env_values = {key[len(ENV_PREFIX) :].lower(): value for key, value in env.items() if key.startswith(ENV_PREFIX)}
        # other tools' KIQ_* variables are not ours to refuse, so the environment source is lenient
        return cls([Source(origin or "config file", file_values), Source("environment", env_values, True)], **settings)

    # -- settings access ----------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("_values")
        if values is not None and name in values:
            return values[name]
        raise AttributeError(f"{type(self).__name__} has no setting or attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._settings:
            self._values[name] = self._parse(name, value, "assignment")
            if name == "fetch":
                self._register_fetch_plugin(value)
            if name == "redis_url":
                self._redis = self._client = None
        else:
            object.__setattr__(self, name, value)

    def get(self, name: str) -> Any:
        """The value of a setting (core or declared by a plugin)."""
        if name not in self._settings:
            raise ConfigError(f"unknown setting {name!r}")
        return self._values[name]

    @property
    def settings(self) -> dict[str, Any]:
        """A copy of every setting's current value."""
        return dict(self._values)

    def _parse(self, name: str, raw: Any, origin: str) -> Any:
        setting = self._settings.get(name)
        if setting is None:
            known = ", ".join(sorted(self._settings))
            raise ConfigError(f"unknown setting {name!r} (from {origin}); known settings: {known}")
        try:
            return setting.parse(raw)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"bad value for setting {name!r} (from {origin}): {exc}") from exc

    def add_plugin(self, plugin: object, name: str | None = None) -> None:
        """Register a plugin object (once): its settings become known and its middleware joins the chains."""
        if not self.plugins.is_registered(plugin):
            self.plugins.register(plugin, name)

    def _register_fetch_plugin(self, fetch: object) -> None:
        """``fetch = "reliable"`` alone switches the fetcher: the shipped plugin comes with the setting (so its
        ``reliable_*`` settings are accepted too), whether the setting is read or assigned."""
        if fetch == "reliable":
            self.add_plugin(resolve("reliable_fetch"), "reliable_fetch")

    def declare_settings(self, settings: Iterable[Setting], owner: str) -> None:
        """Make a plugin's settings known, with their defaults."""
        for setting in settings:
            known = self._settings.get(setting.name)
            if known is not None and known != setting:
                raise ConfigError(f"plugin {owner!r} redefines the setting {setting.name!r}")
            self._settings[setting.name] = setting
            self._values.setdefault(setting.name, setting.default)

    def handle_exception(self, exc: BaseException, context: dict[str, Any]) -> None:
        """Log an error with its context and pass it to every ``kiq_error`` hook (a failing hook is only logged)."""
        logging.getLogger("kiq").warning("%s: %s", context.get("context", "error"), exc, exc_info=exc)
        try:
            self.plugins.hook.kiq_error(exc=exc, context=context, config=self)
        except Exception:
            logging.getLogger("kiq").exception("an error handler failed")

    # -- shared resources ---------------------------------------------------------------------------
    @property
    def redis(self) -> redis.Redis:
        """The pooled Redis client for this config (the embedded server when ``redis_url`` is unset)."""
        if self._redis is None:
            from .redis import connect

            threads = self.concurrency + sum(concurrency for _, concurrency in self.capsules.values())
            # every processor may hold a connection (BRPOP); plus heartbeat, poller and pushes from jobs
            self._redis = connect(self.redis_url, self.embedded_dir, pool_size=threads + 5)
        return self._redis

    @property
    def client(self) -> Client:
        """The Client that pushes jobs with this config."""
        if self._client is None:
            from .client import Client

            self._client = Client(self)
        return self._client


# -- the process-wide default config and Sidekiq's configure_server / configure_client -----------------
_default: Config | None = None
_server_callbacks: list[Callable[[Config], Any]] = []


def default_config() -> Config:
    """The process-wide Config, loaded from the config file and environment on first use."""
    global _default
    if _default is None:
        _default = Config.load()
    return _default


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
