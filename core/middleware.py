"""Ordered middleware chains with Sidekiq's API, and the typed base classes for middleware.

A middleware's ``call`` is a generator that yields exactly once around the inner layers (Sidekiq's ``yield``,
pluggy's ``wrapper=True``). Code before the ``yield`` runs on the way in, code after it on the way out; an
exception from the inner layers is raised at the ``yield``. A middleware that returns without yielding halts
the chain: the inner layers (and the push or the ``perform``) do not run.

pluggy's own hook ordering (LIFO with tryfirst/trylast) cannot express ``insert_before``/``insert_after``,
so the chain is an explicit list; plugins contribute to it through hooks (see hookspecs.py).
Instances are built once per chain change and reused for every job, so middleware keeps per-job state in
locals, not on ``self``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

if TYPE_CHECKING:
    import redis

    from .config import Config
    from .job import Job

M = TypeVar("M", bound="ClientMiddleware | ServerMiddleware")  # the kind of middleware a chain holds
R = TypeVar("R")
Y = TypeVar("Y")  # what a chain's inner step yields to the code that drives it
P = ParamSpec("P")
Wrapper = Generator[None, Any, None]


class ClientMiddleware:
    """Runs around every push. Yield to let the push go on; return without yielding to drop the job."""

    config: Config
    # read before every push: False (or a property that says so) and this layer sits the push out, cheaper than a
    # ``call`` that only yields (e.g. a plugin with nothing to record: otel without an SDK)
    active: bool = True
    # an option this layer acts on only: a job whose payload lacks the key sits the layer out at the cost of that one
    # look-up, no ``call``; read when the chain is built (e.g. the profiling plugin's "profile")
    only_with: str | None = None

    def call(self, job_class: type[Job] | str, job: dict[str, Any], queue: str, redis: redis.Redis) -> Wrapper:
        yield


class ServerMiddleware:
    """Runs around every ``perform`` in the worker. Yield to run the job; return without yielding to skip it."""

    config: Config
    active: bool = True  # read before every job, as ClientMiddleware.active before every push
    only_with: str | None = None  # as ClientMiddleware.only_with: the jobs without this option skip the layer

    def call(self, job_instance: Job, job: dict[str, Any], queue: str) -> Wrapper:
        yield


@dataclass
class Entry(Generic[M]):
    klass: Callable[..., M]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def make(self) -> M:
        return self.klass(*self.args, **self.kwargs)


class Chain(Generic[M]):
    """An ordered list of middleware classes; ``entries[0]`` is the outermost layer.

    Typed: ``config.client_middleware`` is a ``Chain[ClientMiddleware]``, so a type checker refuses a server
    middleware there, and checks the arguments given to ``add`` against the class's constructor.
    """

    def __init__(self, config: Config | None = None) -> None:
        self.config = config
        self.entries: list[Entry[M]] = []
        self._instances: list[M] | None = None
        self._gated: list[tuple[M, str | None]] = []  # each instance with its only_with, made with the instances

    # -- Sidekiq's chain API ------------------------------------------------------------------------
    def add(self, klass: Callable[P, M], /, *args: P.args, **kwargs: P.kwargs) -> None:
        """Append ``klass`` (innermost so far); adding it again moves it to the end with the new arguments."""
        self._drop(klass)
        self.entries.append(self._entry(klass, args, kwargs))
        self._changed()

    def prepend(self, klass: Callable[P, M], /, *args: P.args, **kwargs: P.kwargs) -> None:
        """Insert ``klass`` as the outermost layer (moving it if present)."""
        self._drop(klass)
        self.entries.insert(0, self._entry(klass, args, kwargs))
        self._changed()

    def insert_before(self, old: type, klass: Callable[P, M], /, *args: P.args, **kwargs: P.kwargs) -> None:
        """Put ``klass`` just outside ``old`` (or first when ``old`` is absent); an existing entry keeps its
        arguments, as in Sidekiq."""
        entry = self._take(klass) or self._entry(klass, args, kwargs)
        index = self._index(old)
        self.entries.insert(0 if index is None else index, entry)
        self._changed()

    def insert_after(self, old: type, klass: Callable[P, M], /, *args: P.args, **kwargs: P.kwargs) -> None:
        """Put ``klass`` just inside ``old`` (or last when ``old`` is absent)."""
        entry = self._take(klass) or self._entry(klass, args, kwargs)
        index = self._index(old)
        self.entries.insert(len(self.entries) if index is None else index + 1, entry)
        self._changed()

    def remove(self, klass: Callable[..., M]) -> None:
        self._drop(klass)
        self._changed()

    def exists(self, klass: Callable[..., M]) -> bool:
        return self._index(klass) is not None

    __contains__ = exists

    def clear(self) -> None:
        self.entries.clear()
        self._changed()

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Callable[..., M]]:
        return (entry.klass for entry in self.entries)

    def __repr__(self) -> str:
        return f"Chain({[getattr(entry.klass, '__name__', entry.klass) for entry in self.entries]})"

    # -- running ------------------------------------------------------------------------------------
    def retrieve(self) -> list[M]:
        """The middleware instances in order, built once per change of the chain."""
        instances = self._instances
        if instances is None:
            instances = []
            for entry in self.entries:
                instance = entry.make()
                if self.config is not None:
                    instance.config = self.config
                instances.append(instance)
            self._gated = [(instance, getattr(instance, "only_with", None)) for instance in instances]
            self._instances = instances
        return instances

    def idle(self) -> bool:
        """No layer is active now (none at all, or each one's ``active`` is false): a push can skip the chain."""
        return not self.entries or not any(getattr(layer, "active", True) for layer in self.retrieve())

    def invoke(self, args: tuple[Any, ...], final: Callable[[], R]) -> R | None:
        """Run ``final`` inside every layer; return its result, or None when a layer halted the chain."""
        if not self.entries:
            return final()
        self.retrieve()
        entered, halted, error = _enter(self._gated, args)
        result: R | None = None
        if not halted:
            try:
                result = final()
            except BaseException as exc:
                error = exc
        return _leave(entered, halted, result, error)

    def around(self, args: tuple[Any, ...], inner: Generator[Y, Any, R]) -> Generator[Y, Any, R | None]:
        """``yield from chain.around(args, inner)``: the generator ``inner`` inside every layer, its yields passed
        through to the caller. This is how a job runs whether ``perform`` is called or awaited: the worker's job
        steps yield once, to have ``perform`` run (kiq.server.runner), and an error sent back at that yield
        reaches the layers as if ``perform`` had raised it. Returns ``inner``'s result, or None when halted."""
        layers = self.retrieve()
        if not layers:
            return (yield from inner)
        entered, halted, error = _enter(self._gated, args)
        result: R | None = None
        if not halted:
            try:
                result = yield from inner
            except BaseException as exc:
                error = exc
        return _leave(entered, halted, result, error)

    # -- helpers ------------------------------------------------------------------------------------
    def _entry(self, klass: Callable[..., M], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Entry[M]:
        call = getattr(klass, "call", None)
        if inspect.iscoroutinefunction(call) or inspect.isasyncgenfunction(call):
            raise TypeError(
                f"middleware {getattr(klass, '__qualname__', klass)}.call is async: chains run plain generator "
                "middleware, around async jobs and in the asyncio client too (the layers are entered and left in "
                "the job's own task, so a context they set is current inside the coroutine); do async work in the "
                "job, or before the push"
            )
        if not inspect.isgeneratorfunction(call):
            raise TypeError(
                f"middleware {getattr(klass, '__qualname__', klass)} needs a generator method call(...) that yields "
                "once around the inner layers"
            )
        return Entry(klass, args, kwargs)

    def _index(self, klass: Callable[..., M]) -> int | None:
        for index, entry in enumerate(self.entries):
            if entry.klass is klass:
                return index
        return None

    def _take(self, klass: Callable[..., M]) -> Entry[M] | None:
        index = self._index(klass)
        return None if index is None else self.entries.pop(index)

    def _drop(self, klass: Callable[..., M]) -> None:
        self._take(klass)

    def _changed(self) -> None:
        self._instances = None


def _enter(
    layers: list[tuple[Any, str | None]], args: tuple[Any, ...]
) -> tuple[list[Wrapper], bool, BaseException | None]:
    """Each active layer (with its ``only_with``) up to its ``yield``: the layers entered, whether one halted the
    chain (returned without yielding, or failed on the way in: the outer layers see that error). ``args[1]`` is the
    job, in a client chain's arguments as in a server chain's."""
    entered: list[Wrapper] = []
    try:
        for layer, only_with in layers:
            if only_with is not None and only_with not in args[1]:
                continue
            if not getattr(layer, "active", True):
                continue
            gen = layer.call(*args)
            next(gen)
            entered.append(gen)
    except StopIteration:
        return entered, True, None
    except BaseException as exc:
        return entered, True, exc
    return entered, False, None


def _leave(entered: list[Wrapper], halted: bool, result: R | None, error: BaseException | None) -> R | None:
    """The entered layers, innermost first, resumed with the result (None when halted) or thrown the error; a
    layer that swallows an error halts the chain (the job counts as handled)."""
    for gen in reversed(entered):
        try:
            if error is None:
                gen.send(None if halted else result)
            else:
                gen.throw(error)
        except StopIteration:
            if error is not None:
                error, halted = None, True
            continue
        except BaseException as exc:
            error = exc
            continue
        error = RuntimeError(f"middleware {gen.__qualname__} yielded more than once")  # type: ignore[attr-defined]
    if error is not None:
        raise error
    return None if halted else result
