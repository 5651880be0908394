"""The ``schedule``, ``retry`` and ``dead`` sorted sets (score = epoch seconds, member = job JSON), as Sidekiq's
``ScheduledSet``, ``RetrySet`` and ``DeadSet``, and ``SortedEntry``, one job in them.

An entry is taken out of its set with ``ZREM`` of its exact JSON before anything is done with it, so two
callers acting on the same entry (two admins, or an admin and the poller) never both move it.

``JobSet.search`` looks for a text in a bounded window of entries per call, in score order, and says where a next
call goes on: a search of a set of millions costs each caller (the dashboard's filter) a bounded time, and holds
Redis for a few milliseconds at a time (one script call per ``SEARCH_CHUNK`` entries).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..client import Client
from ..config import config_or_default
from ..errors import KiqError
from ..keys import DEAD, RETRY, SCHEDULE, keyspace, poller_wake
from ..payload import dumps
from ..scripts import lua_script
from ..server import dead
from .records import PAGE_SIZE, JobRecord

if TYPE_CHECKING:
    from ..config import Config


SEARCH_CHUNK = 5_000  # entries one script call reads: a few ms of Redis's time, then other clients get their turn
# One step of a search: the entries from a score bound on (inclusive, ``skip`` of those at the bound already seen),
# in score order; stops after ``chunk`` entries or at the ``limit``-th match. Replies the number of entries looked
# at, the score of the last one and how many entries at that score were looked at so far (where the next step goes
# on), then the matches (member, score).
SEARCH_SCRIPT = lua_script(
    "job_sets.search",
    """
local text, bound, skip, chunk, limit = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local items
if ARGV[6] == '1' then
  items = redis.call('ZREVRANGEBYSCORE', KEYS[1], bound, '-inf', 'WITHSCORES', 'LIMIT', skip, chunk)
else
  items = redis.call('ZRANGEBYSCORE', KEYS[1], bound, '+inf', 'WITHSCORES', 'LIMIT', skip, chunk)
