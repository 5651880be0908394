"""The live worker processes (Sidekiq's ``ProcessSet``/``Process``) and what their threads are running
(``Workers``/``Work``), read from the process registry the launcher's heartbeat writes:

- ``processes`` SET of identities; HASH ``<identity>`` (``info`` JSON, ``busy``, ``beat``, ``quiet``, ``rss``,
  ``rtt_us``; expires 60 s after the last heartbeat); HASH ``<identity>:work`` (thread id -> JSON work).
- Remote control: ``LPUSH <identity>-signals TSTP|TERM|TTIN``, which the heartbeat picks up.

Those are the names; each key is its name in kiq's shared slot (``kiq.ext.Keyspace.key``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from ..config import config_or_default
from ..errors import KiqError
from ..keys import PROCESSES, SIGNALS_TTL, keyspace, signals_key, work_key
from ..payload import epoch_seconds, parse_job
from ..server.scheduled import cleanup_processes
from .records import display_arguments, payload_args, payload_kwargs, shown_job

if TYPE_CHECKING:
    from ..config import Config

# A killed process keeps its hash until it expires (60 s after its last beat), so it looks alive meanwhile; a
# process that missed this many beats in a row is shown as stale. Not 1: a beat can be late by a slow Redis call.
STALE_AFTER_BEATS = 2.5
# the interval assumed for a process whose info does not say (Ruby Sidekiq, an older kiq): Sidekiq's fixed 10 s
DEFAULT_HEARTBEAT_INTERVAL = 10.0

ProcessState = Literal["running", "quiet", "stale"]


class Process:
    """One live worker process: its ``info`` (hostname, pid, identity, queues, concurrency, tag, labels,
    started_at, version...) merged with the heartbeat fields ``busy``, ``beat``, ``quiet``, ``rss``, ``rtt_us``."""

    def __init__(self, attributes: dict[str, Any], config: Config) -> None:
        self.attributes = attributes
        self.config = config

    def __getitem__(self, key: str) -> Any:
        return self.attributes.get(key)

    def __repr__(self) -> str:
        return f"<Process {self.identity} busy={self.busy} stopping={self.stopping}>"

    @property
    def identity(self) -> str:
        return str(self.attributes.get("identity", ""))

    @property
    def busy(self) -> int:
        return int(self.attributes.get("busy") or 0)

    @property
    def beat(self) -> float:
        return float(self.attributes.get("beat") or 0.0)

    @property
    def started_at(self) -> float | None:
        """When the process started (epoch seconds; every Sidekiq writes ``Time.now.to_f``), None if unreadable."""
        return epoch_seconds(self.attributes.get("started_at"), integers="seconds")

    @property
    def stopping(self) -> bool:
        """True once the process stopped fetching (quieted, or shutting down)."""
        return self.attributes.get("quiet") == "true"

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between the process's heartbeats, as its ``info`` says (kiq), else Sidekiq's 10 s."""
        interval = self.attributes.get("heartbeat_interval")
        if isinstance(interval, int | float) and not isinstance(interval, bool) and interval > 0:
            return float(interval)
        return DEFAULT_HEARTBEAT_INTERVAL

    @property
    def seconds_since_beat(self) -> float:
        """Seconds since the last heartbeat (a clock skew between hosts counts in)."""
        return max(0.0, time.time() - self.beat)

    @property
    def state(self) -> ProcessState:
        """``stale`` when it missed ``STALE_AFTER_BEATS`` heartbeats (killed, frozen, or cut off from Redis; its
        hash expires 60 s after the last beat), else ``quiet`` once it stopped fetching, else ``running``."""
        if self.seconds_since_beat > STALE_AFTER_BEATS * self.heartbeat_interval:
            return "stale"
        return "quiet" if self.stopping else "running"

    @property
    def tag(self) -> str | None:
        return self.attributes.get("tag")

    @property
    def capsules(self) -> dict[str, dict[str, Any]]:
        """Capsule name -> ``{"concurrency", "mode", "weights": {queue: weight}}``, as Sidekiq 8.0.9+ and kiq
        write them; {} for a Sidekiq 6.x/7.x process, whose ``info`` has none."""
        capsules = self.attributes.get("capsules")
        if not isinstance(capsules, dict):
            return {}
        return {name: capsule for name, capsule in capsules.items() if isinstance(capsule, dict)}

    @property
    def queues(self) -> list[str]:
        """The queues it fetches from: ``queues`` (6.x-8.x, kiq), else the capsules' (Sidekiq 9 drops ``queues``)."""
        queues = self.attributes.get("queues")
        if isinstance(queues, list):
            return [str(name) for name in queues]
        return list(dict.fromkeys(str(name) for capsule in self.capsules.values() for name in _weights(capsule)))

    @property
    def weights(self) -> dict[str, int]:
        """Queue -> weight over its capsules, as Sidekiq 8's ``Process#weights`` (two capsules sharing a queue: the
        last one's weight); from the older ``weights`` list when the record has no capsules."""
        merged: dict[str, int] = {}
        capsules = self.capsules
        sources = [_weights(capsule) for capsule in capsules.values()] if capsules else self.attributes.get("weights")
        for weights in sources if isinstance(sources, list) else []:
            if isinstance(weights, dict):
                merged.update({str(queue): weight for queue, weight in weights.items() if type(weight) is int})
        return merged

    def signal(self, name: str) -> None:
        """Queue a signal (TSTP, TERM, TTIN) for the process; its heartbeat runs it within a few seconds."""
        key = keyspace(self.config.redis).key(signals_key(self.identity))
        pipe = self.config.redis.pipeline(transaction=True)
        pipe.lpush(key, name)
        pipe.expire(key, SIGNALS_TTL)
        pipe.execute()

    def quiet(self) -> None:
        """Stop fetching new jobs (TSTP); running jobs finish."""
        self.signal("TSTP")

    def stop(self) -> None:
        """Shut the process down (TERM): quiet, wait up to ``timeout``, requeue what still runs, exit."""
        self.signal("TERM")

    def dump_threads(self) -> None:
        """Log every thread's stack in the process's log (TTIN)."""
        self.signal("TTIN")

    def as_dict(self) -> dict[str, Any]:
        return {**self.attributes, "quiet": self.stopping, "state": self.state}


