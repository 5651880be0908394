"""The groups' ``kiq.ext.JobSource``: a fetcher of a capsule takes its jobs round-robin over each queue's groups
(scripts.POP), the queue's ungrouped jobs one more member of the rotation, each group under its concurrency."""

from __future__ import annotations

from typing import Any

import kiq
import kiq.ext

from . import scripts
from .keys import wake_key
from .leases import Leases

GROUPED = '"group":'  # in a job's JSON only where it names a group (a string holding it has its quotes escaped)


class GroupSource:
    """The job source of one capsule's fetcher (``kiq_job_source``): the slots its fetches lease are the process's
    (``Leases``), released as their jobs end."""

    def __init__(self, config: kiq.Config, leases: Leases) -> None:
        self.keys = kiq.ext.keyspace(config.redis)
        self.default: int = config.get("group_concurrency")
        self.leases = leases

    def pop(
        self, connection: Any, queues: list[str], wanted: int, into: list[str] | None = None
    ) -> list[kiq.ext.Fetched]:
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
            key, count = reply[at], reply[at + 1]
            if key == "":  # the slots leased, (queue key, slot) pairs
                for pair in range(at + 2, at + 2 + count, 2):
                    self.leases.hold(self.keys.queue_name(reply[pair]), reply[pair + 1])
                break
            name = self.keys.queue_name(key)
            jobs += [(name, job) for job in reply[at + 2 : at + 2 + count]]
            at += 2 + count
        return jobs

    def block(
        self, connection: Any, queues: list[str], timeout: float, into: list[str] | None = None
    ) -> list[kiq.ext.Fetched]:
        """Wait for new group work (a wake token) or, without ``into``, a job pushed to a queue's own list. With
        ``into`` (a reliable fetcher) only the tokens: a job a blocking pop took would be nowhere but here, so an
        ungrouped push wakes it at the end of ``timeout``."""
        wakes = [wake_key(self.keys, queue) for queue in queues]
        lists = [] if into is not None else [self.keys.queue(queue) for queue in queues]
        popped: list[str] | None = connection.command("BRPOP", *lists, *wakes, timeout)
        if not popped or popped[0] in wakes:
            return []
        queue, job = self.keys.queue_name(popped[0]), popped[1]
        if (
            GROUPED in job
            and connection.script(scripts.REROUTE.source, scripts.REROUTE.keys(self.keys, queue), [job]) == 1
        ):
            return []  # a grouped job put back where it waits its group's turn
        return [(queue, job)]
