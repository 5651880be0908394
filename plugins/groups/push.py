"""A grouped push: ``MyJob.set(group="acme").perform_async(...)``, or ``kiq_options = {"group": callable}`` computed
from the job's arguments. The client middleware settles and checks the group id; the writer (``kiq_job_writer``)
puts the job into its group's list instead of the queue's, in the push's own round trip."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import kiq
import kiq.ext

from . import scripts
from .keys import check_group
from .source import GROUPED

if TYPE_CHECKING:
    import redis


class GroupClientMiddleware(kiq.ClientMiddleware):
    """A job's ``group`` option: a callable is called with the job's arguments (as they travel: JSON forms) and its
    answer written instead; the id is refused at push unless a non-empty string of at most 256 characters."""

    def call(self, job_class: type[kiq.Job] | str, job: dict[str, Any], queue: str, redis: redis.Redis) -> kiq.Wrapper:
        group = job.get("group")
        if group is not None:
            if callable(group):
                try:
                    group = group(*job["args"], **job.get("kwargs", {}))
                except Exception as exc:
                    raise kiq.InvalidJobError(
                        f"{job['class']}: its group callable {group!r:.80} raised {exc!r:.200}; nothing was pushed"
                    ) from exc
                job["group"] = check_group(group, f"{job['class']}: the group callable's answer")
            else:
                check_group(group, f"{job['class']}: option 'group'")
        yield


class GroupWriter:
    """Writes a job that names a group into that group's list (scripts.PUSH) rather than ``queue:<name>``."""

    def commands(self, queue: str, jid: str, job: str, keys: kiq.ext.Keyspace) -> list[tuple[Any, ...]] | None:
        if GROUPED not in job:  # most jobs: one substring search
            return None
        group = kiq.ext.loads(job).get("group")
        if not isinstance(group, str):  # '"group":' inside the arguments, not the option
            return None
        return [("EVAL", scripts.PUSH.source, 1, *scripts.PUSH.keys(keys, queue), group, jid, job)]
