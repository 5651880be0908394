"""Held outcomes: what a worker does with a job's outcome that Redis will not take right now.

A job's outcome is a write (its retry entry, its dead-set entry) followed by its acknowledgement. When Redis is
unreachable or refuses writes (``kiq.failures.TRANSIENT``: a broken connection, maxmemory's ``OOM``, a replica's
``READONLY``, a restart's ``LOADING``, a cluster failing over), the worker does not drop the job: the
``OutcomeKeeper`` (one per worker process, shared by every capsule, processor thread and event loop) holds the
outcome and retries the write with backoff until Redis takes it, then acknowledges the job. With reliable fetch the
job stays in the working list meanwhile, and is handed on (to ``retry`` or ``dead``) as soon as Redis is back; with
basic fetch the worker's memory is the only copy, so a stop waits for it (up to ``timeout``) and then logs each held
job at ERROR in a line that can be replayed.

While anything is held, the processors fetch nothing (``held`` is read before each fetch: a plain int, so the hot
path pays nothing): a worker whose outcomes Redis refuses takes no more jobs out of their queues than it has threads.
The outage is logged by the worker's ``RedisOutage`` (here: once when it begins, once when it ends), not once per
job; the fetch and the heartbeat report their failures to it too.
Writes are retried as they are: a ``ZADD`` of the same member is idempotent, so a write that reached Redis before the
connection broke does no harm when sent again.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..backoff import Backoff
from ..failures import TRANSIENT, describe
from ..held_writes import UNWRITTEN, HeldWrite

if TYPE_CHECKING:
    from ..config import Config
    from ..fetcher import UnitOfWork

log = logging.getLogger("kiq")

BACKOFF = (0.25, 2.0)  # seconds between attempts at the oldest held write: the first pause and the cap (Backoff)
WHERE = "job outcomes"  # the outage's name for this work in the log
# seconds after an outage's end within which a failure is taken for its leftover (a thread's connection that broke
# in it and is used only now), logged only if it lasts longer than this: a new outage is logged then. Likewise, an
# end within this many seconds of the start (a reply already on its way when Redis went away) is confirmed only this
# long after the start, if nothing failed again meanwhile
LEFTOVER = 1.0


class RedisOutage:
    """Shared by a worker's threads so an outage is logged once when it starts and once when it ends. ``where``
    (fetch, heartbeat, job outcomes) tells which work failed; the outage ends when every work that failed during
    it succeeded again (at maxmemory, fetches work while the heartbeat's writes are refused: a fetch does not end
    it). An end within ``LEFTOVER`` s of the start is logged only at that second's end (by a timer), and not at all
    if a failure came meanwhile: a thread whose reply was on its way when Redis stopped succeeds just after
    another's failed, and the outage goes on. ``held`` counts the job outcomes held meanwhile (kiq.server.outcomes),
    told in the closing line."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.down_since: float | None = None
        self._failing: list[str] = []  # the works that failed and have not succeeded since, in order
        self._seen: list[str] = []  # every work that failed during this outage
        self._held = 0
        self._ended = -math.inf  # when the last outage ended (monotonic)
        self._told = True  # whether this outage's start is logged (a leftover's is not, unless it lasts)
        self._ending: float | None = None  # when every work succeeded again, too early to tell: the end to confirm
        self._timer: threading.Timer | None = None  # confirms this outage's early end (one per outage)
        self._lock = threading.Lock()

    def failed(self, exc: BaseException, where: str, note: str = "", held: int = 0) -> None:
        ended = None
        with self._lock:
            now = time.monotonic()
            if self._ending is not None and self.down_since is not None:  # every work succeeded again, early
                if now - self.down_since > LEFTOVER:  # the timer is late: the outage did end
                    ended = self._end(now)
                else:
                    self._ending = None  # it goes on
            self._held += held
            if where not in self._failing:
                self._failing.append(where)
            if where not in self._seen:
                self._seen.append(where)
            tell = True
            if self.down_since is None:
                self.down_since = now
                self._told = now - self._ended > LEFTOVER
                if not self._told:
                    log.debug("Redis failed again just after an outage (%s: %s): taken for its leftover", where, exc)
                    tell = False
            elif self._told or now - self.down_since <= LEFTOVER:
                tell = False
            if tell:
                self._told = True
        self._log(ended)
        if not tell:
            return
        url = self.config.redis_url or f"the embedded server in {self.config.embedded_dir}"
        context = f"Redis at {url} {describe(exc)} ({where}{'; ' + note if note else ''}); retrying with backoff"
        # one line: the message says it all, and a chained traceback of a refused connection helps no one
        self.config.handle_exception(exc, {"context": context}, traceback=False)

    def recovered(self, where: str) -> None:
        with self._lock:
            if where not in self._failing:
                return
            self._failing.remove(where)
            if self._failing or self.down_since is None:
                return
            now = time.monotonic()
            self._ending = now
            if self._told and now - self.down_since <= LEFTOVER:  # too early to tell: confirmed by the timer
                if self._timer is None:
                    self._timer = threading.Timer(self.down_since + LEFTOVER - now, self._confirm, (self.down_since,))
                    self._timer.name = "kiq-outage"
                    self._timer.daemon = True  # a stopping worker does not wait for it
                    self._timer.start()
                return
            ended = self._end(now)
        self._log(ended)

    def _confirm(self, since: float) -> None:
        """The timer's: the early end of the outage that began at ``since`` holds if no failure came since."""
        with self._lock:
            if self.down_since != since or self._ending is None:
                return
            ended = self._end(time.monotonic())
        self._log(ended)

    def _end(self, now: float) -> tuple[list[str], float, int] | None:
        """End this outage (under the lock); what its closing line tells, None for a leftover's (not logged)."""
        assert self.down_since is not None and self._ending is not None
        lasted = self._ending - self.down_since
        seen, held = self._seen, self._held
        self.down_since = self._ending = None
        self._seen, self._held = [], 0
        self._ended = now
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return (seen, lasted, held) if self._told else None  # a leftover's start was not logged, nor is its end

    @staticmethod
    def _log(ended: tuple[list[str], float, int] | None) -> None:
        if ended is not None:
            seen, lasted, held = ended
            written = f"; {held} job outcomes held meanwhile are written" if held else ""
            log.info("Redis works again (%s) after %.1f s%s", ", ".join(seen), lasted, written)


