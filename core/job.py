"""Jobs: the ``Job`` base class and the ``@kiq.job`` decorator for functions; each registers under its wire name
(kiq.job_registry)."""

from __future__ import annotations

import datetime
import functools
import inspect
import math
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, ParamSpec, TypeVar

from . import sink
from .arguments import ArgumentPlan, perform_parameters, plan_for
from .client import Arity, Client, refuse_near_misses
from .config import config_or_default
from .errors import ConfigError, InvalidJobError
from .job_registry import registry, wire_name
from .payload import DEFAULT_OPTIONS, check_options, finite_seconds
from .signature import Signature

if TYPE_CHECKING:
    from .async_client import AsyncClient
    from .config import Config

P = ParamSpec("P")
R = TypeVar("R")


def _is_amount(value: Any) -> bool:
    return (type(value) is int and value >= 0) or (type(value) is float and math.isfinite(value) and value >= 0)


def _is_seconds(value: Any) -> bool:
    return (type(value) is int and 0 < value < 2**53) or (type(value) is float and math.isfinite(value) and value > 0)


# Sidekiq's options and their types, and kiq's check_args and timeout; other options pass through to the payload for
# middleware to read, unless they are a near miss of one of these (or of a plugin's, checked at push)
_OPTION_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "queue": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "retry": (lambda v: isinstance(v, bool) or (isinstance(v, int) and v >= 0), "true, false or a count"),
    "retry_queue": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "retry_for": (lambda v: _is_seconds(v), "seconds > 0"),
    "backtrace": (lambda v: isinstance(v, bool) or (isinstance(v, int) and v > 0), "true, false or a count"),
    "dead": (lambda v: isinstance(v, bool), "true or false"),
    "tags": (lambda v: isinstance(v, list) and all(isinstance(t, str) for t in v), "a list of strings"),
    "check_args": (lambda v: isinstance(v, bool), "true or false"),
    "timeout": (lambda v: v is None or _is_seconds(v), "seconds > 0 (a time limit), or None"),
}


def _check_options(options: dict[str, Any], owner: str) -> None:
    """Refuse options of a type Sidekiq would refuse (ConfigError), then any value that is not native JSON
    (JobArgumentError): options travel in every payload, and the mistake should show where they are written."""
    if not options:  # every perform_async comes here with none
        return
    for key, value in options.items():
        check = _OPTION_CHECKS.get(key)
        if check is None:
            refuse_near_misses((key,), _OPTION_CHECKS, owner)
        elif not check[0](value):
            raise ConfigError(f"{owner}: option {key!r} must be {check[1]}, got {value!r:.80}")
    check_options(options, owner)


_checked_defaults: list[dict[str, Any]] = [{}]  # the default_job_options value last checked


def _default_job_options() -> dict[str, Any]:
    """The default config's ``default_job_options``, checked as kiq_options are when a push first uses a value."""
    defaults: dict[str, Any] = config_or_default(None).get("default_job_options")
    if defaults and defaults is not _checked_defaults[0]:
        _check_options(defaults, "the default_job_options setting")
        _checked_defaults[0] = defaults
    return defaults


def _arity(function: Callable[..., Any], method: bool) -> Arity | None:
    """What arguments ``function`` takes (less its ``self`` when it is a ``method``): pushes are checked against
    it. None when Python cannot tell (a builtin): such a job is not checked."""
    parameters = perform_parameters(function, method)
    if parameters is None:
        return None
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keywords_required = any(p.kind is p.KEYWORD_ONLY and p.default is p.empty for p in parameters)
    fewest = sum(1 for p in positional if p.default is p.empty)
    takes_any = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    shown = ", ".join(str(p.replace(annotation=p.empty)) for p in parameters)
    signature = f"{getattr(function, '__name__', 'perform')}({shown})"
    counts = range(fewest, sys.maxsize if takes_any else len(positional) + 1)
    keyword_only = sys.maxsize  # the position of a parameter only a keyword gives
    by_name = {p.name: index for index, p in enumerate(positional) if p.kind is p.POSITIONAL_OR_KEYWORD}
    by_name |= {p.name: keyword_only for p in parameters if p.kind is p.KEYWORD_ONLY}
    required = tuple(
        (p.name, positional.index(p) if p in positional else keyword_only)
        for p in parameters
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    )
    any_keyword = any(p.kind is p.VAR_KEYWORD for p in parameters)
    signature_object = inspect.Signature(parameters)
    return Arity(counts, signature, signature_object, keywords_required, by_name, required, any_keyword)


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


