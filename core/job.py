"""Jobs: the ``Job`` base class, which registers each subclass under its wire name (kiq.job_registry) and gives it
its plan (kiq.plan), and the ``@kiq.job`` decorator that makes a function a job. Their pushes with options:
kiq.job_setter."""

from __future__ import annotations

import datetime
import functools
import inspect
import math
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Generic, ParamSpec, TypeVar

from . import sink
from .arguments import plan_for
from .arity import arity_of
from .client import Client
from .config import config_or_default
from .errors import ConfigError
from .job_options import check_job_options, default_job_options
from .job_registry import registry, wire_name
from .job_setter import AsyncJobSetter, Call, JobSetter
from .payload import DEFAULT_OPTIONS
from .plan import JobPlan, plan_of, set_plan
from .returns import result_type_for
from .signature import Signature

P = ParamSpec("P")
R = TypeVar("R")


def _is_amount(value: Any) -> bool:
    return (type(value) is int and value >= 0) or (type(value) is float and math.isfinite(value) and value >= 0)


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
    signature read once here; the option ``check_args: False`` turns that off for a job. What is read once, when the
    class is defined (its options, ``perform``'s signature and annotations, async or not) is its plan:
    ``kiq.plan.plan_of(MyJob)``.
    """

    kiq_options: ClassVar[dict[str, Any]] = {}
    kiq_name: ClassVar[str]
    aio: ClassVar[_AsyncPushes] = _AsyncPushes()
    jobs: ClassVar[_CapturedJobs] = _CapturedJobs()

    jid: str
    job: dict[str, Any]

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("kiq_options", {})
        if not isinstance(own, dict):
            raise ConfigError(f"{cls.__qualname__}.kiq_options must be a dict, got {own!r}")
        check_job_options(own, cls.__qualname__)
        if "kiq_name" not in cls.__dict__:
            cls.kiq_name = wire_name(cls.__module__, cls.__qualname__)
        set_plan(cls, cls._build_plan(own))
        if not abstract:
            registry.register(cls)

    @classmethod
    def _build_plan(cls, own_options: dict[str, Any]) -> JobPlan:
        """The class's plan (kiq.plan), over its base's: ``own_options`` are its own ``kiq_options``."""
        is_async = cls._perform_is_async()
        base = plan_of(cls)  # the base's plan, until this one is set
        perform = cls._perform_function()
        return JobPlan(
            options={**base.options, **own_options},  # inherited, as sidekiq_options are
            declared_options={**base.declared_options, **own_options},
            arity=None if perform is None else arity_of(perform[0], method=perform[1]),
            arguments=None if perform is None else plan_for(perform[0], perform[1], cls.kiq_name),
            result=None if perform is None else result_type_for(perform[0], cls.kiq_name),
            is_async=is_async,
            interruptible=base.interruptible,
            around_iteration=base.around_iteration,
        )

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
        defaults = default_job_options()
        plan = plan_of(cls)
        if not defaults:
            return dict(plan.options)
        return {**DEFAULT_OPTIONS, **defaults, **plan.declared_options}

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


set_plan(Job, JobPlan(options=DEFAULT_OPTIONS))  # what every subclass's plan builds on


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


def job(
    function: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    retry_in: Callable[[int, BaseException, dict[str, Any]], Any] | None = None,
    retries_exhausted: Callable[[dict[str, Any], BaseException], Any] | None = None,
    **options: Any,
) -> Any:
    """Turn a function into a job: ``@kiq.job`` or ``@kiq.job(queue="mail", retry=3, name="Mailer")``.

    ``retry_in(count, exc, job)`` and ``retries_exhausted(job, exc)`` are a class job's per-job retry hooks, given
    as functions (docs/guide/retries.md); they stay in the worker, never in the payload."""
    hooks = {"retry_in": retry_in, "retries_exhausted": retries_exhausted}
    for hook, given in hooks.items():
        if given is not None and not callable(given):
            raise TypeError(f"@kiq.job({hook}=...) takes a function, got {given!r}")

    def wrap(fn: Callable[P, R]) -> JobFunction[P, R]:
        _is_async(fn, f"@kiq.job {fn.__qualname__}")  # refuses a generator function where it is decorated
        attrs: dict[str, Any] = {
            **{hook: staticmethod(given) for hook, given in hooks.items() if given is not None},
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
