"""Where jobs go instead of Redis while ``kiq.testing`` runs a test (fake or inline mode); None: Redis.

The one seam the test modes need: the client's write, the retry layer's retry and the dead set. Each checks this
module-level value once per write, so the cost outside tests is one global lookup.
"""

from __future__ import annotations

from typing import Any, Protocol

# a job ready to write: (queue, jid, ``at`` or None, its JSON), as kiq.client encodes it
EncodedJob = tuple[str, str, float | None, str]


class JobSink(Protocol):
    def write(self, jobs: list[EncodedJob]) -> None:
        """Jobs a client pushed (to a queue, or scheduled when ``at`` is set)."""

    def retry(self, jobstr: str, at: float) -> None:
        """A failed job's retry, due at ``at``."""

    def bury(self, jobstr: str) -> None:
        """A job that died, for the dead set."""

    def jobs_of(self, name: str) -> list[dict[str, Any]]:
        """The captured jobs of the class whose wire name is ``name`` (``MyJob.jobs``)."""


current: JobSink | None = None
