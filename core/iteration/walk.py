"""The walk of an iterable job (kiq.iteration.job): item after item, saving the cursor every flush interval and
stopping between two items when the worker stops, the run's time is up or the job was cancelled; a sync walk for a
processor thread and an asyncio one for the event loop, with the same steps (Sidekiq's ``perform`` and
``iterate_with_enumerator``, lib/sidekiq/job/iterable.rb)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..async_client import async_redis
from ..backoff import Backoff
from ..config import config_or_default
from ..failures import TRANSIENT
from ..plan import plan_of
from . import state

if TYPE_CHECKING:
    from .job import IterableJob

log = logging.getLogger("kiq")

CLEAR_BACKOFF = (0.25, 5.0)  # seconds between attempts at deleting a completed job's state while Redis refuses


class _Pace:
    """When a walk saves its state and when it stops, checked before each item."""

    __slots__ = ("deadline", "flushed_at", "interval", "ran_one", "refused", "stop_timeout", "stopping")

    def __init__(self, job: IterableJob) -> None:
        config = config_or_default(None)
        self.interval, self.deadline = job._limits(config)  # the deadline is monotonic; 0: none
        self.stopping: threading.Event | None = job._stopping
        self.stop_timeout = config.timeout
        self.flushed_at = time.monotonic()
        self.ran_one = False  # a runtime limit interrupts only after one item: each run makes progress
        self.refused = False  # Redis refused the last save: the walk goes on, saving again at the next interval

    def check(self, now: float) -> tuple[bool, bool]:
        """(save now, interrupt now) before the next item."""
        interrupt = (self.stopping is not None and self.stopping.is_set()) or (
            self.ran_one and self.deadline != 0.0 and now >= self.deadline
        )
        return interrupt or now - self.flushed_at >= self.interval, interrupt

    def saved(self, job: IterableJob, refusal: BaseException | None) -> None:
        """A save was attempted; an outage is logged once when it begins and once when it ends, not per save."""
        self.flushed_at = time.monotonic()
        if refusal is not None and not self.refused:
            log.warning(
                "%s jid=%s: Redis refused to save its cursor (%s): it walks on and saves again every %g s; a crash "
                "before a save succeeds resumes from the last saved cursor",
                type(job).__qualname__, job.jid, refusal, self.interval,
            )  # fmt: skip
        elif refusal is None and self.refused:
            log.info("%s jid=%s: its cursor is saved again (cursor %.200r)", type(job).__qualname__, job.jid,
                     job.cursor)  # fmt: skip
        self.refused = refusal is not None

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
    if type(entry) in (tuple, list) and len(entry) == 2:
        return entry[0], entry[1]
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


def _build(job: IterableJob, args: tuple[Any, ...]) -> Any:
    """``build_enumerator`` from the saved cursor; if that fails, the error says where the cursor came from (another
    producer may have written a cursor of another shape)."""
    try:
        return job.build_enumerator(*args, cursor=job._cursor)
    except Exception as exc:
        if job._cursor is not None:
            key = state.key_of(config_or_default(None).redis, job.jid)
            exc.add_note(
                f"{type(job).__qualname__}.build_enumerator failed on the cursor {job._cursor!r:.200} saved in "
                f"{key} (field {state.CURSOR}); if it is not a cursor this job yields, delete the "
                "hash to restart the job from the beginning, or write one it yields"
            )
        raise


def walk(job: IterableJob, args: tuple[Any, ...]) -> None:
    redis = config_or_default(None).redis
    job._begin(state.read(redis, job.jid), args)
    enumerator = _build(job, args)
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
        try:
            state.flush(redis, job.jid, *_checked_progress(job))
        except TRANSIENT:
            raise job._interrupted(_held_save(job)) from None
        raise job._interrupted()
    job.on_complete()
    _clear(job, redis)


def _iterate(job: IterableJob, items: Iterator[Any], args: tuple[Any, ...], redis: Any) -> bool:
    """Walk the items; True when the walk ended or the job was cancelled, False when it must stop here."""
    if job._cancelled:
        job._was_cancelled()
        job.on_cancel()
        return True
    pace = _Pace(job)
    around = plan_of(type(job)).around_iteration
    each = job.each_iteration
    for entry in items:
        item, job._cursor = _pair(entry, job)
        job.current_object = item
        now = time.monotonic()
        save, interrupt = pace.check(now)
        if save:
            cancelled = _save(job, redis, pace)
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
            _save_quietly(job, redis)
            raise
        pace.item_took(job, item, now)
    return True


def _checked_progress(job: IterableJob) -> tuple[int, Any, float]:
    """The progress to save; a cursor that cannot be saved is an error naming the job."""
    progress = job._progress()
    try:
        state.encode_cursor(progress[1])
    except TypeError as exc:
        raise TypeError(f"{type(job).__qualname__} jid={job.jid}: {exc}") from None
    return progress


def _save(job: IterableJob, redis: Any, pace: _Pace) -> bool:
    """A periodic save; True when the job was cancelled meanwhile. Redis refusing it (down, out of memory,
    read-only) does not stop the walk: it is logged once and tried again at the next interval."""
    try:
        cancelled = state.flush(redis, job.jid, *_checked_progress(job))
    except TRANSIENT as exc:
        pace.saved(job, exc)
        return False
    pace.saved(job, None)
    return cancelled


def _held_save(job: IterableJob) -> functools.partial[bool]:
    """The save of an interrupted run that Redis refused, for the worker to make before the re-push (it holds both
    until Redis takes them, kiq.server.interruption); a sync write, made from the worker's outcome thread."""
    return functools.partial(state.flush, config_or_default(None).redis, job.jid, *job._progress())


