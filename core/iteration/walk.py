"""The walk of an iterable job (kiq.iteration.job): item after item, saving the cursor every flush interval and
stopping between two items when the worker stops, the run's time is up or the job was cancelled; a sync walk for a
processor thread and an asyncio one for the event loop, with the same steps (Sidekiq's ``perform`` and
``iterate_with_enumerator``, lib/sidekiq/job/iterable.rb)."""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..async_client import async_redis
from ..config import config_or_default
from . import state

if TYPE_CHECKING:
    from .job import IterableJob

log = logging.getLogger("kiq")


class _Pace:
    """When a walk saves its state and when it stops, checked before each item."""

    __slots__ = ("deadline", "flushed_at", "interval", "ran_one", "stop_timeout", "stopping")

    def __init__(self, job: IterableJob) -> None:
        config = config_or_default(None)
        self.interval, self.deadline = job._limits(config)  # the deadline is monotonic; 0: none
        self.stopping: threading.Event | None = job._kiq_stopping
        self.stop_timeout = config.timeout
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


def walk(job: IterableJob, args: tuple[Any, ...]) -> None:
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
    pace = _Pace(job)
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
            _save_quietly(job, redis)
            raise
        pace.item_took(job, item, now)
    return True


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
    pace = _Pace(job)
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
    """``_save_quietly`` for the event loop."""
    try:
        await state.aflush(redis, job.jid, *job._progress())
    except Exception as exc:
        log.warning("%s jid=%s: its cursor could not be saved (%s)", type(job).__qualname__, job.jid, exc)