def _is_async(function: Any, what: str) -> bool:
    """True for an ``async def``: the worker awaits it on its event loop. An async generator cannot be a job."""
    if inspect.isasyncgenfunction(function) or inspect.isgeneratorfunction(function):
        raise ConfigError(f"{what} is a generator function: a job's perform must return (or be an async def)")
    return inspect.iscoroutinefunction(function)


class _CapturedJobs:
    """``MyJob.jobs``: the jobs of this class that ``kiq.testing.fake()`` captured (``[]`` outside it)."""

    def __get__(self, instance: Any, owner: type[Job]) -> list[dict[str, Any]]:
        current = sink.current
        return [] if current is None else current.jobs_of(owner.kiq_name)


class _AsyncPushes:
    """``MyJob.aio``: the class's pushes for asyncio code (``await MyJob.aio.perform_async(...)``)."""

    def __get__(self, instance: Any, owner: type[Job]) -> AsyncJobSetter:
        return JobSetter(owner, {}).aio


class Job:
    """Base class of jobs. Subclasses define ``perform(*args)``; ``kiq_options`` go into every payload.

    ``kiq_name`` is the wire name written as the payload's ``class``: by default ``module.QualName``; set it to
    share a job with another language's worker (e.g. ``kiq_name = "HardJob"`` for a Ruby class).

    A push with a number of arguments ``perform`` cannot take is refused (``kiq.InvalidJobError``), from the
    signature read once here; the option ``check_args: False`` turns that off for a job.
    """

    kiq_options: ClassVar[dict[str, Any]] = {}
    kiq_name: ClassVar[str]
    _kiq_merged_options: ClassVar[dict[str, Any]] = DEFAULT_OPTIONS
    _kiq_declared_options: ClassVar[dict[str, Any]] = {}  # the class's and its bases' kiq_options alone
    _kiq_arity: ClassVar[Arity | None] = None  # what a push must give perform (kiq.client checks it)
    _kiq_arguments: ClassVar[ArgumentPlan | None] = None  # its typed parameters (kiq.arguments); None: none
    _kiq_async: ClassVar[bool] = False  # perform is an async def: the worker awaits it on its event loop
    # stops itself between items when the worker stops or its time limit passes (kiq.server.interruption)
    _kiq_interruptible: ClassVar[bool] = False
    aio: ClassVar[_AsyncPushes] = _AsyncPushes()
    jobs: ClassVar[_CapturedJobs] = _CapturedJobs()

    jid: str
    job: dict[str, Any]

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("kiq_options", {})
        if not isinstance(own, dict):
            raise ConfigError(f"{cls.__qualname__}.kiq_options must be a dict, got {own!r}")
        _check_options(own, cls.__qualname__)
        cls._kiq_async = cls._perform_is_async()
        cls._kiq_merged_options = {**cls._kiq_merged_options, **own}  # inherited, as sidekiq_options are
        cls._kiq_declared_options = {**cls._kiq_declared_options, **own}
        if "kiq_name" not in cls.__dict__:
            cls.kiq_name = wire_name(cls.__module__, cls.__qualname__)
        perform = cls._perform_function()
        cls._kiq_arity = None if perform is None else _arity(perform[0], method=perform[1])
        cls._kiq_arguments = None if perform is None else plan_for(perform[0], perform[1], cls.kiq_name)
        if not abstract:
            registry.register(cls)

    def perform(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__qualname__} must define perform()")

    def progress(self, done: float, total: float | None = None) -> None:
        """Report how far this job is: ``done`` units of ``total`` (None when not known), e.g. rows written of
        rows to write. The plugins hear it (``kiq_job_progress``): tracking keeps the latest on the job's event, so
        a frontend polling the task sees its progress bar move. ``done`` may pass ``total`` when the total was an
        estimate. Outside a worker (``perform`` called directly) nothing happens. Each call reaches the plugins: in
        a loop of microsecond items, report every few hundred items."""
        if not _is_amount(done) or not (total is None or _is_amount(total)):
            raise ValueError(
                f"{type(self).__qualname__}.progress(done={done!r:.40}, total={total!r:.40}): done must be a number "
                ">= 0 and total a number >= 0 or None, e.g. self.progress(rows_written, rows_to_write)"
            )
        job = getattr(self, "job", None)
        if job is None:
            return
        config = config_or_default(None)  # in a worker: the worker's own config
        config.plugins.notify("kiq_job_progress", job=job, done=done, total=total, config=config)

    @classmethod
    def _perform_is_async(cls) -> bool:
        return _is_async(cls.perform, f"{cls.__qualname__}.perform")

    @classmethod
    def _perform_function(cls) -> tuple[Callable[..., Any], bool] | None:
        """The function a job runs, and whether it is a method (its ``self`` not an argument): its signature says
        what a push must give it and its annotations which arguments convert. None when not known."""
        perform = inspect.getattr_static(cls, "perform")
        if not inspect.isfunction(perform):  # a staticmethod or a callable object: not guessed at, not checked
            return None
        return perform, True

    @classmethod
    def get_options(cls) -> dict[str, Any]:
        """The options of this class merged with its bases' (Sidekiq's ``get_sidekiq_options``), over the
        ``default_job_options`` setting of the default config (Sidekiq's ``default_job_options``)."""
        defaults = _default_job_options()
        if not defaults:
            return dict(cls._kiq_merged_options)
        return {**DEFAULT_OPTIONS, **defaults, **cls._kiq_declared_options}

    @classmethod
    def set(cls, **options: Any) -> JobSetter:
        """Options for one push: ``MyJob.set(queue="low", retry=False).perform_async(...)``."""
        return JobSetter(cls, options)

    @classmethod
    def s(cls, *args: Any, **kwargs: Any) -> Signature:
        """This job's call for a workflow step; the step before it passes its result as the first argument."""
        return Signature(cls, args, kwargs)

    @classmethod
    def si(cls, *args: Any, **kwargs: Any) -> Signature:
        """This job's call for a workflow step that takes no previous result (an immutable signature)."""
        return Signature(cls, args, kwargs, immutable=True)

    @classmethod
    def perform_async(cls, *args: Any, **kwargs: Any) -> str | None:
        """Push the job; return its jid (None when a client middleware dropped it)."""
        item = {"class": cls, "args": list(args)}  # JobSetter's path, without options to merge
        if kwargs:
            item["kwargs"] = kwargs
        return Client().push(item)

    @classmethod
    def perform_in(cls, interval: float | datetime.timedelta, /, *args: Any, **kwargs: Any) -> str | None:
        """Run in ``interval`` seconds or a timedelta (a number ≥ 1e9 is an epoch timestamp, as in Sidekiq)."""
        return JobSetter(cls, {}).perform_in(interval, *args, **kwargs)

    @classmethod
    def perform_at(cls, timestamp: float | datetime.datetime, /, *args: Any, **kwargs: Any) -> str | None:
        """Run at epoch ``timestamp`` (seconds) or an aware datetime."""
        return JobSetter(cls, {}).perform_at(timestamp, *args, **kwargs)

    @classmethod
    def perform_bulk(cls, args: Iterable[list[Any] | Call], batch_size: int = 1000) -> list[str | None]:
        """Push one job per argument list (or ``kiq.Call(*args, **kwargs)``), ``batch_size`` per Redis round
        trip; return the jids."""
        return JobSetter(cls, {}).perform_bulk(args, batch_size)


