"""The Redis keys kiq reads and writes: Sidekiq 7's (and Sidekiq 8's job metrics), so a Ruby app and a Python app
can share one Redis.

The constants and functions below give each key's *name*; a ``Keyspace`` (``kiq.ext.keyspace(redis)``) turns a name into
the key used on a given Redis. On a standalone server (or Sentinel) that is the name itself, Sidekiq's wire format.
On a Redis Cluster, the keyspace is the one place that hash-tags keys, so that every Lua script and multi-key command
finds its keys in one slot (``slots`` setting, docs/guide/redis.md):

- ``slots = "one"``: every key under the ``{kiq}`` tag — one slot, so everything kiq does works as on one server;
- ``slots = "queue"``: each queue's list (and what a fetcher keeps beside it) in the slot of its name
  (``queue:{<name>}``); every other key under ``{kiq}``. More primaries then carry more queues.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

from redis.crc import key_slot

from .errors import InvalidJobError

QUEUES = "queues"  # SET of queue names
QUEUE_PREFIX = "queue:"  # LIST per queue: LPUSH to push, RPOP/BRPOP to fetch (FIFO)
SCHEDULE = "schedule"  # ZSET, score = when the job runs (epoch seconds)
RETRY = "retry"  # ZSET, score = when the failed job runs again
DEAD = "dead"  # ZSET, score = when the job died
PROCESSES = "processes"  # SET of live worker identities (host:pid:hex)
PROCESS_CLEANUP = "process_cleanup"  # NX lock: one process prunes dead identities per minute
# pub/sub channel (kiq's own: Sidekiq has none): "<set> <score>" when a job goes into schedule or retry, so every
# worker's poller wakes at the new job's due time instead of at its next poll (core/server/scheduled.py)
POLLER_WAKE = "kiq:poller-wake"
# SET of paused queue names (kiq's own key: Sidekiq Pro's pause is not documented, so no format is shared with it)
PAUSED = "kiq:paused"

PROCESS_TTL = 60  # seconds a process hash (and its work hash) outlives its last heartbeat
SIGNALS_TTL = 60  # seconds a remote signal waits for the process's next heartbeat
STATS_TTL = 5 * 365 * 24 * 60 * 60  # the daily counters live five years, as in Sidekiq


SHARED_TAG = "{kiq}"  # the hash tag of every key a cluster keeps in kiq's shared slot
Slots = Literal["one", "queue"]
SLOTS: tuple[Slots, ...] = ("one", "queue")


class Keyspace:
    """The keys of one Redis: names as Sidekiq writes them on a standalone server (``slots`` None), hash-tagged for
    a cluster. Every key kiq uses passes through ``key`` (kiq's shared slot), ``queue`` (a queue's list),
    ``beside_queue`` (a key that a script uses with a queue's list) or ``queue_scoped`` (a queue's own keys)."""

    __slots__ = ("_prefix", "_queue_prefix", "slots")

    def __init__(self, slots: Slots | None = None) -> None:
        if slots is not None and slots not in SLOTS:
            raise ValueError(f"slots must be one of {', '.join(SLOTS)}, not {slots!r}")
        self.slots = slots
        self._prefix = "" if slots is None else SHARED_TAG
        self._queue_prefix = self._prefix + QUEUE_PREFIX

    @property
    def cluster(self) -> bool:
        return self.slots is not None

    def key(self, name: str) -> str:
        """The key of ``name`` in kiq's shared slot (on a standalone server: ``name`` itself)."""
        return self._prefix + name

    def queue(self, name: str) -> str:
        """The LIST of queue ``name``: ``queue:<name>``, ``{kiq}queue:<name>``, or ``queue:{<name>}``."""
        if self.slots == "queue":
            return f"{QUEUE_PREFIX}{{{_tag(name)}}}"
        return self._queue_prefix + name

    def queue_name(self, key: str) -> str:
        """The name of the queue whose list is ``key`` (the inverse of ``queue``)."""
        if self.slots == "queue":
            return key[len(QUEUE_PREFIX) + 1 : -1]
        return key[len(self._queue_prefix) :]

    def beside_queue(self, queue: str, name: str) -> str:
        """The key of ``name`` in the slot of queue ``queue``'s list: for a key that a script moves that queue's jobs
        to or from (a reliable fetcher's working list). ``name`` must hold no brace."""
        if self.slots == "queue":
            return f"{name}{{{_tag(queue)}}}"
        return self._prefix + name

    def queue_scoped(self, name: str, queue: str) -> str:
        """The key ``name`` for queue ``queue``, in that queue's slot (beside its list in the ``queue`` layout):
        ``<name><length>:<queue>:``, hash-tagged as the queue's list is. Made to be extended: a script appends to it
        (``KEYS[1] .. 'r'``) and stays in the slot; the queue's length comes first, so no queue's keys are another's
        whatever characters the names hold (``a`` + ``b:c`` and ``a:b`` + ``c`` differ). ``name`` holds no brace."""
        if self.slots == "queue":
            return f"{name}{len(queue)}:{{{_tag(queue)}}}:"
        return f"{self._prefix}{name}{len(queue)}:{queue}:"

    def slot_groups(self, keys: Sequence[str]) -> list[list[str]]:
        """``keys`` (in priority order) cut into runs of keys in one hash slot, order kept: what one script or
        blocking command may take together. Everything is one run but in the ``queue`` layout."""
        if self.slots != "queue" or len(keys) < 2:
            return [list(keys)] if keys else []
        groups: list[list[str]] = []
        last = -1
        for key in keys:
            slot = key_slot(key.encode("utf-8", "surrogateescape"))
            if slot == last:
                groups[-1].append(key)
            else:
                groups.append([key])
                last = slot
        return groups

    def __repr__(self) -> str:
        return f"Keyspace(slots={self.slots!r})"