def _weights(capsule: dict[str, Any]) -> dict[str, Any]:
    weights = capsule.get("weights")
    return weights if isinstance(weights, dict) else {}


class ProcessSet:
    """The live processes, sorted by identity. Builds with a cleanup of dead entries (at most once a minute)."""

    def __init__(self, config: Config | None = None, clean: bool = True) -> None:
        self.config = config_or_default(config)
        if clean:
            self.cleanup()

    def cleanup(self) -> int:
        return cleanup_processes(self.config.redis)

    @property
    def size(self) -> int:
        """How many identities are registered (may include a dead one until the next cleanup)."""
        redis = self.config.redis
        return int(redis.scard(keyspace(redis).key(PROCESSES)))

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[Process]:
        redis = self.config.redis
        keys = keyspace(redis)
        identities = sorted(redis.sscan_iter(keys.key(PROCESSES)))
        pipe = redis.pipeline(transaction=False)
        for identity in identities:
            pipe.hmget(keys.key(identity), "info", "concurrency", "busy", "beat", "quiet", "rss", "rtt_us")
        for identity, (info, concurrency, busy, beat, quiet, rss, rtt_us) in zip(
            identities, pipe.execute(), strict=True
        ):
            attributes = parse_job(info) if info is not None else None
            if attributes is None:  # stopped between the two reads, or not a registry entry
                continue
            attributes.setdefault("identity", identity)
            if concurrency is not None and concurrency.isdigit():  # Sidekiq 8.1.2+ keeps it out of ``info``
                attributes["concurrency"] = int(concurrency)
            attributes.update(
                busy=int(busy or 0), beat=float(beat or 0), quiet=quiet, rss=int(rss or 0), rtt_us=int(rtt_us or 0)
            )
            yield Process(attributes, self.config)

    def get(self, identity: str) -> Process:
        """The live process with this identity or unique identity prefix (e.g. ``host:pid``)."""
        matches = [process for process in self if process.identity.startswith(identity)]
        exact = [process for process in matches if process.identity == identity]
        if exact or len(matches) == 1:
            return (exact or matches)[0]
        if not matches:
            raise KiqError(f"no live process {identity!r}")
        raise KiqError(f"{identity!r} matches {len(matches)} processes; give more of the identity")

    def quiet(self, identity: str | None = None) -> int:
        """Quiet one process (by identity or unique prefix) or, without one, every live process."""
        return self._signal_all("TSTP", identity)

    def stop(self, identity: str | None = None) -> int:
        """Stop one process (by identity or unique prefix) or, without one, every live process."""
        return self._signal_all("TERM", identity)

    def _signal_all(self, name: str, identity: str | None) -> int:
        processes = [self.get(identity)] if identity is not None else list(self)
        for process in processes:
            process.signal(name)
        return len(processes)

    @property
    def total_concurrency(self) -> int:
        return sum(int(process["concurrency"] or 0) for process in self)

    @property
    def total_rss_in_kb(self) -> int:
        return sum(int(process["rss"] or 0) for process in self)


