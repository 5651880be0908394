"""``kiq.IterableJob``: a job that walks an enumerator item by item, saves its cursor, and resumes where it stopped
(Sidekiq 7.3's ``Sidekiq::IterableJob``, lib/sidekiq/job/iterable.rb, with the same Redis state).

A subclass defines ``build_enumerator(self, *args, cursor)``, returning an iterable of ``(item, cursor)`` pairs that
starts at ``cursor`` (None the first time) *including* the item that cursor was yielded with, and
``each_iteration(self, item, *args)``; never ``perform``. The cursor of the item about to run is saved every
``iteration_flush_interval`` seconds (hash ``it-<jid>``, kiq.iteration.state), so a run that ends early resumes
from the last save:

- the worker stopping (quiet or TERM: its stopping flag, kiq.server.interruption), the job's runtime limit
  (``max_iteration_runtime``, or its ``timeout``/``job_timeout``, which do not cut an iterable job off mid-item):
  at the next item boundary the state is saved and ``kiq.errors.Interrupted`` raised; the worker pushes the job
  again without counting a retry;
- an exception in an item: the state is saved first, so the retry starts at that item;
- a crash (kill -9 with reliable fetch): the job runs again from the last save, repeating at most the items of one
  flush interval.

Cancellation (``kiq.cancel(jid)``) is seen when the job starts and at each save: ``on_cancel`` runs and the job
completes. Hooks and their order are Sidekiq's: ``on_start`` (first run) or ``on_resume``, ``around_iteration``
around each item, ``on_cancel``, ``on_stop`` (every run's end), ``on_complete`` (then the state is deleted).

A job whose ``each_iteration`` is an ``async def`` or whose ``build_enumerator`` is an async generator runs on the
worker's event loop; its hooks may then be ``async def`` too.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import ConfigError, Interrupted, Shutdown
from ..job import Job
from ..plan import JobPlan, plan_of
from .walk import walk, walk_async

if TYPE_CHECKING:
    from ..config import Config
    from . import state

log = logging.getLogger("kiq")


class IterableJob(Job, abstract=True):
    """Base class of iterable jobs: define ``build_enumerator`` and ``each_iteration`` (see the module's doc)."""

    # per class; None: the settings of the same names
    iteration_flush_interval: ClassVar[float | None] = None
    max_iteration_runtime: ClassVar[float | None] = None

    # what the worker hands over before the run (interrupt_when)
    _stopping: threading.Event | None = None
    _time_limit: float = 0.0

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        if "perform" in cls.__dict__:
            raise ConfigError(
                f"{cls.__qualname__} is an iterable job and must not define perform: define build_enumerator(self, "
                "*args, cursor) and each_iteration(self, item, *args)"
            )
        super().__init_subclass__(abstract=abstract, **kwargs)

    @classmethod
    def _build_plan(cls, own_options: dict[str, Any]) -> JobPlan:
        """Job's plan, interruptible, with ``around_iteration`` as a context manager (None when not overridden)."""
        around = cls.around_iteration
        wrapped: Callable[[Any], Any] | None
        if getattr(around, "__qualname__", None) == "IterableJob.around_iteration" and around.__module__ == __name__:
            wrapped = None  # not overridden
        elif inspect.isasyncgenfunction(around):
            wrapped = contextlib.asynccontextmanager(around)
        elif inspect.isgeneratorfunction(around):
            wrapped = contextlib.contextmanager(around)
        else:
            raise ConfigError(
                f"{cls.__qualname__}.around_iteration must be a generator that yields once around the item "
                "(def around_iteration(self): ...; yield; ...), or an async one for an async job"
            )
        plan = super()._build_plan(own_options)
        if wrapped is not None and inspect.isasyncgenfunction(around) and not plan.is_async:
            raise ConfigError(f"{cls.__qualname__}.around_iteration is async, so each_iteration must be too")
        return dataclasses.replace(plan, interruptible=True, around_iteration=wrapped)

    @classmethod
    def _perform_function(cls) -> tuple[Callable[..., Any], bool] | None:
        """What a push must give: ``build_enumerator``'s positional parameters (less ``cursor``), so a push with a
        wrong number of arguments is refused at once. Positional only: Sidekiq's jobs take no keyword arguments."""
        build = inspect.getattr_static(cls, "build_enumerator")
        if not inspect.isfunction(build) or build.__qualname__ == "IterableJob.build_enumerator":
            return None
        takes = [
            parameter.replace(kind=inspect.Parameter.POSITIONAL_ONLY, annotation=inspect.Parameter.empty)
            if parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
            else parameter.replace(annotation=inspect.Parameter.empty)
            for parameter in inspect.signature(build).parameters.values()
            if parameter.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
        ]

        def build_enumerator(*args: Any) -> None: ...

        build_enumerator.__signature__ = inspect.Signature(takes)  # type: ignore[attr-defined]
        return build_enumerator, True

    @classmethod
    def _perform_is_async(cls) -> bool:
        return inspect.iscoroutinefunction(cls.each_iteration) or inspect.isasyncgenfunction(cls.build_enumerator)

    def __init__(self) -> None:
        self._executions = 0
        self._cursor: Any = None
        self._runtime: float = 0  # an int until a run ended: Sidekiq writes "0", then a float
        self._cancelled = False
        self._started = 0.0
        self.arguments: tuple[Any, ...] = ()
        # the last item handed out; kept after the walk, for on_stop/on_complete
        self.current_object: Any = None

    # -- what a subclass defines ------------------------------------------------------------------------
    # typed (*args, **kwargs), which mypy takes as "any signature", so a subclass declares its own arguments
    def build_enumerator(self, *args: Any, **kwargs: Any) -> Any:
        """``build_enumerator(self, *args, cursor)``: the ``(item, cursor)`` pairs to walk, from ``cursor`` on (None:
        from the start); None skips the job."""
        raise NotImplementedError(f"{type(self).__qualname__} must define build_enumerator(self, *args, cursor)")

    def each_iteration(self, *args: Any, **kwargs: Any) -> Any:
        """``each_iteration(self, item, *args)``: one item's work."""
        raise NotImplementedError(f"{type(self).__qualname__} must define each_iteration(self, item, *args)")

    def on_start(self) -> Any:
        """The first run starts (after build_enumerator)."""

    def on_resume(self) -> Any:
        """A later run starts (after an interruption, a retry or a crash)."""

    def on_stop(self) -> Any:
        """Each run ends: completed, cancelled or interrupted (not when an item raised)."""

    def on_cancel(self) -> Any:
        """The job was found cancelled (at its start or at a save); on_stop and on_complete follow."""

    def on_complete(self) -> Any:
        """The walk ended (or the job was cancelled); the state is deleted after it."""

    def around_iteration(self) -> Iterator[None]:
        """Override with a generator that yields once: its code runs around each item (metrics, a transaction)."""
        yield

    # -- what a job can ask ---------------------------------------------------------------------------------
    @property
    def cursor(self) -> Any:
        """The cursor of the item being processed (the last saved one before the walk starts)."""
        return self._cursor

    def cancelled(self) -> bool:
        """True once this run saw the job cancelled."""
        return self._cancelled

    def interrupt_when(self, stopping: threading.Event | None, time_limit: float = 0.0) -> None:
        """Stop at the next item boundary once ``stopping`` is set or this run has taken ``time_limit`` seconds (0:
        no limit), saving the cursor: what the worker tells the job before its run (kiq.server.interruption, its
        stopping flag and the job's ``timeout``); a test may call it to drive a job in-process."""
        self._stopping = stopping
        self._time_limit = time_limit

    def perform(self, *args: Any) -> Any:
        if plan_of(type(self)).is_async:
            return walk_async(self, args)
        walk(self, args)
        return None

    # -- shared by the sync and asyncio walks -----------------------------------------------------------------
    def _begin(self, saved: state.IterationState | None, args: tuple[Any, ...]) -> None:
        self.arguments = args
        if saved is not None:
            self._executions, self._cursor, self._runtime = saved.executions, saved.cursor, saved.runtime
            self._cancelled = saved.cancelled
        self._executions += 1
        self._started = time.monotonic()

    def _limits(self, config: Config) -> tuple[float, float]:
        """(seconds between saves, monotonic time this run stops at or 0) from the class and the settings."""
        interval = self.iteration_flush_interval
        limits = [self.max_iteration_runtime, self._time_limit]
        if self.max_iteration_runtime is None:
            limits[0] = config.max_iteration_runtime
        runtime_limit = min((limit for limit in limits if limit), default=0.0)
        return (
            config.iteration_flush_interval if interval is None else interval,
            self._started + runtime_limit if runtime_limit else 0.0,
        )

    def _progress(self) -> tuple[int, Any, float]:
        return self._executions, self._cursor, self._runtime

    def _ran(self) -> None:
        self._runtime += time.monotonic() - self._started

    def _was_cancelled(self) -> None:
        self._cancelled = True
        log.info("Job cancelled: %s jid=%s at cursor %.200r", type(self).__qualname__, self.jid, self._cursor)

    def _interrupted(self, save: Callable[[], object] | None = None) -> Interrupted:
        log.info(
            "Interrupting %s jid=%s at cursor %.200r (run %d, %.1f s so far): it is pushed again to resume there",
            type(self).__qualname__, self.jid, self._cursor, self._executions, self._runtime,
        )  # fmt: skip
        return Interrupted(f"{type(self).__qualname__} interrupted at cursor {self._cursor!r:.200}", save)

    def _failed_item(self, item: Any, exc: BaseException) -> None:
        # the hard shutdown of a stop that outlasted the item: Shutdown in a thread, a cancelled task on the loop
        if isinstance(exc, Shutdown | asyncio.CancelledError):
            log.warning(
                "%s jid=%s was stopped by the worker's shutdown in the middle of item %.200r (cursor %.200r): "
                "it resumes from its last saved cursor",
                type(self).__qualname__, self.jid, item, self._cursor,
            )  # fmt: skip