class JobSetter:
    """A job class with options for the next push (what ``Job.set`` returns)."""

    def __init__(self, job_class: type[Job], options: dict[str, Any]) -> None:
        options = dict(options)
        self._config: Config | None = options.pop("config", None)
        self._shard: str | None = options.pop("shard", None)  # where the push goes; not written into the job
        if self._shard is not None and not (isinstance(self._shard, str) and self._shard):
            raise ConfigError(f"{job_class.__qualname__}: shard must be a shard's name, got {self._shard!r:.80}")
        _check_options(options, job_class.__qualname__)
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
        plan = self.job_class._kiq_arguments
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


class FunctionJob(Job, abstract=True):
    """The job class behind ``@kiq.job``: ``perform`` calls the decorated function."""

    function: ClassVar[Callable[..., Any]]

    def perform(self, *args: Any, **kwargs: Any) -> Any:
        return type(self).function(*args, **kwargs)

    @classmethod
    def _perform_is_async(cls) -> bool:
        function = getattr(cls, "function", None)  # None for FunctionJob itself
        return function is not None and _is_async(function, f"@kiq.job {cls.__qualname__}")

    @classmethod
    def _perform_function(cls) -> tuple[Callable[..., Any], bool] | None:
        function = getattr(cls, "function", None)  # None for FunctionJob itself
        return None if function is None else (function, False)


