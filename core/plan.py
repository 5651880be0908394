"""A job class's plan: what kiq reads once, when the class is defined, for every push and run of its jobs.

``kiq.Job.__init_subclass__`` builds one ``JobPlan`` per class (from its ``kiq_options``, its ``perform``'s signature
and annotations, and the iteration hooks of a ``kiq.IterableJob``); the client, the worker and the iteration engine
read it with ``plan_of(job_class)``: one attribute lookup, on the path of every push and every run. A subclass gets
its own plan, built over its base's (options are inherited, as Sidekiq's ``sidekiq_options`` are).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .arguments import ArgumentPlan
    from .arity import Arity
    from .returns import ResultType


@dataclass(frozen=True, slots=True)
class JobPlan:
    """What a job class's pushes and runs need to know, found once. Its dicts are shared: read them, never change
    them. ``JobPlan()`` is the plan of a class kiq knows nothing of: no options, nothing checked, run in a thread."""

    # the class's options merged with its bases' over Sidekiq's defaults (get_options adds default_job_options)
    options: dict[str, Any] = field(default_factory=dict)
    declared_options: dict[str, Any] = field(default_factory=dict)  # the class's and its bases' kiq_options alone
    arity: Arity | None = None  # what a push must give perform (kiq.arity); None: not checked
    arguments: ArgumentPlan | None = None  # how its typed parameters convert (kiq.arguments); None: none do
    result: ResultType | None = None  # how its return value converts (kiq.returns); None: no return annotation
    is_async: bool = False  # perform is an async def: the worker awaits it on its event loop
    # stops itself between items when the worker stops or its time limit passes (kiq.server.interruption)
    interruptible: bool = False
    around_iteration: Callable[[Any], Any] | None = None  # an iterable job's around_iteration as a context manager


_UNKNOWN = JobPlan()


def plan_of(job_class: type) -> JobPlan:
    """The plan of ``job_class`` (a ``kiq.Job`` subclass): its options, what its ``perform`` takes, whether it is
    async or interruptible. ``JobPlan()`` for any other class."""
    return getattr(job_class, "_kiq_plan", _UNKNOWN)


def set_plan(job_class: type, plan: JobPlan) -> None:
    """Give ``job_class`` its plan (``kiq.Job.__init_subclass__`` does, once per class)."""
    job_class._kiq_plan = plan  # type: ignore[attr-defined]