class Outcome:
    """A held outcome: the write still to make (None once made), then the acknowledgement of ``unit``."""

    __slots__ = ("acknowledge", "command", "unit", "write")

    def __init__(self, write: Callable[[], object] | None, command: list[str] | None, unit: UnitOfWork,
                 acknowledge: Callable[[UnitOfWork], None]) -> None:  # fmt: skip
        self.write = write
        self.command = command
        self.unit = unit
        self.acknowledge = acknowledge

    def settle(self) -> None:
        if self.write is not None:
            self.write()
            self.write = None  # made: a refused acknowledgement does not repeat it
        self.acknowledge(self.unit)

    def replay_line(self) -> str:
        """The ERROR line for an outcome given up at a stop: the job's full payload, and the command that writes
        it (with basic fetch this line is the job's only copy)."""
        unit = self.unit
        if self.command is None:
            what = "finished or recorded, not acknowledged (a reliable fetcher runs it again)"
        elif self.command[0] == "RPUSH":
            what = "a stop could not push it back to its queue"
        else:
            what = f"its {self.command[1]} entry was not written"
        replay = {"queue": unit.queue_name, "payload": unit.job, "command": self.command}
        return f"{UNWRITTEN}: {what}; replay: {json.dumps(replay, separators=(',', ':'))}"


class OutcomeKeeper:
    """The held outcomes of one worker process, written back in order by a thread of their own (started by the
    first one). The first keeper of a config also takes its plugins' writes (``kiq.ext.hold_write``), the refused
    ``kiq_death`` calls among them."""

    def __init__(self, config: Config, outage: RedisOutage) -> None:
        self.config = config
        self.outage = outage
        self.held = 0  # read without the lock before every fetch: an int costs nothing
        self._outcomes: deque[HeldWrite] = deque()
        self._changed = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._closed = False
        if config.plugins.write_keeper is None:
            config.plugins.write_keeper = self

    def hold(self, outcome: HeldWrite, refusal: BaseException) -> None:
        """Keep ``outcome`` until Redis takes it; the first one of an outage is logged (by ``RedisOutage``)."""
        # before the outcome is in: the writer thread must not find it written (and the outage over) before it began
        self.outage.failed(refusal, WHERE, note="fetching pauses until Redis takes them", held=1)
        with self._changed:
            self._outcomes.append(outcome)
            self.held += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kiq-outcomes", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def wait(self, until: Callable[[], bool], timeout: float) -> bool:
        """Wait at most ``timeout`` s until nothing is held or ``until()`` (checked at least every 0.25 s); True
        when nothing is held."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.held and not until() and (remaining := deadline - time.monotonic()) > 0:
                self._changed.wait(min(remaining, BACKOFF[0]))
            return not self.held

    def give_up(self) -> int:
        """A stop ran out of time with Redis still refusing: log each held job's payload at ERROR (one replayable
        line each) and forget them; returns how many there were."""
        with self._changed:
            outcomes, self._outcomes = list(self._outcomes), deque()
            self.held = 0
            self._changed.notify_all()
        for outcome in outcomes:
            log.error("%s", outcome.replay_line())
        return len(outcomes)

    def close(self) -> None:
        """The worker stopped (what it still held was written or given up): the writer thread ends, so a worker run
        in a test's own process leaves no thread behind."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _run(self) -> None:
        backoff = Backoff(*BACKOFF)
        while True:
            with self._changed:
                while not self._outcomes:
                    if self._closed:
                        self._thread = None  # a write held after the stop (a plugin's) starts a writer again
                        return
                    self._changed.wait()
                outcome = self._outcomes[0]
            try:
                outcome.settle()
            except Exception as exc:
                if isinstance(exc, TRANSIENT):
                    time.sleep(backoff.next())
                    continue
                # the write itself is wrong (not an outage): retrying cannot help, so say what is lost and go on
                self.config.handle_exception(exc, {"context": "a held job outcome cannot be written"})
                log.error("%s", outcome.replay_line())
            backoff.reset()
            with self._changed:
                if self._outcomes and self._outcomes[0] is outcome:  # not given up meanwhile
                    self._outcomes.popleft()
                    self.held -= 1
                empty = not self._outcomes
                self._changed.notify_all()
            if empty:
                self.outage.recovered(WHERE)
