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

import contextlib
import inspect
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from ..async_client import async_redis
from ..config import config_or_default
from ..errors import ConfigError, Interrupted, Shutdown
from ..job import Job
from . import state

if TYPE_CHECKING:
    from ..config import Config

log = logging.getLogger("kiq")


class IterableJob(Job, abstract=True):
    """Base class of iterable jobs: define ``build_enumerator`` and ``each_iteration`` (see the module's doc)."""

    _kiq_interruptible = True
    # per class; None: the settings of the same names
    iteration_flush_interval: ClassVar[float | None] = None
    max_iteration_runtime: ClassVar[float | None] = None
    _kiq_around: ClassVar[Callable[[Any], Any] | None] = None  # around_iteration as a context manager, if defined

    # given by the worker before the run (kiq.server.interruption); a test may set them to drive a job in-process
    _kiq_stopping: threading.Event | None = None
    _kiq_time_limit: float = 0.0

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        if "perform" in cls.__dict__:
            raise ConfigError(
                f"{cls.__qualname__} is an iterable job and must not define perform: define build_enumerator(self, "
                "*args, cursor) and each_iteration(self, item, *args)"
            )
        around = cls.around_iteration
        if around is IterableJob.around_iteration:
            cls._kiq_around = None
        elif inspect.isasyncgenfunction(around):
            cls._kiq_around = contextlib.asynccontextmanager(around)
        elif inspect.isgeneratorfunction(around):
            cls._kiq_around = contextlib.contextmanager(around)
        else:
            raise ConfigError(
                f"{cls.__qualname__}.around_iteration must be a generator that yields once around the item "
                "(def around_iteration(self): ...; yield; ...), or an async one for an async job"
            )
        super().__init_subclass__(abstract=abstract, **kwargs)
        if cls._kiq_around is not None and inspect.isasyncgenfunction(around) and not cls._kiq_async:
            raise ConfigError(f"{cls.__qualname__}.around_iteration is async, so each_iteration must be too")

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
    def build_enumerator(self, *args: Any, cursor: Any) -> Any:
        """The ``(item, cursor)`` pairs to walk, from ``cursor`` on (None: from the start); None skips the job."""
        raise NotImplementedError(f"{type(self).__qualname__} must define build_enumerator(self, *args, cursor)")

    def each_iteration(self, item: Any, *args: Any) -> Any:
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

    def perform(self, *args: Any) -> Any:
        if self._kiq_async:
            return _walk_async(self, args)
        _walk(self, args)
        return None

    # -- shared by the sync and asyncio walks -----------------------------------------------------------------
    def _begin(self, saved: state.IterationState | None, args: tuple[Any, ...]) -> None:
        self.arguments = args
        if saved is not None:
            self._executions, self._cursor, self._runtime = saved.executions, saved.cursor, saved.runtime
            self._cancelled = saved.cancelled
        self._executions += 1
        self._started = time.monotonic()

    def _pace(self, config: Config) -> _Pace:
        interval = self.iteration_flush_interval
        limits = [self.max_iteration_runtime, self._kiq_time_limit]
        if self.max_iteration_runtime is None:
            limits[0] = config.max_iteration_runtime
        runtime_limit = min((limit for limit in limits if limit), default=0.0)
        return _Pace(
            config.iteration_flush_interval if interval is None else interval,
            self._started + runtime_limit if runtime_limit else 0.0,
            self._kiq_stopping,
            config.timeout,
        )

    def _progress(self) -> tuple[int, Any, float]:
        return self._executions, self._cursor, self._runtime

    def _ran(self) -> None:
        self._runtime += time.monotonic() - self._started

    def _was_cancelled(self) -> None:
        self._cancelled = True
        log.info("Job cancelled: %s jid=%s at cursor %.200r", type(self).__qualname__, self.jid, self._cursor)

    def _interrupted(self) -> Interrupted:
        log.info(
            "Interrupting %s jid=%s at cursor %.200r (run %d, %.1f s so far): it is pushed again to resume there",
            type(self).__qualname__, self.jid, self._cursor, self._executions, self._runtime,
        )  # fmt: skip
        return Interrupted(f"{type(self).__qualname__} interrupted at cursor {self._cursor!r:.200}")

    def _failed_item(self, item: Any, exc: BaseException) -> None:
        if isinstance(exc, Shutdown):  # the hard shutdown of a stop that outlasted the item
            log.warning(
                "%s jid=%s was stopped by the worker's shutdown in the middle of item %.200r (cursor %.200r): "
                "it resumes from its last saved cursor",
                type(self).__qualname__, self.jid, item, self._cursor,
            )  # fmt: skip