def _tag(queue: str) -> str:
    """A queue's name as the hash tag of its keys: Redis hashes what lies between the first ``{`` and the next
    ``}``, so every key built as ``...{<name>}`` falls in one slot, whatever braces the name holds; but a name that
    is empty or starts with ``}`` would make an empty tag (then Redis hashes each whole key: no common slot)."""
    if not queue or queue.startswith("}"):  # a KiqError: the CLI says it; a poller sends such a job to dead once
        raise InvalidJobError(
            f'queue name {queue!r} cannot have a slot of its own on a Redis Cluster with slots = "queue" (an '
            "empty name or one starting with '}' gives its keys no common hash tag): rename the queue"
        )
    return queue


STANDALONE = Keyspace()


def keyspace(redis: Any) -> Keyspace:
    """The keyspace of a Redis client: the one ``kiq.redis.connect`` gave it (a cluster's), else a standalone
    server's (Sidekiq's names)."""
    found: Keyspace = getattr(redis, "kiq_keyspace", STANDALONE)
    return found


def poller_wake(keys: Keyspace, set_name: str, at: float) -> tuple[str, str, str]:
    """The ``PUBLISH`` that tells the pollers a job in ``set_name`` (``schedule`` or ``retry``) is due at ``at``."""
    return ("PUBLISH", keys.key(POLLER_WAKE), f"{set_name} {at!r}")


def work_key(identity: str) -> str:
    """HASH thread id -> ``{"queue", "payload", "run_at"}`` of the jobs a process is running."""
    return f"{identity}:work"


def signals_key(identity: str) -> str:
    """LIST of signals (TSTP, TERM, TTIN) the API left for a process."""
    return f"{identity}-signals"


def stat_key(name: str, day: str | None = None) -> str:
    """``stat:processed``/``stat:failed``, or the counter of one UTC day (``YYYY-MM-DD``)."""
    return f"stat:{name}" if day is None else f"stat:{name}:{day}"