end
local found, matches, last = {}, 0, #items - 1
for i = 1, #items, 2 do
  if string.find(items[i], text, 1, true) then
    found[#found + 1] = items[i]
    found[#found + 1] = items[i + 1]
    matches = matches + 1
    if matches >= limit then
      last = i
      break
    end
  end
end
if last < 1 then
  return {0, bound, skip}
end
local score, ties = items[last + 1], 0
for i = last, 1, -2 do
  if items[i + 1] ~= score then break end
  ties = ties + 1
end
if score == bound then ties = ties + skip end
local reply = {(last + 1) / 2, score, ties}
for i = 1, #found do reply[#reply + 1] = found[i] end
return reply
""",
    lambda keys, name: [keys.key(name)],
)


@dataclass(frozen=True)
class SearchResult:
    """What one ``JobSet.search`` call found: ``entries`` in score order, ``examined`` the number of entries it
    looked at, ``resume`` the ``after`` of the next call (None: it reached the end of the set)."""

    entries: list[SortedEntry]
    examined: int
    resume: str | None


def _scored(result: Any) -> list[tuple[str, float]]:
    """A WITHSCORES reply as (member, score) pairs (redis-py's stubs do not know the shape)."""
    return [(str(member), float(score)) for member, score in result]


def glob_escape(text: str) -> str:
    """``text`` as a literal inside a Redis MATCH pattern."""
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)


class SortedEntry(JobRecord):
    """A job in one of the sorted sets; ``score`` (= ``at``) is when it runs (schedule/retry) or died (dead)."""

    def __init__(self, parent: JobSet, score: float, value: str) -> None:
        super().__init__(value, config=parent.config)
        self.parent = parent
        self.score = score

    @property
    def at(self) -> float:
        return self.score

    @property
    def error(self) -> bool:
        """Whether the job carries failure fields."""
        return "error_class" in self.item

    def delete(self) -> bool:
        """Remove the job from its set; False when it was no longer there."""
        return self.parent.delete_by_value(self.value)

    def reschedule(self, at: float) -> bool:
        """Move the job to a new time (epoch seconds) in the same set."""
        if not self.parent.delete_by_value(self.value):
            return False
        self.config.redis.zadd(self.parent.key, {self.value: float(at)})
        self.parent.wake_pollers(float(at))
        self.score = float(at)
        return True

    def add_to_queue(self) -> bool:
        """Enqueue the job now (through the client middleware), as the Web UI's "Add to queue"."""
        return self._push(dict(self.item))

    def retry(self) -> bool:
        """Enqueue the job now; its ``retry_count`` is lowered by one because the next failure raises it again."""
        item = dict(self.item)
        if isinstance(item.get("retry_count"), int):
            item["retry_count"] -= 1
        return self._push(item)

    def kill(self) -> bool:
        """Move the job to the dead set (the death hooks run, as for Sidekiq's "Kill")."""
        if not self.parent.delete_by_value(self.value):
            return False
        dead.kill(self.config, self.value)
        return True

    def _push(self, item: dict[str, Any]) -> bool:
        if not self.parsed:
            raise KiqError(f"the job in {self.parent.name} is not valid JSON and can only be deleted: {self.value!r}")
        if not self.parent.delete_by_value(self.value):
            return False
        item.pop("at", None)  # a leftover "at" would send it straight back to the schedule
        try:
            Client(self.config).push(item)
        except BaseException:
            self.config.redis.zadd(self.parent.key, {self.value: self.score})  # not lost: put it back
            raise
        return True


class JobSet:
    """One of the sorted sets of jobs. Iterates newest (highest score) first, as Sidekiq does."""

    name: ClassVar[str]  # the set's name (``schedule``, ``retry``, ``dead``); its key on a Redis is ``key``

    def __init__(self, config: Config | None = None) -> None:
        self.config = config_or_default(config)

    @property
    def key(self) -> str:
        """The set's key on this config's Redis (``kiq.ext.Keyspace.key``)."""
        return keyspace(self.config.redis).key(self.name)

    @property
    def size(self) -> int:
        return int(self.config.redis.zcard(self.key))

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[SortedEntry]:
        # pages of 50 from the top; when entries are removed meanwhile (e.g. by the caller, while iterating),
        # the next page starts that much higher so no entry is skipped
        redis = self.config.redis
        initial_size = self.size
        offset = 0
        page = -1
        while True:
            start = page * PAGE_SIZE + offset
            end = min(start + PAGE_SIZE - 1, -1)
            elements = _scored(redis.zrange(self.key, start, end, withscores=True))
            if not elements:
                return
            page -= 1
            for value, score in reversed(elements):
                yield SortedEntry(self, score, value)
            offset = initial_size - self.size

    def page(self, start: int, count: int, newest_first: bool = True) -> list[SortedEntry]:
        """``count`` entries from position ``start`` (0: the highest score, or the lowest when not
        ``newest_first``): one ``ZRANGE`` by rank, whatever the set's size."""
        if count <= 0 or start < 0:
            return []
        found = self.config.redis.zrange(self.key, start, start + count - 1, desc=newest_first, withscores=True)
        return [SortedEntry(self, score, value) for value, score in _scored(found)]

    def clear(self) -> int:
        """Remove every job; returns how many there were."""
        pipe = self.config.redis.pipeline(transaction=True)
        pipe.zcard(self.key)
        pipe.unlink(self.key)
        return int(pipe.execute()[0])

    def scan(self, match: str) -> Iterator[SortedEntry]:
        """Entries whose JSON contains ``match`` (ZSCAN, so a large set is not loaded at once)."""
        pairs = self.config.redis.zscan_iter(self.key, match=f"*{glob_escape(match)}*", count=100)
        for value, score in _scored(pairs):
            yield SortedEntry(self, score, value)

    def search(
        self, text: str, newest_first: bool = True, after: str | None = None, limit: int = 25, window: int = 100_000
    ) -> SearchResult:
        """The entries whose JSON holds ``text`` (case-sensitive), in score order, looking at no more than ``window``
        entries from ``after`` (a previous result's ``resume``; None: from the first entry) and stopping at the
        ``limit``-th match. A set of any size costs one call at most ``window`` entries' work; entries added or
        removed between calls are not skipped nor repeated unless they move across the position reached."""
        bound, skip = _search_start(after, newest_first)
        script = self.config.redis.register_script(SEARCH_SCRIPT.source)
        keys = SEARCH_SCRIPT.keys(keyspace(self.config.redis), self.name)
        entries: list[SortedEntry] = []
        examined = 0
        while examined < window and len(entries) < limit:
            chunk = min(SEARCH_CHUNK, window - examined)
            reply = script(
                keys=keys, args=[text, bound, skip, chunk, limit - len(entries), "1" if newest_first else "0"]
            )
            looked, bound, skip = int(reply[0]), str(reply[1]), int(reply[2])
            examined += looked
            pairs = reply[3:]
            entries += [SortedEntry(self, float(pairs[i + 1]), str(pairs[i])) for i in range(0, len(pairs), 2)]
            if looked < chunk and len(entries) < limit:
                return SearchResult(entries, examined, None)  # the end of the set
        return SearchResult(entries, examined, f"{bound}:{skip}")

    def fetch(self, score: float, jid: str | None = None) -> list[SortedEntry]:
        """The entries with exactly this score (and this jid, when given)."""
        found = _scored(self.config.redis.zrangebyscore(self.key, score, score, withscores=True))
        entries = [SortedEntry(self, s, value) for value, s in found]
        return [entry for entry in entries if jid is None or entry.jid == jid]

    def find_job(self, jid: str) -> SortedEntry | None:
        """The entry of the job with this jid, or None."""
        return next((entry for entry in self.scan(jid) if entry.jid == jid), None)

    def schedule(self, at: float, job: dict[str, Any]) -> None:
        """Add a job payload to this set with score ``at`` (epoch seconds)."""
        self.config.redis.zadd(self.key, {dumps(job): float(at)})
        self.wake_pollers(float(at))

    def wake_pollers(self, at: float) -> None:
        """Tell the workers' pollers that a job of this set (``schedule`` or ``retry``) is due at ``at``."""
        if self.name in (SCHEDULE, RETRY):
            _, channel, message = poller_wake(keyspace(self.config.redis), self.name, at)
            self.config.redis.publish(channel, message)

    def delete_by_value(self, value: str) -> bool:
        """Remove the entry with this exact JSON; False when it was not there."""
        return bool(self.config.redis.zrem(self.key, value))

    def delete_by_jid(self, jid: str) -> bool:
        """Remove the job with this jid; False when there is none."""
        entry = self.find_job(jid)
        return entry is not None and entry.delete()

    def retry_by_jid(self, jid: str) -> bool:
        """Enqueue the job with this jid now; False when there is none."""
        entry = self.find_job(jid)
        return entry is not None and entry.retry()

    def _apply_to_all(self, action: Callable[[SortedEntry], bool]) -> int:
        """Apply ``action`` to the entries present now (oldest first), at most once each; returns the successes.

        Entries that are not valid JSON stay where they are (they can only be deleted).
        """
        remaining = self.size
        kept = done = 0
        redis = self.config.redis
        while remaining > 0:
            last = kept + min(remaining, PAGE_SIZE) - 1
            elements = _scored(redis.zrange(self.key, kept, last, withscores=True))
            if not elements:
                break
            for value, score in elements:
                entry = SortedEntry(self, score, value)
                if not entry.parsed:
                    kept += 1
                elif action(entry):
                    done += 1
            remaining -= len(elements)
        return done


def _search_start(after: str | None, newest_first: bool) -> tuple[str, int]:
    """The score bound and the entries to skip at it where a search goes on (``after``: a ``resume`` value)."""
    if after is None:
        return ("+inf" if newest_first else "-inf"), 0
    bound, _, skip = after.rpartition(":")
    try:
        if math.isnan(float(bound)):
            bound = ""
    except ValueError:
        bound = ""
    if not bound or not skip.isdigit() or len(skip) > 9:
        raise KiqError(f"bad search position {after[:80]!r}: pass the resume value of a previous search, or None")
    return bound, int(skip)


class ScheduledSet(JobSet):
    """Jobs pushed with ``perform_in``/``perform_at``, scored by when they are due."""

    name = SCHEDULE


class RetrySet(JobSet):
    """Failed jobs waiting for their next attempt, scored by when it is due."""

    name = RETRY

    def retry_all(self) -> int:
        """Enqueue every job in the set now; returns how many were enqueued."""
        return self._apply_to_all(SortedEntry.retry)

    def kill_all(self) -> int:
        """Move every job to the dead set; returns how many were moved."""
        return self._apply_to_all(SortedEntry.kill)


class DeadSet(JobSet):
    """Jobs that failed for good, scored by when they died; trimmed by ``dead_timeout`` and ``dead_max_jobs``."""

    name = DEAD

    def retry_all(self) -> int:
        """Enqueue every dead job now; returns how many were enqueued."""
        return self._apply_to_all(SortedEntry.retry)

    def kill(self, jobstr: str, notify_failure: bool = True, exc: BaseException | None = None) -> None:
        """Add a job (raw JSON) to the dead set and trim it; with ``notify_failure`` the death hooks run."""
        if notify_failure:
            dead.kill(self.config, jobstr, exc)
        else:
            dead.bury(self.config, jobstr)
