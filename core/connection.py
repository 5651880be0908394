"""A fetcher's dedicated connection: one connection of a client's pool kept by one user, skipping the pool's
checkout and the client's wrappers on every command."""

from __future__ import annotations

import hashlib
from typing import Any

import redis
from redis.connection import Connection

from .pipeline import master_changes
from .redis import LARGE_VALUE, is_cluster


class DedicatedConnection:
    """One connection of a client's pool, kept by one user at a time (a capsule's fetching thread).

    Commands skip the pool's per-command checkout and the client's wrappers, which cost more than the round trip
    itself on a local Redis (README, "The hot path"). Replies are decoded as the client's are. A command that fails on a
    broken connection is sent once more on a new one, as redis-py's client does; ``broken`` counts those breaks, so a
    user whose command must not be lost unseen (reliable fetch) can tell that a reply may have been lost.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._cluster: Any = client if is_cluster(client) else None
        if self._cluster is not None:  # no connection of its own: the cluster client routes each command by its key
            self.broken = 0
            return
        self._pool = client.connection_pool
        self._connection: Connection | None = None
        self._master_changes = master_changes.get(self._pool)
        self._seen = self._master_changes[0]
        self.broken = 0  # commands whose connection broke: Redis may have run one whose reply was lost

    def command(self, *args: Any) -> Any:
        if self._cluster is not None:
            return self._cluster_command(args)
        if self._master_changes[0] != self._seen and self._connection is not None:  # follow_new_master was called
            self._connection.disconnect()  # type: ignore[no-untyped-call]
            self.release()
        for attempt in (1, 2):
            connection = self._connection or self._take()
            try:
                connection.send_command(*args)  # type: ignore[no-untyped-call]
                reply = connection.read_response() if args[0] not in BLOCKING else _blocking_reply(connection, args)
                if _large(reply):  # the reader keeps a buffer as large until its next read: free it now
                    connection.disconnect()  # type: ignore[no-untyped-call]  # the next command reconnects
                return reply
            except redis.ConnectionError:
                self.broken += 1
                self.release()
                if attempt == 2:
                    raise
            except redis.ResponseError:
                raise  # an error reply: the connection is fine
            except BaseException:
                connection.disconnect()  # type: ignore[no-untyped-call]  # a reply may be half read
                self.release()
                raise
        raise AssertionError("unreachable")

    def pipeline(self, *commands: tuple[Any, ...]) -> list[Any]:
        """``commands`` in one round trip (one after the other on a cluster), their replies in order; an error reply
        is raised once every reply was read. Not sent again after a broken connection (``broken`` counts it)."""
        if self._cluster is not None:
            return [self._cluster_command(command) for command in commands]
        if self._master_changes[0] != self._seen and self._connection is not None:
            self._connection.disconnect()  # type: ignore[no-untyped-call]
            self.release()
        connection = self._connection or self._take()
        replies: list[Any] = []
        try:
            connection.send_packed_command(connection.pack_commands(commands))  # type: ignore[no-untyped-call]
            for _ in commands:
                try:
                    replies.append(connection.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
        except redis.ConnectionError:
            self.broken += 1
            self.release()
            raise
        except BaseException:
            connection.disconnect()  # type: ignore[no-untyped-call]  # a reply may be half read
            self.release()
            raise
        if any(_large(reply) for reply in replies):
            connection.disconnect()  # type: ignore[no-untyped-call]
        for reply in replies:
            if isinstance(reply, redis.ResponseError):
                raise reply
        return replies

    def script(self, source: str, keys: list[str], args: list[Any]) -> Any:
        """``EVALSHA``, loading the script first if the server does not know it yet."""
        sha = _sha1(source)
        try:
            return self.command("EVALSHA", sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            self.command("SCRIPT", "LOAD", source)
            return self.command("EVALSHA", sha, len(keys), *keys, *args)

    def _cluster_command(self, args: tuple[Any, ...]) -> Any:
        """The command sent to the primary of its keys' slot, and not sent again by the client after a broken
        connection: redis-py's cluster client sends such a command once more to whichever node its refreshed map
        names (a replica that took over), and says nothing when that works, so a fetch whose first sending ran with
        its reply lost (jobs moved into a working list) would go unseen; here it counts in ``broken``. Redirections
        (MOVED, ASK) are still followed. A command without keys is routed by the client as usual."""
        try:
            slot = self._cluster.determine_slot(*args)
        except (redis.RedisError, redis.exceptions.RedisClusterException):
            slot = None  # no key (SCRIPT LOAD goes to every primary)
        options = {} if slot is None else {"target_nodes": self._cluster.nodes_manager.get_node_from_slot(slot)}
        try:
            return self._cluster.execute_command(*args, **options)
        except redis.ConnectionError:
            self.broken += 1
            raise

    def release(self) -> None:
        """Give the connection back to the pool (the next command takes one again)."""
        if self._cluster is not None:
            return
        connection, self._connection = self._connection, None
        if connection is not None:
            self._pool.release(connection)

    def _take(self) -> Connection:
        self._seen = self._master_changes[0]
        self._connection = self._pool.get_connection()
        return self._connection


# the commands that wait in Redis for their last argument's seconds (0: for ever) before they reply
BLOCKING = frozenset({"BRPOP", "BLPOP", "BLMOVE", "BRPOPLPUSH", "BZPOPMIN", "BZPOPMAX", "BLMPOP"})


def _blocking_reply(connection: Connection, args: tuple[Any, ...]) -> Any:
    """The reply of a blocking command: the connection's timeout (``redis_timeout``) counts from the end of the
    command's own wait, so a fetch that blocks 2 s is not taken for a hung server, and a hung server still is."""
    block = float(args[1] if args[0] == "BLMPOP" else args[-1])  # BLMPOP names its timeout first
    limit = connection.socket_timeout
    return connection.read_response(timeout=None if not block or limit is None else block + limit)


def _large(reply: Any) -> bool:
    """Whether a reply holds a text over ``LARGE_VALUE``: then a dedicated connection reconnects, as hiredis keeps a
    read buffer as large as the largest reply until the connection reads again, which a fetch that blocks may not do
    for seconds, while the job runs with its own copies."""
    if type(reply) is list:  # a list of jobs, or (BLMPOP) a key and a list of jobs
        return any(_large(value) if type(value) is list else type(value) is str and len(value) > LARGE_VALUE
                   for value in reply)  # fmt: skip
    return type(reply) is str and len(reply) > LARGE_VALUE


_shas: dict[str, str] = {}


def _sha1(source: str) -> str:
    sha = _shas.get(source)
    if sha is None:
        sha = _shas[source] = hashlib.sha1(source.encode()).hexdigest()
    return sha