# -- job metrics (lib/sidekiq/metrics: tracking.rb writes them, query.rb reads them) ------------------------------
# Two families: Sidekiq 7's (7.0-7.3) and Sidekiq 8's (8.0 on: other names, and 10-minute rollups kept 3 days).
METRICS_TTL = 8 * 60 * 60  # seconds the per-minute metrics hashes and histograms live (Sidekiq's SHORT_TERM)
METRICS_ROLLUP_TTL = 3 * 24 * 60 * 60  # seconds Sidekiq 8's 10-minute hashes live (its MID_TERM): the 72 h view
# Upper bounds (exclusive) in ms of the 26 histogram buckets: a job of ``ms`` counts in the first bucket whose
# bound is greater than ``ms``. The last one is Sidekiq's "Slow" bucket (1e20 in Ruby).
HISTOGRAM_BOUNDS_MS: tuple[float, ...] = (
    20, 30, 45, 65, 100,
    150, 225, 335, 500, 750,
    1100, 1700, 2500, 3800, 5750,
    8500, 13000, 20000, 30000, 45000,
    65000, 100000, 150000, 225000, 335000,
    float("inf"),
)  # fmt: skip
HISTOGRAM_LABELS: tuple[str, ...] = (
    "20ms", "30ms", "45ms", "65ms", "100ms",
    "150ms", "225ms", "335ms", "500ms", "750ms",
    "1.1s", "1.7s", "2.5s", "3.8s", "5.75s",
    "8.5s", "13s", "20s", "30s", "45s",
    "65s", "100s", "150s", "225s", "335s",
    "Slow",
)  # fmt: skip


def metrics_key(minute: time.struct_time) -> str:
    """Sidekiq 7's HASH of one UTC minute's counts, ``j|YYYYMMDD|H:M`` (hour and minute not zero-padded), with the
    fields ``<class>|p`` (processed, failures included), ``<class>|f`` (failed) and ``<class>|ms`` (milliseconds
    spent in the jobs that succeeded)."""
    return f"j|{minute.tm_year:04d}{minute.tm_mon:02d}{minute.tm_mday:02d}|{minute.tm_hour}:{minute.tm_min}"


def histogram_key(name: str, minute: time.struct_time) -> str:
    """Sidekiq 7's execution-time histogram of one class in one UTC minute, ``<class>-DD-HH:M`` (day of month and
    hour zero-padded, minute not): a string of 26 unsigned 16-bit big-endian counters (BITFIELD ``u16 #i``), one
    per bucket of ``HISTOGRAM_BOUNDS_MS``, saturating at 65,535."""
    return f"{name}-{minute.tm_mday:02d}-{minute.tm_hour:02d}:{minute.tm_min}"


def sidekiq8_minute_key(minute: time.struct_time) -> str:
    """Sidekiq 8's HASH of one UTC minute, ``j|YYMMDD|H:MM`` (two-digit year, hour not zero-padded, minute
    zero-padded: strftime ``j|%y%m%d|%-H:%M``); the fields are Sidekiq 7's."""
    return f"j|{minute.tm_year % 100:02d}{minute.tm_mon:02d}{minute.tm_mday:02d}|{minute.tm_hour}:{minute.tm_min:02d}"


def sidekiq8_rollup_key(minute: time.struct_time) -> str:
    """Sidekiq 8's HASH of the UTC ten minutes holding ``minute``, its minute key without the last digit
    (``j|250214|8:4`` holds 08:40-08:49, ``j|250214|8:0`` 08:00-08:09); the fields are Sidekiq 7's."""
    return sidekiq8_minute_key(minute)[:-1]


def sidekiq8_histogram_key(name: str, minute: time.struct_time) -> str:
    """Sidekiq 8's histogram of one class in one UTC minute, ``h|<class>-D-H:M`` (nothing zero-padded: strftime
    ``%-d-%-H:%-M``); the layout is Sidekiq 7's (``histogram_key``)."""
    return f"h|{name}-{minute.tm_mday}-{minute.tm_hour}:{minute.tm_min}"


# -- iterable jobs (Sidekiq 7.3's lib/sidekiq/job/iterable.rb) --------------------------------------------------
ITERATION_PREFIX = "it-"  # HASH per iterable job: ex, c, rt, cancelled
ITERATION_TTL = 30 * 24 * 60 * 60  # seconds: the state outlives every retry the default schedule makes


def iteration_key(jid: str) -> str:
    """HASH of an iterable job's state, ``it-<jid>``: ``ex`` (executions), ``c`` (the cursor as JSON), ``rt``
    (runtime seconds of the finished executions) and ``cancelled`` (epoch seconds, once cancelled)."""
    return ITERATION_PREFIX + jid
