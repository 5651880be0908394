"""Signatures: one job call described for later, ``MyJob.s(1, 2)`` / ``MyJob.si(1, 2)``, a plain value like
``kiq.Call`` with the job class and options (``.set(queue=...)``) added.

Core only describes the call; what runs signatures in order or in parallel (a plugin's canvas: the workflow
plugin's ``chain``, ``group``, ``chord``) composes them, and ``left | right`` asks the ``kiq_compose`` hook of the
default config for it. ``s`` is Celery's mutable signature: the step before it passes its result as the first
positional argument; ``si`` is immutable: it runs with exactly its own arguments."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import default_config

if TYPE_CHECKING:
    from .job import Job
    from .job_setter import JobSetter


class Signature:
    """``job_class.perform(*args, **kwargs)`` with ``options`` (as ``Job.set`` takes them), to be run later;
    ``immutable``: no previous result is passed to it."""

    __slots__ = ("args", "immutable", "job_class", "kwargs", "options")

    def __init__(
        self,
        job_class: type[Job],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
        immutable: bool = False,
    ) -> None:
        self.job_class = job_class
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.options = dict(options or {})
        self.immutable = immutable

    def set(self, **options: Any) -> Signature:
        """The same call with more options (``queue``, ``retry``, ...), checked as ``Job.set`` checks them."""
        merged = {**self.options, **options}
        self.job_class.set(**merged)  # refuses a wrong option now, naming it
        return Signature(self.job_class, self.args, self.kwargs, merged, self.immutable)

    def setter(self) -> JobSetter:
        """The job class with this signature's options: what pushes the call."""
        return self.job_class.set(**self.options)

    def __or__(self, other: object) -> Any:
        if not isinstance(other, Signature):
            return NotImplemented  # a canvas on the right composes itself (its __ror__)
        composed = default_config().plugins.hook.kiq_compose(left=self, right=other)
        if composed is None:
            raise TypeError(
                f"{self!r} | {other!r}: no plugin composes signatures; enable the workflow plugin "
                "(plugins = ['workflow'] in the settings, or config.add_plugin('workflow'))"
            )
        return composed

    def __repr__(self) -> str:
        shown = [repr(arg) for arg in self.args] + [f"{key}={value!r}" for key, value in self.kwargs.items()]
        made = f"{self.job_class.__qualname__}.{'si' if self.immutable else 's'}({', '.join(shown)})"
        return made + (f".set({', '.join(f'{k}={v!r}' for k, v in self.options.items())})" if self.options else "")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Signature) and (
            self.job_class,
            self.args,
            self.kwargs,
            self.options,
            self.immutable,
        ) == (other.job_class, other.args, other.kwargs, other.options, other.immutable)

    __hash__ = None  # type: ignore[assignment]  # holds dicts