class JobFunction(Generic[P, R]):
    """A function decorated with ``@kiq.job``: call it to run it here, or push it like a Job class."""

    def __init__(self, function: Callable[P, R], job_class: type[FunctionJob]) -> None:
        functools.update_wrapper(self, function)
        self.function = function
        self.job_class = job_class

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.function(*args, **kwargs)

    def set(self, **options: Any) -> JobSetter:
        return self.job_class.set(**options)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        return self.job_class.s(*args, **kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        return self.job_class.si(*args, **kwargs)

    def perform_async(self, *args: P.args, **kwargs: P.kwargs) -> str | None:
        return self.job_class.perform_async(*args, **kwargs)

    def perform_in(self, interval: float | datetime.timedelta, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        return self.job_class.perform_in(interval, *args, **kwargs)

    def perform_at(self, timestamp: float | datetime.datetime, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        return self.job_class.perform_at(timestamp, *args, **kwargs)

    def perform_bulk(self, args: Iterable[list[Any] | Call], batch_size: int = 1000) -> list[str | None]:
        return self.job_class.perform_bulk(args, batch_size)

    @property
    def jobs(self) -> list[dict[str, Any]]:
        """The captured jobs of this function (``kiq.testing.fake()``)."""
        return self.job_class.jobs

    @property
    def aio(self) -> AsyncJobSetter:
        """The pushes for asyncio code: ``await my_function.aio.perform_async(...)``."""
        return self.job_class.set().aio


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


def job(function: Callable[P, R] | None = None, /, *, name: str | None = None, **options: Any) -> Any:
    """Turn a function into a job: ``@kiq.job`` or ``@kiq.job(queue="mail", retry=3, name="Mailer")``."""

    def wrap(fn: Callable[P, R]) -> JobFunction[P, R]:
        _is_async(fn, f"@kiq.job {fn.__qualname__}")  # refuses a generator function where it is decorated
        attrs: dict[str, Any] = {
            "kiq_options": options,
            "function": staticmethod(fn),
            "__module__": fn.__module__,
            "__qualname__": fn.__qualname__,
            "__doc__": fn.__doc__,
        }
        if name is not None:
            attrs["kiq_name"] = name
        job_class = type(fn.__name__, (FunctionJob,), attrs)
        return JobFunction(fn, job_class)

    return wrap if function is None else wrap(function)
