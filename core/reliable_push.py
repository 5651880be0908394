"""Reliable push (the ``reliable_push`` setting, after Sidekiq Pro's): a push that finds Redis unreachable keeps its
jobs in memory, returns their jids, and the jobs are sent, in the order they were pushed, when Redis answers again.

Per destination (a Redis client's connection pool) one ``PushBuffer`` exists while it holds jobs; ``held``
is empty otherwise, so the push path pays one truth test of a dict for all this. While a buffer holds jobs, every
push to its Redis goes in behind them (else a later push would overtake them). They are sent by the next push once
the backoff allows another attempt, and by a background thread, so a process that stops pushing still sends them;
at interpreter exit one last attempt, then each job still held is logged at ERROR as the Redis command that would
write it (``LPUSH queue:<name> <json>`` or ``ZADD schedule <at> <json>``, the JSON last on the line).

A write whose reply was lost may have reached Redis before the connection broke; it is sent again: at least once.
The outage is logged once when the first job is held (WARNING) and once when the buffer is empty again (INFO).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import TYPE_CHECKING

import redis as redis_py

from .backoff import Backoff
from .errors import NotReplicated, PushBufferFull
from .failures import UNREACHABLE
from .keys import SCHEDULE, keyspace
from .redis import pool_of
from .sink import EncodedJob

if TYPE_CHECKING:
    from .config import Config

log = logging.getLogger("kiq")

BACKOFF = (0.05, 2.0)  # seconds until the first attempt after a failed one, doubled per failure up to the second
CHUNK = 1000  # jobs per round trip when the buffer is sent, as push_bulk's batches
EXIT_WAIT = 10.0  # seconds the exit attempt waits for a send under way in another thread
SEND_WAIT = 10.0  # seconds a push that finds the buffer full waits for a send under way in another thread

# writes jobs to the buffer's Redis exactly as a push does (raises on an outage); given by the client that held them
Writer = Callable[[list[EncodedJob]], None]


class PushBuffer:
    """The jobs held for one Redis, oldest first, and the state of the attempts to send them."""

    def __init__(self, destination: object, write: Writer) -> None:
        self.destination = destination  # keeps the pool alive, so its id stays this buffer's key in ``held``
        self.write = write
        self.jobs: deque[EncodedJob] = deque()
        self.lock = threading.Lock()  # guards jobs
        self.sending = threading.Lock()  # one sender at a time, so the jobs leave in order
        self.started = time.monotonic()
        self.sent = 0
        self.backoff = Backoff(*BACKOFF)
        self.next_attempt = time.monotonic() + self.backoff.first
        self.logged_error = False

    def due(self) -> bool:
        return time.monotonic() >= self.next_attempt

    def send(self, blocking: bool = False, timeout: float = -1) -> bool:
        """Send the held jobs in order, ``CHUNK`` per round trip, until none is left (True) or Redis fails again
        (False: the next attempt is scheduled). Without ``blocking``, returns False at once when another thread
        is sending them (that thread also sends what was added meanwhile)."""
        if not self.sending.acquire(blocking, timeout):
            return False
        try:
            while True:
                with _registry, self.lock:  # emptied and forgotten at once: a push adds to a buffer in ``held``
                    if not self.jobs:
                        self._done()
                        return True
                    chunk = list(islice(self.jobs, CHUNK))
                try:
                    self.write(chunk)
                except NotReplicated as error:  # written to the master: sent, as a direct push that raises it
                    log.warning("reliable push: %s", error)
                except (redis_py.RedisError, OSError) as error:
                    self._failed(error)
                    return False
                with self.lock:
                    for _ in chunk:
                        self.jobs.popleft()
                self.sent += len(chunk)
        finally:
            self.sending.release()

    def _failed(self, error: Exception) -> None:
        if not isinstance(error, UNREACHABLE) and not self.logged_error:  # e.g. OOM at maxmemory: held, retried
            self.logged_error = True
            log.warning("reliable push: Redis refused the held jobs (%s); retrying with backoff", error)
        self.next_attempt = time.monotonic() + self.backoff.next()

    def _done(self) -> None:
        """The buffer is empty (``_registry`` and its lock held): the outage is over for pushes to this Redis. Said
        once: another sender that finds the buffer empty after it was forgotten says nothing."""
        if held.get(_key(self.destination)) is not self:
            return
        del held[_key(self.destination)]
        log.info(
            "reliable push: Redis is back; sent the %d job(s) held during the outage (%.1f s)",
            self.sent,
            time.monotonic() - self.started,
        )


# the buffers holding jobs, by the id of their Redis client's connection pool; empty when nothing is held
held: dict[int, PushBuffer] = {}
_registry = threading.Lock()  # guards ``held`` and the background sender's start


def hold(destination: object, jobs: list[EncodedJob], config: Config, error: Exception, write: Writer) -> bool:
    """A push to ``destination`` (a Redis client) failed with an ``UNREACHABLE`` error (kiq.failures): with
    ``reliable_push`` on, hold its jobs (True) or raise ``PushBufferFull`` past ``reliable_push_limit``; off: False
    (the caller re-raises)."""
    if not config.get("reliable_push"):
        return False
    with _registry:
        buffer = held.get(_key(destination))
        if buffer is not None:
            _add(buffer, jobs, config, error)
            return True
        buffer = PushBuffer(destination, write)
        _add(buffer, jobs, config, error)  # a first push over the limit raises here: no outage begins
        held[_key(destination)] = buffer
        log.warning(
            "reliable push: Redis is unreachable (%s); holding pushes in memory (up to reliable_push_limit = %d "
            "jobs) and sending them when it is back",
            error,
            config.get("reliable_push_limit"),
        )
        _start_sender()
    return True


def behind_held(destination: object, jobs: list[EncodedJob], config: Config, send_now: bool) -> bool:
    """While jobs are held for ``destination``'s Redis, a push goes in behind them (True: held; the caller is done),
    and once an attempt is due they are sent: here when ``send_now`` (a sync push), else by the background
    sender, woken. False: nothing is held for it, the caller writes as usual. A push that would pass the limit while
    another thread sends the held jobs waits for that send (Redis answers again: it may empty the buffer), up to
    SEND_WAIT; it raises ``PushBufferFull`` only when no send is under way (the last one failed)."""
    hung = False  # a send under way outlasted SEND_WAIT: no more waiting
    while True:
        with _registry:  # a buffer in ``held`` is sent to the end by whoever sends it: nothing added to it is left over
            buffer = held.get(_key(destination))
            if buffer is None:
                return False
            try:
                _add(buffer, jobs, config, None)
                break
            except PushBufferFull:
                if hung or not buffer.sending.locked():
                    raise
        hung = not buffer.sending.acquire(timeout=SEND_WAIT)  # the send under way ended: look again
        if not hung:
            buffer.sending.release()
    if buffer.due():
        if send_now:
            buffer.send()
        else:
            _wake.set()
    return True


def _key(destination: object) -> int:
    """A buffer's key in ``held``: its Redis client's connection pool (one Redis, whichever client object)."""
    return id(pool_of(destination))


def _add(buffer: PushBuffer, jobs: list[EncodedJob], config: Config, error: Exception | None) -> None:
    limit = config.get("reliable_push_limit")
    with buffer.lock:
        if len(buffer.jobs) + len(jobs) > limit:
            raise PushBufferFull(
                f"Redis is unreachable and the reliable push buffer holds {len(buffer.jobs)} job(s): {len(jobs)} "
                f"more would pass reliable_push_limit = {limit}; this push was not sent (the held jobs are kept). "
                "Raise reliable_push_limit (KIQ_RELIABLE_PUSH_LIMIT) to hold more during an outage"
            ) from error
        buffer.jobs.extend(jobs)


# -- the background sender: one daemon thread while anything is held ---------------------------------------------
_wake = threading.Event()
_sender: threading.Thread | None = None


def _start_sender() -> None:
    """Start the background sender unless it runs (``_registry`` held)."""
    global _sender
    if _sender is None or not _sender.is_alive():
        _sender = threading.Thread(target=_send_in_background, name="kiq-reliable-push", daemon=True)
        _sender.start()


def _send_in_background() -> None:
    global _sender
    while True:
        with _registry:
            buffers = list(held.values())
            if not buffers:
                _sender = None
                return
        pause = min(buffer.next_attempt for buffer in buffers) - time.monotonic()
        if pause > 0:
            _wake.wait(pause)
        _wake.clear()
        for buffer in buffers:
            if buffer.due():
                buffer.send()


@atexit.register
def _send_at_exit() -> None:
    """One last attempt for each buffer; then every job still held is logged at ERROR as the command that writes
    it, a line per job, to replay by hand (the JSON is the rest of the line after the key, or after the score)."""
    for buffer in list(held.values()):
        keys = keyspace(buffer.destination)
        if buffer.send(blocking=True, timeout=EXIT_WAIT):
            continue
        with buffer.lock:
            lost = list(buffer.jobs)
            buffer.jobs.clear()
        log.error("reliable push: Redis is still unreachable at exit; %d held job(s) were not sent:", len(lost))
        for queue, _, at, data in lost:
            command = f"LPUSH {keys.queue(queue)}" if at is None else f"ZADD {keys.key(SCHEDULE)} {at!r}"
            log.error("reliable push: not sent: %s %s", command, data)


def _forget_in_child() -> None:
    """A forked child does not send its parent's held jobs again: the parent sends them."""
    global _sender
    held.clear()
    _sender = None


os.register_at_fork(after_in_child=_forget_in_child)