class Work(NamedTuple):
    """One job running on one thread of one process; ``work`` is the registry entry with ``payload`` parsed, as shown
    (``kiq.api.shown_job``: what a plugin hides, such as an encrypted argument, is hidden)."""

    process_id: str
    thread_id: str
    work: dict[str, Any]

    @property
    def queue(self) -> str:
        return str(self.work.get("queue", ""))

    @property
    def run_at(self) -> float | None:
        return epoch_seconds(self.work.get("run_at"), integers="seconds")  # Sidekiq: Time.now.to_i

    @property
    def payload(self) -> dict[str, Any]:
        payload = self.work.get("payload")
        return payload if isinstance(payload, dict) else {}

    @property
    def args(self) -> list[Any]:
        return payload_args(self.payload)

    @property
    def kwargs(self) -> dict[str, Any]:
        """The running job's keyword arguments (``{}`` when none, or when its ``kwargs`` is not an object)."""
        return payload_kwargs(self.payload)

    @property
    def arguments_line(self) -> str:
        """Its arguments as the listings show them (see ``JobRecord.arguments_line``)."""
        return display_arguments(self.args, self.kwargs)


class Workers:
    """The jobs running right now in every live process, oldest first (Sidekiq's ``Workers``)."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config_or_default(config)

    def __iter__(self) -> Iterator[Work]:
        redis = self.config.redis
        keys = keyspace(redis)
        identities = sorted(redis.sscan_iter(keys.key(PROCESSES)))
        pipe = redis.pipeline(transaction=False)
        for identity in identities:
            pipe.hgetall(keys.key(work_key(identity)))
            pipe.hgetall(keys.key(f"{identity}:workers"))  # Sidekiq < 6.5 (e.g. Debian's 6.4.1) uses this key
        replies = pipe.execute()
        works: list[Work] = []
        for index, identity in enumerate(identities):
            entries = {**replies[2 * index + 1], **replies[2 * index]}
            for thread_id, raw in entries.items():
                work = parse_job(raw)
                if work is None:
                    continue
                payload = work.get("payload")
                # Sidekiq ≥ 6 stores the payload as a JSON string; older versions stored an object
                if isinstance(payload, str):
                    payload = parse_job(payload) or {}
                if isinstance(payload, dict):  # as shown: what a plugin hides (kiq_redact_job) is hidden
                    work["payload"] = shown_job(payload, self.config)
                works.append(Work(identity, thread_id, work))
        works.sort(key=lambda work: work.run_at or 0.0)
        return iter(works)

    @property
    def size(self) -> int:
        """How many jobs are running (the sum of every process's ``busy``)."""
        redis = self.config.redis
        keys = keyspace(redis)
        identities = list(redis.sscan_iter(keys.key(PROCESSES)))
        pipe = redis.pipeline(transaction=False)
        for identity in identities:
            pipe.hget(keys.key(identity), "busy")
        return sum(int(busy or 0) for busy in pipe.execute())

    def __len__(self) -> int:
        return self.size
