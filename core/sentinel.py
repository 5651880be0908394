"""The connections of a Sentinel URL's clients: each asks the Sentinels for the master whenever it connects.

redis-py (8.1; redis/redis-py#3874) asks them only in ``connect()``. A connection that dropped and is then sent a
command (a retry, ``run_pipeline``'s shelved connection, a fetcher's dedicated one) connects again to the address
it had: after a failover, the old master. That server takes writes until the Sentinels demote it and then discards
them; demoted, it answers reads from its copy, which may lag or be empty while it syncs. A reliable fetcher that
compared its working list with such a read put back every job it was running (they ran a third time).
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.connection import Connection as AsyncConnection
from redis.asyncio.sentinel import SentinelManagedConnection as AsyncSentinelManagedConnection
from redis.connection import Connection
from redis.sentinel import SentinelManagedConnection


class SentinelConnection(SentinelManagedConnection):
    """redis-py's Sentinel connection, asking the Sentinels on every connection, not only a checkout's."""

    def connect_to(self, address: Any) -> None:  # the Sentinels named ``address``: connect to it, asking no more
        self.host, self.port = address
        Connection.connect_check_health(
            self, check_health=self.connection_pool.check_connection, retry_socket_connect=False
        )

    def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        if not self.is_connected:
            self.connect()  # type: ignore[no-untyped-call]  # asks the Sentinels (connect_to)


class AsyncSentinelConnection(AsyncSentinelManagedConnection):
    """The same for the asyncio client."""

    async def connect_to(self, address: Any) -> None:
        self.host, self.port = address
        await AsyncConnection.connect_check_health(
            self, check_health=self.connection_pool.check_connection, retry_socket_connect=False
        )

    async def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        if not self.is_connected:
            await self.connect()  # type: ignore[no-untyped-call]