class _Pace:
    """When a walk saves its state and when it stops, checked before each item."""

    __slots__ = ("deadline", "flushed_at", "interval", "ran_one", "stop_timeout", "stopping")

    def __init__(self, interval: float, deadline: float, stopping: threading.Event | None, stop_timeout: float) -> None:
        self.interval = interval
        self.deadline = deadline  # monotonic; 0: none
        self.stopping = stopping
        self.stop_timeout = stop_timeout
        self.flushed_at = time.monotonic()
        self.ran_one = False  # a runtime limit interrupts only after one item: each run makes progress

    def check(self, now: float) -> tuple[bool, bool]:
        """(save now, interrupt now) before the next item."""
        interrupt = (self.stopping is not None and self.stopping.is_set()) or (
            self.ran_one and self.deadline != 0.0 and now >= self.deadline
        )
        return interrupt or now - self.flushed_at >= self.interval, interrupt

    def item_took(self, job: IterableJob, item: Any, started: float) -> None:
        self.ran_one = True
        took = time.monotonic() - started
        if took > self.stop_timeout:
            log.warning(
                "An iteration of %s jid=%s took %.2f s, longer than the worker's stop timeout (%g s), on item %.200r "
                "(cursor %.200r): a stop meanwhile requeues the job and it repeats this item",
                type(job).__qualname__, job.jid, took, self.stop_timeout, item, job.cursor,
            )  # fmt: skip


def _pair(entry: Any, job: IterableJob) -> tuple[Any, Any]:
    if type(entry) is tuple and len(entry) == 2:
        return entry
    raise TypeError(
        f"{type(job).__qualname__}.build_enumerator must yield (item, cursor) pairs, got {entry!r:.100}; "
        "e.g. yield row, row.id"
    )


def _iterator(enumerator: Any, job: IterableJob) -> Iterator[Any]:
    try:
        return iter(enumerator)
    except TypeError:
        raise TypeError(
            f"{type(job).__qualname__}.build_enumerator must return an iterable of (item, cursor) pairs (a generator, "
            f"a list...), got {enumerator!r:.100}"
        ) from None


def _walk(job: IterableJob, args: tuple[Any, ...]) -> None:
    redis = config_or_default(None).redis
    job._begin(state.read(redis, job.jid), args)
    enumerator = job.build_enumerator(*args, cursor=job._cursor)
    if enumerator is None:
        log.info("%s.build_enumerator returned None: the job is skipped", type(job).__qualname__)
        return
    items = _iterator(enumerator, job)
    job.on_start() if job._executions == 1 else job.on_resume()
    try:
        completed = _iterate(job, items, args, redis)
    finally:
        job._ran()
    job.on_stop()
    if not completed:
        state.flush(redis, job.jid, *job._progress())
        raise job._interrupted()
    job.on_complete()
    state.clear(redis, job.jid)


