"""The groups' ``kiq.ext.JobSource``: a fetcher of a capsule takes its jobs round-robin over each queue's groups
(scripts.POP), the queue's ungrouped jobs one more member of the rotation, each group under its concurrency."""

from __future__ import annotations

import time
from typing import Any

import kiq
import kiq.ext

from . import scripts
from .keys import wake_key
from .leases import Leases

GROUPED = '"group":'  # in a job's JSON only where it names a group (a string holding it has its quotes escaped)
# seconds a fetcher pops plainly (no script) from queues that had no groups at its last look: a group's first job
# waits that long at most for the next look
LOOK_EVERY = 0.1


class GroupSource:
    """The job source of one capsule's fetcher (``kiq_job_source``): the slots its fetches lease are the process's
    (``Leases``), released as their jobs end."""

    def __init__(self, config: kiq.Config, leases: Leases) -> None:
        self.keys = kiq.ext.keyspace(config.redis)
        self.default: int = config.get("group_concurrency")
        self.leases = leases
        # queues (of one call) -> until when they are popped plainly: they had no groups at the last look
        self._plain_until: dict[tuple[str, ...], float] = {}

    def pop(
        self, connection: Any, queues: list[str], wanted: int, into: list[str] | None = None
    ) -> list[kiq.ext.Fetched]:
        if into is None and time.monotonic() < self._plain_until.get(tuple(queues), 0.0):
            return self._pop_plain(connection, queues, wanted)
        if into is None:
            keys = scripts.POP.keys(self.keys, queues)
        else:  # the fetcher's lists, each after its queue and base
            pairs = scripts.POP.keys(self.keys, queues)
            keys = [key for at, queue in enumerate(into) for key in (pairs[2 * at], pairs[2 * at + 1], queue)]
        reply: list[Any] = connection.script(
            scripts.POP.source, keys, [wanted, self.default, self.leases.lease_ms, 2 if into is None else 3]
        )
        jobs: list[kiq.ext.Fetched] = []
        at = 0
        while at < len(reply):
            key = reply[at]
            if key == "!":  # groups in these queues
                break
            count = reply[at + 1]
            if key == "":  # the slots leased, (queue key, slot) pairs
                for pair in range(at + 2, at + 2 + count, 2):
                    self.leases.hold(self.keys.queue_name(reply[pair]), reply[pair + 1])
                at += 2 + count
                continue
            name = self.keys.queue_name(key)
            jobs += [(name, job) for job in reply[at + 2 : at + 2 + count]]
            at += 2 + count
        if into is None and (not reply or reply[-1] != "!"):
            self._plain_until[tuple(queues)] = time.monotonic() + LOOK_EVERY
        return jobs

    def _pop_plain(self, connection: Any, queues: list[str], wanted: int) -> list[kiq.ext.Fetched]:
        """Queues without groups at the last look: popped as the basic fetcher does; a job among them that names a
        group (requeued, recovered, pushed without the plugin) goes back to its group instead."""
        if len(queues) == 1:
            popped: list[str] | None = connection.command("RPOP", self.keys.queue(queues[0]), wanted)
            jobs = [(queues[0], job) for job in popped or ()]
        else:
            jobs = kiq.ext.popped_jobs(
                connection.script(scripts.PLAIN.source, scripts.PLAIN.keys(self.keys, queues), [wanted]), self.keys
            )
        if any(GROUPED in job for _, job in jobs):
            jobs = [(queue, job) for queue, job in jobs if not self._rerouted(connection, queue, job)]
        return jobs

    def _rerouted(self, connection: Any, queue: str, job: str) -> bool:
        """Whether ``job``, popped from ``queue``'s own list, named a group and went back to its front."""
        if GROUPED not in job:
            return False
        if connection.script(scripts.REROUTE.source, scripts.REROUTE.keys(self.keys, queue), [job]) != 1:
            return False
        self._plain_until.clear()  # that queue has a group now
        return True

    def block(
        self, connection: Any, queues: list[str], timeout: float, into: list[str] | None = None
    ) -> list[kiq.ext.Fetched]:
        """Wait for new group work (a wake token) or, without ``into``, a job pushed to a queue's own list. With
        ``into`` (a reliable fetcher) only the tokens: a job a blocking pop took would be nowhere but here, so an
        ungrouped push wakes it at the end of ``timeout``."""
        wakes = [wake_key(self.keys, queue) for queue in queues]
        lists = [] if into is not None else [self.keys.queue(queue) for queue in queues]
        popped: list[str] | None = connection.command("BRPOP", *lists, *wakes, timeout)
        if not popped:
            return []
        if popped[0] in wakes:
            self._plain_until.clear()  # new group work: look at the groups at the next pop
            return []
        queue, job = self.keys.queue_name(popped[0]), popped[1]
        return [] if self._rerouted(connection, queue, job) else [(queue, job)]
