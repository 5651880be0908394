"""The Redis keys kiq reads and writes: Sidekiq 7's, so a Ruby app and a Python app can share one Redis."""

from __future__ import annotations

QUEUES = "queues"  # SET of queue names
QUEUE_PREFIX = "queue:"  # LIST per queue: LPUSH to push, RPOP/BRPOP to fetch (FIFO)
SCHEDULE = "schedule"  # ZSET, score = when the job runs (epoch seconds)
RETRY = "retry"  # ZSET, score = when the failed job runs again
DEAD = "dead"  # ZSET, score = when the job died
PROCESSES = "processes"  # SET of live worker identities (host:pid:hex)
PROCESS_CLEANUP = "process_cleanup"  # NX lock: one process prunes dead identities per minute

PROCESS_TTL = 60  # seconds a process hash (and its work hash) outlives its last heartbeat
SIGNALS_TTL = 60  # seconds a remote signal waits for the process's next heartbeat
STATS_TTL = 5 * 365 * 24 * 60 * 60  # the daily counters live five years, as in Sidekiq


def queue_key(name: str) -> str:
    return QUEUE_PREFIX + name


def queue_name(key: str) -> str:
    """The name of the queue whose key is ``key`` (``queue:<name>``)."""
    return key[len(QUEUE_PREFIX) :]


def work_key(identity: str) -> str:
    """HASH thread id -> ``{"queue", "payload", "run_at"}`` of the jobs a process is running."""
    return f"{identity}:work"


def signals_key(identity: str) -> str:
    """LIST of signals (TSTP, TERM, TTIN) the API left for a process."""
    return f"{identity}-signals"


def stat_key(name: str, day: str | None = None) -> str:
    """``stat:processed``/``stat:failed``, or the counter of one UTC day (``YYYY-MM-DD``)."""
    return f"stat:{name}" if day is None else f"stat:{name}:{day}"
