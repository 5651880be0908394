"""Redis Cluster clients that ride out a resharding: a command refused because its slot is being moved to another
node is sent again, whole, until the move settles.

While a slot migrates key by key (``redis-cli --cluster reshard``, a managed service scaling out), its keys are split
between two primaries. redis-py follows the ``ASK`` and ``MOVED`` redirections, and retries a ``TRYAGAIN`` (a
command or script whose keys are split) for about half a second, then gives up with ``ClusterError: TTL
exhausted``; a transaction (``pipeline(transaction=True)``: MULTI/EXEC) whose commands are redirected is
discarded whole, and redis-py raises the redirection; and a Lua script that meets a key its node no longer has
stops with an error reply ("... access a non local key in a cluster node"). None of these ran the command (a kiq
script stops before it writes anything such a stop could lose: core/scripts.py's rules), so each is sent again
after a short pause, growing, for up to ``PATIENCE`` seconds; past that, ``kiq.failures.SlotMigrating`` (one of
``kiq.failures.MOVED``) is raised, and the caller holds the write and retries it as after any outage.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import ClusterPipeline, RedisCluster

from .backoff import Backoff
from .failures import SlotMigrating, migrating

PATIENCE = 5.0  # seconds a command waits for a slot move to settle before its caller treats it as an outage
FIRST_PAUSE, LONGEST_PAUSE = 0.01, 0.25  # seconds between two tries: doubled from the first up to the longest


class Patience:
    """One command's tries while its slot moves: the pauses of a ``Backoff`` for up to ``PATIENCE`` seconds."""

    def __init__(self) -> None:
        self.deadline = time.monotonic() + PATIENCE
        self.backoff = Backoff(FIRST_PAUSE, LONGEST_PAUSE)

    def pause_after(self, exc: Exception) -> float | None:
        """The pause before sending the command again after ``exc``; None when ``exc`` is no slot move (the caller
        raises it); ``SlotMigrating`` once the next try would come after ``PATIENCE``."""
        if not migrating(exc):
            return None
        pause = self.backoff.next()
        if time.monotonic() + pause > self.deadline:
            raise SlotMigrating(f"a slot was still being moved after {PATIENCE:.0f} s: {exc}") from exc
        return pause


class ReshardingCluster(RedisCluster):
    """redis-py's cluster client, sending a command again while its slot is being moved (see the module)."""

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        patience = Patience()
        while True:
            try:
                return super().execute_command(*args, **kwargs)  # type: ignore[no-untyped-call]
            except Exception as exc:
                if (pause := patience.pause_after(exc)) is None:
                    raise
            time.sleep(pause)

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)  # type: ignore[no-untyped-call]
        if transaction:  # redis-py builds the pipeline; only its execute differs (a subclass adds no state)
            pipe.__class__ = ReshardingTransaction
        return pipe


class ReshardingTransaction(ClusterPipeline):
    """A MULTI/EXEC on a cluster, run again whole while its slot is being moved: a transaction refused by a
    redirection was discarded by Redis (EXECABORT), so nothing of it ran."""

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        queued = [(command.args, command.options) for command in self._execution_strategy.command_queue]
        patience = Patience()
        while True:
            try:
                return super().execute(raise_on_error)
            except Exception as exc:
                if (pause := patience.pause_after(exc)) is None:
                    raise
            time.sleep(pause)
            for args, options in queued:  # execute() emptied the pipeline: the same commands again
                self.pipeline_execute_command(*args, **options)  # type: ignore[no-untyped-call]


class AsyncReshardingCluster(AsyncRedisCluster):
    """``ReshardingCluster`` for asyncio."""

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        patience = Patience()
        while True:
            try:
                return await super().execute_command(*args, **kwargs)
            except Exception as exc:
                if (pause := patience.pause_after(exc)) is None:
                    raise
            await asyncio.sleep(pause)
