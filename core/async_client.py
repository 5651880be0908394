"""Pushing jobs from asyncio code without blocking the event loop: ``await MyJob.aio.perform_async(...)``, or
``await kiq.AsyncClient(config).push(item)``.

The job goes through exactly what ``kiq.Client`` does (normalizing, the client middleware, the strict check, the
encoding: ``Client.encode``) and only the Redis round trip is awaited, on ``redis.asyncio``. So the wire format and
every error are the same. Client middleware stay plain generators, run in the event loop's thread, and get the
config's sync Redis client: a middleware that calls Redis blocks the loop for that round trip.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

import redis as redis_py

from . import sink
from .client import Client, EncodedJob
from .config import config_or_default
from .failures import UNREACHABLE
from .job_writes import check_replicated, listed_queues, note_listed, write_commands, write_jobs
from .keys import keyspace
from .redis import connect_async, is_cluster, pool_of
from .reliable_push import behind_held, held, hold

if TYPE_CHECKING:
    import redis.asyncio as redis_async

    from .config import Config

# connections belong to the event loop that opened them: one client per loop, config and URL
_clients: WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[int, str | None, str], redis_async.Redis]] = (
    WeakKeyDictionary()
)
POOL_SIZE = 50  # connections per loop; a push waits for a free one rather than fail


def async_redis(config: Config) -> redis_async.Redis:
    """The config's asyncio Redis client for the running event loop (made on first use in each loop)."""
    clients = _clients.setdefault(asyncio.get_running_loop(), {})
    key = (id(config), config.redis_url, config.slots)
    client = clients.get(key)
    if client is None:
        # a push's WAIT (push_replicas) waits its own timeout before it replies
        timeout = config.redis_timeout + (config.push_replicas_timeout if config.push_replicas else 0.0)
        client = clients[key] = connect_async(
            config.redis_url, config.embedded_dir, POOL_SIZE, config.embedded, slots=config.slots, timeout=timeout
        )
    return client


class AsyncClient:
    """``kiq.Client`` for asyncio: ``await push(item)`` and ``await push_bulk(item)``, same items, same results.
    ``redis`` sends the pushes to another Redis than the config's (an asyncio client)."""

    def __init__(self, config: Config | None = None, redis: redis_async.Redis | None = None) -> None:
        self.config = config_or_default(config)
        self._client = Client(self.config)
        self._redis = redis

    @property
    def redis(self) -> redis_async.Redis:
        return self._redis if self._redis is not None else async_redis(self.config)

    async def push(self, item: dict[str, Any]) -> str | None:
        """Push one job; return its jid, or None when a client middleware halted the push."""
        encoded = self._client.encode(item)
        if encoded is None:
            return None
        await self._write([encoded])
        return encoded[1]

    async def push_bulk(self, item: dict[str, Any], batch_size: int = 1000) -> list[str | None]:
        """Push one job per entry of ``item["args"]``; nothing is written unless every job is valid."""
        with self._client.encode_bulk(item, batch_size) as (jids, batches):
            for batch in batches:
                await self._write(batch)
        return jids

    async def close(self) -> None:
        """Close this loop's connections of the config (e.g. in an app's lifespan shutdown)."""
        clients = _clients.get(asyncio.get_running_loop(), {})
        client = clients.pop((id(self.config), self.config.redis_url, self.config.slots), None)
        if client is not None:
            if is_cluster(client):
                await client.aclose()  # a cluster client closes its nodes' connections
            else:
                await client.aclose(close_connection_pool=True)  # the pool is ours: close its connections too

    async def _write(self, jobs: list[EncodedJob]) -> None:
        if sink.current is not None:  # kiq.testing's fake or inline mode
            sink.current.write(jobs)
            return
        # reliable push holds jobs for the config's Redis, sent by its sync client from the background sender (a
        # client given its own ``redis`` raises in an outage, as without reliable push); in a thread: a push that
        # finds the buffer full waits there for a send under way
        held_here = held and self._redis is None
        if held_here and await asyncio.to_thread(behind_held, self.config.redis, jobs, self.config, False):
            return
        connection = self.redis
        listed = listed_queues(pool_of(connection))
        commands = write_commands(jobs, self.config, listed, keyspace(connection))
        try:
            try:
                replies = await self._send(connection, commands)
            except redis_py.ReadOnlyError:  # a failover left us talking to a replica: once more, on new connections
                if is_cluster(connection):  # a cluster client follows its failovers itself
                    raise
                await connection.connection_pool.disconnect()
                replies = await self._send(connection, commands)
        except UNREACHABLE as error:
            sync = self.config.redis
            if self._redis is not None or not hold(
                sync, jobs, self.config, error, partial(write_jobs, sync, config=self.config)
            ):
                raise
            return
        note_listed(commands, listed)
        check_replicated(commands, replies, jobs, self.config)

    @staticmethod
    async def _send(connection: redis_async.Redis, commands: list[tuple[Any, ...]]) -> list[Any]:
        pipe = connection.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return await pipe.execute()
