"""The seam through which a plugin holds a Redis write until Redis takes it: ``kiq.ext.hold_write``.

A worker keeps the writes Redis refuses for now (``kiq.failures.TRANSIENT``: unreachable, ``OOM``, ``READONLY``,
``LOADING``, a cluster failing over) in its outcome keeper (kiq.server.outcomes): made again in order, with backoff,
until Redis takes them; the outage logged once, not once per write; while anything is held the worker fetches
nothing; at a stop that runs out of time each write still held is one ERROR line. A job's own outcome goes there;
``hold_write`` lets a plugin's write for a job (a death hook's record, a workflow step's outcome) go there too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from .failures import TRANSIENT

if TYPE_CHECKING:
    from .config import Config

UNWRITTEN = "unwritten job outcome"  # the start of the ERROR line of each held write given up at a stop


class HeldWrite(Protocol):
    """What a keeper holds: a write to make again until Redis takes it, and the line logged if it never does."""

    def settle(self) -> None:
        """Make the write (raises what Redis raises)."""

    def replay_line(self) -> str:
        """The ERROR line for a write given up at a stop: what was lost, and how to make it by hand."""


class WriteKeeper(Protocol):
    """A worker's keeper of held writes (kiq.server.outcomes.OutcomeKeeper): the first of a config's worker takes
    the ``hold_write`` calls of its plugins."""

    def hold(self, write: HeldWrite, refusal: BaseException) -> None: ...


class PluginWrite:
    """A plugin's write held through ``hold_write``: made again until it returns."""

    __slots__ = ("job", "what", "write")

    def __init__(self, write: Callable[[], object], what: str, job: dict[str, Any] | None) -> None:
        self.write = write
        self.what = what
        self.job = job

    def settle(self) -> None:
        self.write()

    def replay_line(self) -> str:
        job = self.job if isinstance(self.job, dict) else {}
        return (
            f"{UNWRITTEN}: {self.what} for {job.get('class')} jid={job.get('jid')} (its own Redis write was refused); "
            f"job: {json.dumps(job, separators=(',', ':'))}"
        )


def hold_write(
    write: Callable[[], object],
    refusal: BaseException,
    *,
    config: Config,
    what: str,
    job: dict[str, Any] | None = None,
) -> bool:
    """Hand ``write`` (a call whose Redis write just raised ``refusal``) to the worker of ``config``, which calls it
    again, with backoff, until it returns, as it does for a job's own outcome. True: held. False: nothing holds it
    (outside a worker: a client, a web request; or ``refusal`` is not one Redis gets over, ``kiq.failures.TRANSIENT``)
    and the caller handles the refusal, usually by raising it.

    ``write`` must be idempotent (it may have reached Redis before the connection broke) and may be called from
    another thread. ``what`` says what is lost if Redis never takes it, for the ERROR line a stop logs then ("the
    audit entry was not written"); ``job`` is the payload it was for, logged with it."""
    keeper = config.plugins.write_keeper
    if keeper is None or not isinstance(refusal, TRANSIENT):
        return False
    keeper.hold(PluginWrite(write, what, job), refusal)
    return True
