"""A worker's start-up check: registered job classes whose queue none of its capsules serves.

Such a class's jobs wait in Redis until some worker serving the queue runs; when none does (a ``-q`` forgotten in a
deployment, a typo in ``kiq_options``), nothing else ever says so. One WARNING per class, at start; a job pushed
with ``set(queue=...)`` elsewhere is not known here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ..fetcher import Capsule
from ..job_registry import JobRegistry, registry

log = logging.getLogger("kiq")


def warn_about_unserved_queues(capsules: Iterable[Capsule], jobs: JobRegistry = registry) -> list[str]:
    """Log one WARNING for each registered class whose default queue is not among the capsules' queues; returns
    those classes' wire names."""
    served = sorted({name for capsule in capsules for name, _ in capsule.queues})
    unserved = []
    for name in jobs.names():
        get_options = getattr(jobs.find(name), "get_options", None)
        queue = get_options().get("queue") if get_options is not None else None
        if isinstance(queue, str) and queue not in served:
            unserved.append(name)
            log.warning(
                "job %s goes to queue %r, which this worker does not serve (its queues: %s): those jobs wait until a "
                "worker with -q %s runs; add the queue, or ignore this if another worker serves it",
                name, queue, ", ".join(served), queue,
            )  # fmt: skip
    return unserved
