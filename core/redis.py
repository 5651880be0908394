"""The one place that builds Redis clients: a URL's server (standalone, Sentinel, Cluster), or the embedded server
in ``./.kiq/`` (kiq.embedded). Replies are decoded with surrogateescape, and text is packed back the same way.

The other rooms of the Redis layer: kiq.pipeline (round trips of many commands, per-pool state), kiq.connection (a
fetcher's dedicated connection), kiq.embedded (the development server), kiq.failures (what a Redis error means).
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import redis
import redis.asyncio as redis_async
from redis.connection import Connection, HiredisRespSerializer
from redis.utils import HIREDIS_AVAILABLE

from .embedded import EmbeddedRedis
from .errors import ConfigError
from .keys import Keyspace, Slots, keyspace
from .version import __version__

log = logging.getLogger("kiq")

# Replies are decoded per value with "surrogateescape": a payload that is not valid UTF-8 (written by another
# producer, a bug or an attacker) arrives as text whose bad bytes are lone surrogates U+DC80..U+DCFF, instead of
# an error that would lose every other job of the same reply; written back, it is the same bytes again.
ENCODING_ERRORS = "surrogateescape"

DEFAULT_TIMEOUT = 5.0  # seconds a reply may take: the ``redis_timeout`` setting's default
MAX_BLOCK = 2.0  # seconds a fetcher blocks in Redis at most (the fetcher seam's contract)

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
    url: str | None,
    embedded_dir: str = ".kiq",
    pool_size: int = 20,
    embedded: bool = True,
    slots: Slots = "one",
    timeout: float = DEFAULT_TIMEOUT,
) -> redis.Redis:
    """A pooled client for ``url`` (``redis://``, ``rediss://``, ``unix://``, ``redis+sentinel://``,
    ``redis+cluster://``), or for the embedded server when ``url`` is None (a ConfigError when ``embedded`` is off).
    A cluster's client carries the keyspace of the ``slots`` layout (``kiq.ext.keyspace``). ``timeout``: seconds a
    reply may take (the ``redis_timeout`` setting; see ``_client_options``)."""
    url, options = _client_options(url, embedded_dir, pool_size, embedded, timeout)
    if url.startswith(CLUSTER_SCHEMES):
        from redis.cluster import ClusterNode

        from .resharding import ReshardingCluster

        options["connection_class"] = _SurrogateSafeConnection
        # a cluster client sends each command itself, with no way to wait longer for one: its fetches block
        options["socket_timeout"] = timeout + MAX_BLOCK
        return _cluster(url, options, slots, ReshardingCluster, ClusterNode)  # type: ignore[no-any-return]
    if HIREDIS_AVAILABLE:  # without hiredis, redis-py's own packer applies encoding_errors itself
        options["command_packer"] = _SurrogateSafePacker()
    if url.startswith("redis+sentinel://"):
        from redis.sentinel import Sentinel

        from .sentinel import SentinelConnection

        return _sentinel(url, options, Sentinel, SentinelConnection)  # type: ignore[no-any-return]
    # a blocking pool waits for a free connection instead of failing when every one is in use
    pool = _from_url(redis.BlockingConnectionPool, url, options)
    return redis.Redis(connection_pool=pool)


def connect_async(
    url: str | None,
    embedded_dir: str = ".kiq",
    pool_size: int = 20,
    embedded: bool = True,
    slots: Slots = "one",
    timeout: float = DEFAULT_TIMEOUT,
) -> redis_async.Redis:
    """``connect`` for asyncio (kiq.AsyncClient): the same URLs, options and decoding, on ``redis.asyncio``. Its
    connections belong to the event loop that opens them."""
    url, options = _client_options(url, embedded_dir, pool_size, embedded, timeout)
    if url.startswith(CLUSTER_SCHEMES):
        from redis.asyncio.cluster import ClusterNode as AsyncClusterNode

        from .resharding import AsyncReshardingCluster

        return _cluster(url, options, slots, AsyncReshardingCluster, AsyncClusterNode)  # type: ignore[no-any-return]
    if url.startswith("redis+sentinel://"):
        from redis.asyncio.sentinel import Sentinel as AsyncSentinel

        from .sentinel import AsyncSentinelConnection

        return _sentinel(url, options, AsyncSentinel, AsyncSentinelConnection)  # type: ignore[no-any-return]
    pool = _from_url(redis_async.BlockingConnectionPool, url, options)
    return redis_async.Redis(connection_pool=pool)


def _client_options(
    url: str | None, embedded_dir: str, pool_size: int, embedded: bool, timeout: float
) -> tuple[str, dict[str, Any]]:
    """The URL to connect to (the embedded server's when ``url`` is None) and the client options kiq uses.

    Every read and write has a ``timeout``: a hung server (SIGSTOPped, a frozen VM) answers nothing and keeps the
    connection open, which without one blocks a job's outcome, a heartbeat or a stop forever instead of being an
    outage (its writes held, logged once). The pools' connections make no retries of their own (redis-py's default
    for them): a hung server would take every retry's timeout in turn, where one is enough to know."""
    options: dict[str, Any] = {
        "decode_responses": True,
        "encoding_errors": ENCODING_ERRORS,
        "max_connections": pool_size,
        "socket_connect_timeout": min(timeout, 5),
        "socket_timeout": timeout,
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


def _sentinel(url: str, options: dict[str, Any], sentinel_class: Any, connection_class: Any) -> Any:
    """``redis+sentinel://[:password@]host:port[,host:port]/service_name[/db]``: the master's client, from
    ``sentinel_class`` (redis-py's Sentinel, sync or asyncio), its connections of ``connection_class``
    (kiq.sentinel: each asks the Sentinels whenever it connects)."""
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
    return sentinel.master_for(parts[0], connection_class=connection_class)
