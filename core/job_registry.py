"""The registry of jobs by wire name: the only place a worker finds the class a payload names.

A payload's ``class`` is only ever looked up here, never imported: a job exists for a worker because a module it
was told to import (``-r``) defined it. Data in Redis cannot name code to run.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from .errors import RegistryError, UnknownJobError


def wire_name(module: str, qualname: str) -> str:
    """The default wire name: ``module.QualName``, with ``__main__`` replaced by the module's real name when run
    with ``python -m`` (so a script and its worker agree)."""
    if module == "__main__":
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        if spec is not None and spec.name:
            module = spec.name
    return f"{module}.{qualname}"


class JobRegistry:
    """Wire name -> job class. Redefining the same class (same module and name) replaces it; two different
    classes claiming one wire name is an error."""

    def __init__(self) -> None:
        self._jobs: dict[str, type[Any]] = {}
        self._lock = threading.Lock()

    def register(self, job_class: type[Any]) -> None:
        name = job_class.kiq_name
        with self._lock:
            existing = self._jobs.get(name)
            if (
                existing is not None
                and existing is not job_class
                and ((existing.__module__, existing.__qualname__) != (job_class.__module__, job_class.__qualname__))
            ):
                raise RegistryError(
                    f"two jobs claim the wire name {name!r}: {existing.__module__}.{existing.__qualname__} "
                    f"and {job_class.__module__}.{job_class.__qualname__}; give one of them another kiq_name"
                )
            self._jobs[name] = job_class

    def unregister(self, name: str) -> None:
        with self._lock:
            self._jobs.pop(name, None)

    def get(self, name: str) -> type[Any]:
        try:
            return self._jobs[name]
        except KeyError:
            raise UnknownJobError(
                f"no job is registered as {name!r} in this process; import the module that defines it "
                "with -r / the require setting"
            ) from None

    def find(self, name: str) -> type[Any] | None:
        """The class registered as ``name``, or None."""
        return self._jobs.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._jobs

    def names(self) -> list[str]:
        return sorted(self._jobs)


registry = JobRegistry()
