"""Settings: every knob kiq reads, with its default and parser, and where values come from.

Sources, lowest first: defaults < ``kiq.toml`` / ``[tool.kiq]`` of ``pyproject.toml`` < ``KIQ_*`` environment
variables < code / CLI flags. Every value is parsed when it is read or assigned, so a typo or a bad value stops
the process at start-up with a message naming the setting, where it came from, and the setting meant when the
name is a near miss.

Hand-written on purpose: a settings library (pydantic-settings, dynaconf) would add a dependency to every client
process for about 150 lines of parsing, and plugins declare settings at run time, which those libraries model
less simply than a dict of ``Setting`` objects.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from .errors import ConfigError

ENV_PREFIX = "KIQ_"


# -- parsers: each takes the raw value (TOML, env text, Python) and returns the parsed one or raises ValueError --
def as_int(minimum: int | None = None) -> Callable[[Any], int]:
    def parse(raw: Any) -> int:
        if isinstance(raw, bool) or not isinstance(raw, int | str):
            raise ValueError(f"expected an integer, got {raw!r}")
        value = int(raw)
        if minimum is not None and value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def as_float(minimum: float = 0.0, maximum: float = float("inf")) -> Callable[[Any], float]:
    def parse(raw: Any) -> float:
        if isinstance(raw, bool) or not isinstance(raw, int | float | str):
            raise ValueError(f"expected a number, got {raw!r}")
        value = float(raw)
        if not minimum <= value < float("inf"):  # also refuses NaN
            raise ValueError(f"must be a finite number of at least {minimum}, got {raw!r}")
        if value > maximum:
            raise ValueError(f"must be at most {maximum:g}, got {raw!r}")
        return value

    return parse


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


def as_int_choice(*choices: int) -> Callable[[Any], int]:
    """One of a few integers, given as a number (TOML, code) or its digits (the environment)."""

    def parse(raw: Any) -> int:
        value = raw.strip() if isinstance(raw, str) else raw
        for choice in choices:
            if (type(value) is int and value == choice) or value == str(choice):
                return choice
        raise ValueError(f"expected one of {', '.join(map(str, choices))}, got {raw!r}")

    return parse


def as_str_list(raw: Any) -> list[str]:
    """A list of strings; from the environment, a comma- or space-separated string."""
    if isinstance(raw, str):
        raw = raw.replace(",", " ").split()
    if not isinstance(raw, list | tuple) or not all(isinstance(item, str) and item for item in raw):
        raise ValueError(f"expected a list of names, got {raw!r}")
    return list(raw)


Queues = list[tuple[str, int]]


def as_queues(raw: Any) -> Queues:
    """Queues as Sidekiq takes them: ``"critical,2"``, ``["critical", 2]`` or a list of those.

    From the environment: ``"critical,2 default"`` (space-separated). A queue without a weight has weight 0;
    all zero means strict order, all one means random, anything else weighted (Sidekiq's ``queues=``).
    """
    items = raw.split() if isinstance(raw, str) else raw
    if not isinstance(items, list | tuple) or not items:
        raise ValueError(f"expected a non-empty list of queues, got {raw!r}")
    if len(items) == 2 and isinstance(items[0], str) and isinstance(items[1], int) and "," not in items[0]:
        items = [items]  # one ["name", weight] pair
    queues: Queues = []
    for item in items:
        parts = item.split(",") if isinstance(item, str) else item
        if not isinstance(parts, list | tuple) or not 1 <= len(parts) <= 2:
            raise ValueError(f"a queue is 'name' or 'name,weight', got {item!r}")
        name = parts[0].strip() if isinstance(parts[0], str) else ""
        if not name:
            raise ValueError(f"a queue needs a name, got {item!r}")
        weight = _weight(item, name, parts[1]) if len(parts) == 2 else 0
        queues.append((name, weight))
    return queues


def _weight(item: Any, name: str, raw: Any) -> int:
    """The weight of ``"name,weight"``; a name there (Celery's ``-Q default,mail``) is refused naming the fix."""
    text = str(raw).strip()
    try:
        return as_int(0)(text)
    except ValueError:
        if text.lstrip("-").isdigit():
            raise
    raise ValueError(
        f"queue {item!r}: the part after the comma is a weight (Sidekiq's 'name,weight'), and {text!r} is not a "
        f"whole number. For several queues give each its own: -q {name} -q {text} "
        f'(KIQ_QUEUES="{name} {text}"; queues = [...] in kiq.toml)'
    ) from None


@dataclass(frozen=True)
class Setting:
    """A named setting: its default and the parser that turns a raw value (TOML, env text, Python) into it.

    Plugins declare theirs with the constructors: ``Setting.integer("my_limit", 10, minimum=1, help="...")``.
    """

    name: str
    default: Any
    parse: Callable[[Any], Any]
    help: str = ""

    @classmethod
    def integer(cls, name: str, default: int, minimum: int | None = None, help: str = "") -> Setting:
        return cls(name, default, as_int(minimum), help)

    @classmethod
    def number(
        cls, name: str, default: float, minimum: float = 0.0, help: str = "", maximum: float = float("inf")
    ) -> Setting:
        return cls(name, default, as_float(minimum, maximum), help)

    @classmethod
    def boolean(cls, name: str, default: bool, help: str = "") -> Setting:
        return cls(name, default, as_bool, help)

    @classmethod
    def text(cls, name: str, default: str | None, help: str = "") -> Setting:
        """A string; a default of None makes it optional (an empty value means unset)."""
        return cls(name, default, as_optional_str if default is None else as_str, help)

    @classmethod
    def choice(cls, name: str, default: str, choices: Iterable[str], help: str = "") -> Setting:
        return cls(name, default, as_choice(*choices), help)

    @classmethod
    def names(cls, name: str, default: list[str], help: str = "") -> Setting:
        """A list of names (from the environment: comma- or space-separated)."""
        return cls(name, default, as_str_list, help)


def as_shards(raw: Any) -> dict[str, str]:
    """``shards``: name -> Redis URL, from a TOML table, a dict, JSON, or ``name=url`` pairs (the environment)."""
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("{"):
            raw = json.loads(text)
        else:
            pairs = [item.partition("=") for item in text.replace(",", " ").split()]
            if any(not name or not url for name, _, url in pairs):
                raise ValueError(f"expected name=url pairs, got {raw!r:.80}")
            raw = {name: url for name, _, url in pairs}
    if not isinstance(raw, dict) or not all(isinstance(k, str) and k and isinstance(v, str) for k, v in raw.items()):
        raise ValueError(f"expected a table of shard names to Redis URLs, got {raw!r:.80}")
    return dict(raw)


def as_job_options(raw: Any) -> dict[str, Any]:
    """``default_job_options``: a table of job options (from the environment: a JSON object). Each option's type is
    checked as a class's ``kiq_options`` are, by kiq.job, when a push first uses them."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"expected a JSON object of job options, e.g. '{{\"retry\": 5}}': {exc}") from None
    if not isinstance(raw, dict) or not all(isinstance(key, str) and key for key in raw):
        raise ValueError(f"expected a table of job options, e.g. {{retry = 5, backtrace = true}}, got {raw!r:.80}")
    return dict(raw)


def as_processes(raw: Any) -> int:
    """``processes``: a count >= 0, or ``auto`` (0: one per core, counted when the worker starts)."""
    if isinstance(raw, str) and raw.strip().lower() == "auto":
        return 0
    return as_int(0)(raw)


DAY = 24 * 60 * 60
MB = 1024 * 1024
# the longest ``timeout``: a stop's waits are timed with it (a year of seconds would overflow them), and a worker
# given more than a day to stop is a typo, not a plan
MAX_TIMEOUT = DAY
MIN_MAX_PAYLOAD_BYTES = 1024  # the client skips the size check of a job under a quarter of it (kiq.client)

CORE_SETTINGS = [
    Setting.text("redis_url", None, "Redis URL; unset: the embedded server in embedded_dir"),
    Setting.text("embedded_dir", ".kiq", "where the embedded Redis keeps its socket and data"),
    Setting.boolean(
        "embedded", True, "redis_url unset: use the embedded Redis (not for production); false: that is an error"
    ),
    Setting.choice(
        "slots",
        "one",
        ("one", "queue"),
        "on a Redis Cluster (redis+cluster:// URL): one, every key in one hash slot; queue, each queue in its own",
    ),
    Setting.integer("push_replicas", 0, 0, "a push waits (WAIT) until this many replicas have it; 0: no wait"),
    Setting.number("push_replicas_timeout", 1.0, 0.001, "seconds a push waits for push_replicas"),
    Setting.number(
        "redis_timeout",
        5.0,
        0.1,
        "seconds a Redis command may wait for its reply before the server counts as unreachable (a hung server's "
        "outage); a blocking command (a fetch) waits its own block time plus this",
    ),
    Setting.boolean("reliable_push", False, "a push that finds Redis unreachable is held in memory and sent later"),
    Setting.integer("reliable_push_limit", 10_000, 1, "jobs reliable push holds at most; past it a push raises"),
    Setting.integer("max_payload_bytes", 8 * MB, MIN_MAX_PAYLOAD_BYTES, "a push of a larger job's JSON is refused"),
    Setting("shards", {}, as_shards, "named Redis servers besides redis_url: name -> URL (see Sharding)"),
    Setting.integer("concurrency", 10, 1, "processor threads per worker process"),
    Setting.integer("async_concurrency", 200, 1, "async jobs each capsule's event loop awaits at once"),
    Setting.number(
        "async_block_warning", 1.0, 0, "seconds an async job may block its event loop before a WARNING; 0: never"
    ),
    Setting("processes", 1, as_processes, "worker processes kiq worker forks (a swarm); 0 or auto: one per core"),
    Setting.integer("max_memory_mb", 0, 0, "a swarm child using more memory is stopped and replaced; 0: no limit"),
    Setting("queues", [("default", 0)], as_queues, "queues to fetch from, 'name' or 'name,weight'"),
    Setting.number(
        "timeout",
        25.0,
        0,
        "seconds a stop waits for running jobs before requeueing them; the process exits within this + 2 s "
        "(the default fits Kubernetes' 30 s terminationGracePeriodSeconds); at most a day",
        maximum=MAX_TIMEOUT,
    ),
    Setting.number("job_timeout", 0.0, 0, "seconds a job may run before kiq.JobTimeout interrupts it; 0: no limit"),
    Setting.number(
        "iteration_flush_interval", 5.0, 0, "seconds between the saves of an iterable job's cursor (Sidekiq: 5)"
    ),
    Setting.number(
        "max_iteration_runtime", 0.0, 0, "seconds an iterable job runs before it is re-pushed to resume; 0: no limit"
    ),
    Setting.text("fetch", "basic", "fetch strategy: basic, a plugin's fetcher (reliable), or module:Class"),
    Setting.names("plugins", [], "plugins to load: entry point names or module[:attr]"),
    Setting.names("require", [], "modules the worker imports to register its jobs"),
    Setting.integer("max_retries", 25, 0, "retries for a job with retry: true"),
    Setting(
        "default_job_options", {}, as_job_options, "job options under each class's kiq_options, e.g. {backtrace = true}"
    ),
    Setting.integer("dead_max_jobs", 10_000, 0, "the dead set keeps at most this many jobs"),
    Setting.number("dead_timeout", 180.0 * DAY, 0, "seconds a job stays in the dead set"),
    Setting.number(
        "poll_interval", 5.0, 0.1, "average seconds between regular scheduled/retry polls (due jobs wake the poller)"
    ),
    Setting.number("heartbeat_interval", 10.0, 0.1, "seconds between heartbeats"),
    Setting.boolean(
        "metrics", True, "per-job-class execution metrics in Sidekiq's format, written each heartbeat (sidekiq_wire)"
    ),
    Setting(
        "sidekiq_wire",
        7,
        as_int_choice(7, 8),
        "the Sidekiq major whose wire forms kiq writes: 7 (payload times as float seconds, read by Sidekiq 6.x, "
        "7.x and 8.x; job metrics in both 7's and 8's keys) or 8 (a fleet of Sidekiq 8 only: times as integer "
        "milliseconds, job metrics in 8's keys only)",
    ),
    Setting.text("tag", None, "a tag shown with this process in the process list"),
    Setting.choice("log_level", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR"), "log level of the worker"),
    Setting.choice("log_format", "plain", ("plain", "json"), "log line format of the worker"),
    Setting.names("web_allowed_hosts", [], "Host names kiq web answers besides loopback and its bound address"),
    Setting.names(
        "trusted_proxies",
        [],
        "addresses or networks of the reverse proxies whose X-Forwarded-* headers the dashboard believes (none by "
        "default)",
    ),
]


class Source(NamedTuple):
    """Values from one place; a lenient source ignores names no setting has (the environment holds other
    tools' ``KIQ_*`` variables too)."""

    origin: str
    values: Mapping[str, Any]
    lenient: bool = False


def read_file(path: str | Path | None = None, cwd: str | Path = ".") -> Source:
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
        return Source(str(candidate), data)
    return Source("config file", {})


def read_environment(env: Mapping[str, str]) -> Source:
    values = {key[len(ENV_PREFIX) :].lower(): value for key, value in env.items() if key.startswith(ENV_PREFIX)}
    return Source("environment", values, lenient=True)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'queue'?)`` for a near miss of a known name, else an empty string."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


# -- settings that installed plugins give (the kiq_settings_source hook), while a kiq command runs --------------
_plugin_sources: list[Source] = []


@contextlib.contextmanager
def plugin_settings(sources: Iterable[Source]) -> Iterator[None]:
    """Lay ``sources`` between the config file and the environment of every ``Config.load`` in this process for
    the block (the ``kiq`` command line runs each command inside one, with its installed plugins' sources)."""
    added = list(sources)
    _plugin_sources.extend(added)
    try:
        yield
    finally:
        del _plugin_sources[len(_plugin_sources) - len(added) :]


def plugin_sources() -> list[Source]:
    """The sources ``plugin_settings`` lays now: ``Config.load`` puts them between the file and the environment."""
    return list(_plugin_sources)