def _iterate(job: IterableJob, items: Iterator[Any], args: tuple[Any, ...], redis: Any) -> bool:
    """Walk the items; True when the walk ended or the job was cancelled, False when it must stop here."""
    if job._cancelled:
        job._was_cancelled()
        job.on_cancel()
        return True
    pace = job._pace(config_or_default(None))
    around = type(job)._kiq_around
    each = job.each_iteration
    for entry in items:
        item, job._cursor = _pair(entry, job)
        job.current_object = item
        now = time.monotonic()
        save, interrupt = pace.check(now)
        if save:
            cancelled = state.flush(redis, job.jid, *job._progress())
            pace.flushed_at = time.monotonic()
            if cancelled:
                job._was_cancelled()
                job.on_cancel()
                return True
            if interrupt:
                return False
        try:
            if around is None:
                each(item, *args)
            else:
                with around(job):
                    each(item, *args)
        except BaseException as exc:
            job._failed_item(item, exc)
            _save_quietly(lambda: state.flush(redis, job.jid, *job._progress()), job)
            raise
        pace.item_took(job, item, now)
    return True


def _save_quietly(save: Callable[[], object], job: IterableJob) -> None:
    """Save before re-raising an item's error; if Redis refuses, the item's error is still the one raised."""
    try:
        save()
    except Exception as exc:
        log.warning("%s jid=%s: its cursor could not be saved (%s)", type(job).__qualname__, job.jid, exc)


async def _maybe(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


async def _walk_async(job: IterableJob, args: tuple[Any, ...]) -> None:
    redis = async_redis(config_or_default(None))
    job._begin(await state.aread(redis, job.jid), args)
    enumerator = await _maybe(job.build_enumerator(*args, cursor=job._cursor))
    if enumerator is None:
        log.info("%s.build_enumerator returned None: the job is skipped", type(job).__qualname__)
        return
    items = enumerator if hasattr(enumerator, "__aiter__") else _as_async(_iterator(enumerator, job))
    await _maybe(job.on_start() if job._executions == 1 else job.on_resume())
    try:
        completed = await _iterate_async(job, items.__aiter__(), args, redis)
    finally:
        job._ran()
    await _maybe(job.on_stop())
    if not completed:
        await state.aflush(redis, job.jid, *job._progress())
        raise job._interrupted()
    await _maybe(job.on_complete())
    await state.aclear(redis, job.jid)


async def _as_async(items: Iterator[Any]) -> AsyncIterator[Any]:
    for entry in items:
        yield entry


async def _iterate_async(job: IterableJob, items: AsyncIterator[Any], args: tuple[Any, ...], redis: Any) -> bool:
    """``_iterate`` for the event loop."""
    if job._cancelled:
        job._was_cancelled()
        await _maybe(job.on_cancel())
        return True
    pace = job._pace(config_or_default(None))
    around = type(job)._kiq_around
    async for entry in items:
        item, job._cursor = _pair(entry, job)
        job.current_object = item
        now = time.monotonic()
        save, interrupt = pace.check(now)
        if save:
            cancelled = await state.aflush(redis, job.jid, *job._progress())
            pace.flushed_at = time.monotonic()
            if cancelled:
                job._was_cancelled()
                await _maybe(job.on_cancel())
                return True
            if interrupt:
                return False
        try:
            await _run_item(job, around, item, args)
        except BaseException as exc:
            job._failed_item(item, exc)
            await _asave_quietly(job, redis)
            raise
        pace.item_took(job, item, now)
    return True


async def _run_item(job: IterableJob, around: Callable[[Any], Any] | None, item: Any, args: tuple[Any, ...]) -> None:
    if around is None:
        await _maybe(job.each_iteration(item, *args))
        return
    manager = around(job)
    if isinstance(manager, contextlib.AbstractAsyncContextManager):
        async with manager:
            await _maybe(job.each_iteration(item, *args))
    else:
        with manager:
            await _maybe(job.each_iteration(item, *args))


async def _asave_quietly(job: IterableJob, redis: Any) -> None:
    try:
        await state.aflush(redis, job.jid, *job._progress())
    except Exception as exc:
        log.warning("%s jid=%s: its cursor could not be saved (%s)", type(job).__qualname__, job.jid, exc)