def _clear(job: IterableJob, redis: Any) -> None:
    """Delete the state of a completed job; while Redis refuses, tried again until it takes it or the worker stops
    (then the hash is left to its TTL: the job is not run again for it)."""
    for pause in _clear_attempts(job):
        try:
            state.clear(redis, job.jid)
            return
        except TRANSIENT as exc:
            _clear_refused(job, exc, pause)
        time.sleep(pause)


async def _asave(job: IterableJob, redis: Any, pace: _Pace) -> bool:
    """``_save`` for the event loop."""
    try:
        cancelled = await state.aflush(redis, job.jid, *_checked_progress(job))
    except TRANSIENT as exc:
        pace.saved(job, exc)
        return False
    pace.saved(job, None)
    return cancelled


async def _aclear(job: IterableJob, redis: Any) -> None:
    for pause in _clear_attempts(job):
        try:
            await state.aclear(redis, job.jid)
            return
        except TRANSIENT as exc:
            _clear_refused(job, exc, pause)
        await asyncio.sleep(pause)


def _clear_attempts(job: IterableJob) -> Iterator[float]:
    """The pauses between attempts at deleting the state (the first attempt is made at once): until the worker
    stops."""
    backoff = Backoff(*CLEAR_BACKOFF)
    while True:
        yield backoff.next()
        if job._stopping is None or job._stopping.is_set():
            return


def _clear_refused(job: IterableJob, refusal: BaseException, pause: float) -> None:
    if pause == CLEAR_BACKOFF[0]:
        log.warning(
            "%s jid=%s completed, but Redis refused to delete %s (%s): tried again until it does or the worker stops "
            "(then the hash expires with its TTL)",
            type(job).__qualname__, job.jid, state.key_of(config_or_default(None).redis, job.jid), refusal,
        )  # fmt: skip


def _save_quietly(job: IterableJob, redis: Any) -> None:
    """Save before re-raising an item's error; if Redis refuses, the item's error is still the one raised."""
    try:
        state.flush(redis, job.jid, *job._progress())
    except Exception as exc:
        log.warning("%s jid=%s: its cursor could not be saved (%s)", type(job).__qualname__, job.jid, exc)


async def _maybe(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


async def walk_async(job: IterableJob, args: tuple[Any, ...]) -> None:
    redis = async_redis(config_or_default(None))
    job._begin(await state.aread(redis, job.jid), args)
    enumerator = await _maybe(_build(job, args))
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
        try:
            await state.aflush(redis, job.jid, *_checked_progress(job))
        except TRANSIENT:
            raise job._interrupted(_held_save(job)) from None
        raise job._interrupted()
    await _maybe(job.on_complete())
    await _aclear(job, redis)


async def _as_async(items: Iterator[Any]) -> AsyncIterator[Any]:
    for entry in items:
        yield entry


async def _iterate_async(job: IterableJob, items: AsyncIterator[Any], args: tuple[Any, ...], redis: Any) -> bool:
    """``_iterate`` for the event loop."""
    if job._cancelled:
        job._was_cancelled()
        await _maybe(job.on_cancel())
        return True
    pace = _Pace(job)
    around = plan_of(type(job)).around_iteration
    async for entry in items:
        item, job._cursor = _pair(entry, job)
        job.current_object = item
        now = time.monotonic()
        save, interrupt = pace.check(now)
        if save:
            cancelled = await _asave(job, redis, pace)
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
    """``_save_quietly`` for the event loop."""
    try:
        await state.aflush(redis, job.jid, *job._progress())
    except Exception as exc:
        log.warning("%s jid=%s: its cursor could not be saved (%s)", type(job).__qualname__, job.jid, exc)
