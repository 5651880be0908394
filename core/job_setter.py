"""A job class's pushes with options: ``Job.set(queue="low").perform_async(...)`` (``JobSetter``), their asyncio
form (``AsyncJobSetter``), and ``kiq.Call``, one job's arguments for ``perform_bulk``."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .client import Client
from .config import config_or_default
from .errors import ConfigError, InvalidJobError
from .job_options import check_job_options
from .payload import finite_seconds
from .plan import plan_of
from .signature import Signature

if TYPE_CHECKING:
    from .async_client import AsyncClient
    from .config import Config
    from .job import Job


def _due(when: object, what: str) -> float:
    """When a scheduled push runs, as epoch seconds: an aware datetime; a timedelta from now; or Sidekiq's rule
    for a number, seconds from now below 1e9, else an epoch timestamp."""
    if isinstance(when, datetime.datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise InvalidJobError(
                f"{what} is a naive datetime ({when.isoformat()}, no tzinfo): it names no instant, and the workers "
                "may run in another time zone; pass an aware one, e.g. datetime.now(timezone.utc) + timedelta(hours=1)"
            )
        return when.timestamp()
    if isinstance(when, datetime.timedelta):
        return time.time() + finite_seconds(when.total_seconds(), what)
    seconds = finite_seconds(when, what)
    return seconds if seconds >= 1_000_000_000 else time.time() + seconds


class JobSetter:
    """A job class with options for the next push (what ``Job.set`` returns)."""

    def __init__(self, job_class: type[Job], options: dict[str, Any]) -> None:
        options = dict(options)
        self._config: Config | None = options.pop("config", None)
        self._shard: str | None = options.pop("shard", None)  # where the push goes; not written into the job
        if self._shard is not None and not (isinstance(self._shard, str) and self._shard):
            raise ConfigError(f"{job_class.__qualname__}: shard must be a shard's name, got {self._shard!r:.80}")
        check_job_options(options, job_class.__qualname__)
        self.job_class = job_class
        self.options = options

    def set(self, **options: Any) -> JobSetter:
        merged = {**self.options, **options}
        if self._config is not None:
            merged.setdefault("config", self._config)
        if self._shard is not None:
            merged.setdefault("shard", self._shard)
        return JobSetter(self.job_class, merged)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """``Job.s`` with these options."""
        return Signature(self.job_class, args, kwargs, self._options())

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """``Job.si`` with these options."""
        return Signature(self.job_class, args, kwargs, self._options(), immutable=True)

    def _options(self) -> dict[str, Any]:
        """The options as ``set`` took them (``config`` and ``shard`` too): a signature keeps them all."""
        kept = {"config": self._config, "shard": self._shard}
        return {**self.options, **{key: value for key, value in kept.items() if value is not None}}

    def perform_async(self, *args: Any, **kwargs: Any) -> str | None:
        return self._client().push(self._item(args, kwargs))

    def perform_in(self, interval: float | datetime.timedelta, /, *args: Any, **kwargs: Any) -> str | None:
        return self._client().push(self._scheduled(_due(interval, "perform_in's interval"), args, kwargs))

    def perform_at(self, timestamp: float | datetime.datetime, /, *args: Any, **kwargs: Any) -> str | None:
        return self._client().push(self._scheduled(_due(timestamp, "perform_at's timestamp"), args, kwargs))

    def perform_bulk(self, args: Iterable[list[Any] | Call], batch_size: int = 1000) -> list[str | None]:
        return self._client().push_bulk(self._bulk(args), batch_size=batch_size)

    def encode_arguments(
        self, args: Iterable[Any], kwargs: dict[str, Any] | None = None
    ) -> tuple[list[Any], dict[str, Any]]:
        """``args`` and ``kwargs`` in the JSON forms a push writes them in (typed values converted by ``perform``'s
        annotations, refused with the parameter's name if they do not fit): for a plugin that keeps a job's arguments
        before pushing it."""
        job: dict[str, Any] = {"args": list(args), "kwargs": dict(kwargs or {})}
        plan = plan_of(self.job_class).arguments
        if plan is not None:
            plan.encode(job)
        return job["args"], job["kwargs"]

    @property
    def aio(self) -> AsyncJobSetter:
        """These pushes for asyncio code: ``await MyJob.set(queue="low").aio.perform_async(...)``."""
        return AsyncJobSetter(self)

    def _scheduled(self, at: float, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """A push to run at epoch ``at`` (``_due``)."""
        item = self._item(args, kwargs)
        if at > time.time():  # due already: push straight to the queue, as Sidekiq does
            item["at"] = at
        return item

    def _bulk(self, args: Iterable[list[Any] | Call]) -> dict[str, Any]:
        item = self._item((), {})
        all_args: list[list[Any]] = []
        all_kwargs: list[dict[str, Any]] = []
        for job_args in args:
            if isinstance(job_args, Call):
                all_args.append(list(job_args.args))
                all_kwargs.append(job_args.kwargs)
            else:
                all_args.append(list(job_args))
                all_kwargs.append({})
        item["args"] = all_args
        if any(all_kwargs):  # else the item is what it was before keyword arguments existed
            item["kwargs"] = all_kwargs
        return item

    def _item(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        item = {**self.options, "class": self.job_class, "args": list(args)}  # the client merges the class's options
        if kwargs:
            item["kwargs"] = kwargs
        return item

    def _client(self) -> Client:
        if self._shard is None:
            return Client(self._config)
        config = config_or_default(self._config)  # its middleware, the shard's Redis (Sidekiq's Client.via)
        return Client(config, redis=config.for_shard(self._shard).redis)


class AsyncJobSetter:
    """A ``JobSetter``'s pushes as coroutines, written with ``kiq.AsyncClient`` (the same items and checks)."""

    def __init__(self, setter: JobSetter) -> None:
        self.setter = setter

    async def perform_async(self, *args: Any, **kwargs: Any) -> str | None:
        return await self._client().push(self.setter._item(args, kwargs))

    async def perform_in(self, interval: float | datetime.timedelta, /, *args: Any, **kwargs: Any) -> str | None:
        at = _due(interval, "perform_in's interval")
        return await self._client().push(self.setter._scheduled(at, args, kwargs))

    async def perform_at(self, timestamp: float | datetime.datetime, /, *args: Any, **kwargs: Any) -> str | None:
        at = _due(timestamp, "perform_at's timestamp")
        return await self._client().push(self.setter._scheduled(at, args, kwargs))

    async def perform_bulk(self, args: Iterable[list[Any] | Call], batch_size: int = 1000) -> list[str | None]:
        return await self._client().push_bulk(self.setter._bulk(args), batch_size=batch_size)

    def _client(self) -> AsyncClient:
        from .async_client import AsyncClient, async_redis  # loaded by the first asyncio push

        shard = self.setter._shard
        if shard is None:
            return AsyncClient(self.setter._config)
        config = config_or_default(self.setter._config)
        return AsyncClient(config, redis=async_redis(config.for_shard(shard)))


class Call:
    """One job's arguments for ``perform_bulk``: ``MyJob.perform_bulk([kiq.Call(7, amount=5), [8]])`` pushes
    ``perform(7, amount=5)`` and ``perform(8)``. A plain list is positional arguments, as before."""

    __slots__ = ("args", "kwargs")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        self.kwargs = kwargs

    def __repr__(self) -> str:
        shown = [repr(arg) for arg in self.args] + [f"{key}={value!r}" for key, value in self.kwargs.items()]
        return f"Call({', '.join(shown)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Call) and (self.args, self.kwargs) == (other.args, other.kwargs)

    __hash__ = None  # type: ignore[assignment]  # holds dicts
