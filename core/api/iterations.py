"""What iterable jobs' ``it-<jid>`` hashes say, read for many jobs at once (the Busy page, ``kiq busy``): one
pipeline of ``HGETALL``s, not a round trip per job."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from ..config import config_or_default
from ..iteration.state import IterationState, key_of, parse

if TYPE_CHECKING:
    from ..config import Config


def iteration_states(jids: Iterable[str | None], config: Config | None = None) -> dict[str, IterationState]:
    """The iteration state of each of ``jids`` that has one (an iterable job that flushed its state at least once,
    or a cancelled one), by jid; a state that cannot be read (not written by kiq or Sidekiq) is left out."""
    wanted = list(dict.fromkeys(jid for jid in jids if jid))
    if not wanted:
        return {}
    redis = config_or_default(config).redis
    pipe = redis.pipeline(transaction=False)
    for jid in wanted:
        pipe.hgetall(key_of(redis, jid))
    states: dict[str, IterationState] = {}
    for jid, fields in zip(wanted, pipe.execute(), strict=True):
        try:
            state = parse(jid, cast("dict[str, str]", fields))
        except ValueError:  # a cursor that is not JSON: the job itself reports it when it resumes
            continue
        if state is not None:
            states[jid] = state
    return states


def runtime_so_far(state: IterationState, run_at: float | None) -> float:
    """Seconds the job has run over all its executions: the finished ones' (``rt``) and, while it runs, the time
    since this one started (``run_at``)."""
    running = max(0.0, time.time() - run_at) if run_at is not None else 0.0
    return state.runtime + running
