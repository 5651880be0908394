"""Job groups: fair scheduling inside a queue (``plugins = ["groups"]``; docs/plugins/groups.md).

``MyJob.set(group="acme").perform_async(...)`` (or ``kiq_options = {"group": lambda account, *_: account}``) puts the
job into its group; the workers take a queue's jobs round-robin over the groups with ready work (its ungrouped jobs
one more member), oldest first within a group, and never run more of a group at once than its concurrency
(``group_concurrency``, or ``kiq.Queue(q).group(g).concurrency``), over every worker. A group at its limit or paused
is skipped when a worker fetches: no thread is taken, nothing is rescheduled.
"""

from .group import Group
from .plugin import GroupsPlugin

__all__ = ["Group", "GroupsPlugin"]
