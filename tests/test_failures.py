"""The Redis failure categories (kiq.failures) on the errors a real redis-server gives."""

from __future__ import annotations

import pytest
import redis
from redis import exceptions

import kiq
import kiq.ext
from kiq.failures import MOVED, REFUSED, TRANSIENT, UNREACHABLE, SlotMigrating, describe, migrating
from tests.sentinel_support import free_port


def raised(call: object) -> BaseException:
    try:
        call()  # type: ignore[operator]
    except BaseException as exc:
        return exc
    raise AssertionError("it did not raise")


def test_a_server_nobody_listens_on_is_unreachable() -> None:
    client = redis.Redis(port=free_port(), socket_connect_timeout=0.5)
    error = raised(client.ping)
    assert isinstance(error, UNREACHABLE) and isinstance(error, TRANSIENT) and not isinstance(error, REFUSED)
    assert describe(error) == "is unreachable"


@pytest.mark.own_redis
def test_maxmemory_is_refused_and_described_as_out_of_memory(config: kiq.Config) -> None:
    r = config.redis
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", "1")
    try:
        error = raised(lambda: r.set("kiq-test:failures", "x"))
    finally:
        r.config_set("maxmemory", "0")
    assert isinstance(error, exceptions.OutOfMemoryError), error
    assert isinstance(error, REFUSED) and isinstance(error, TRANSIENT) and not isinstance(error, UNREACHABLE)
    assert describe(error).startswith("is out of memory (maxmemory reached")


@pytest.mark.own_redis
def test_a_replica_is_refused(config: kiq.Config) -> None:
    r = config.redis
    r.execute_command("REPLICAOF", "127.0.0.1", str(free_port()))  # a master that never answers: it stays a replica
    try:
        error = raised(lambda: r.set("kiq-test:failures", "x"))
    finally:
        r.execute_command("REPLICAOF", "NO", "ONE")
    assert isinstance(error, exceptions.ReadOnlyError), error
    assert isinstance(error, REFUSED) and isinstance(error, TRANSIENT)
    assert describe(error) == f"failed with ReadOnlyError: {error}"


def test_an_error_the_same_write_would_meet_again_is_not_transient(config: kiq.Config) -> None:
    r = config.redis
    r.rpush("kiq-test:failures", "x")
    error = raised(lambda: r.get("kiq-test:failures"))  # WRONGTYPE
    assert isinstance(error, redis.ResponseError) and not isinstance(error, TRANSIENT)
    assert describe(error).startswith("failed with ResponseError: WRONGTYPE")


def test_an_os_error_is_no_redis_category_but_reads_as_unreachable() -> None:
    # a plugin's own file failing is its error, not an outage to hold its write through
    assert not isinstance(OSError("disk full"), TRANSIENT)
    assert describe(ConnectionRefusedError()) == "is unreachable"


def test_the_categories_hold_what_redis_py_raises_for_them() -> None:
    # LOADING is a ConnectionError in redis-py; a cluster's resharding and failover errors are moved
    assert issubclass(exceptions.BusyLoadingError, REFUSED)
    for error in (exceptions.ClusterDownError, exceptions.TryAgainError, exceptions.AskError, exceptions.MovedError):
        assert issubclass(error, MOVED) and issubclass(error, TRANSIENT), error
    assert issubclass(exceptions.SlotNotCoveredError, UNREACHABLE)  # no node serves the slot
    assert kiq.ext.TRANSIENT == TRANSIENT  # the plugin-author surface names the same tuple


@pytest.mark.parametrize(
    "error",
    [
        exceptions.TryAgainError("Multiple keys request during rehashing of slot"),
        exceptions.ClusterError("TTL exhausted."),
        exceptions.ResponseError("Script attempted to access a non local key in a cluster node script: 1f, on @x:3."),
        exceptions.ResponseError("Attempted to access a non local key in a cluster node script: on @user_script:1."),
    ],
    ids=["tryagain", "ttl-exhausted", "redis-script", "valkey-script"],
)
def test_a_slot_being_moved_is_a_resharding_and_transient(error: Exception) -> None:
    """What Redis 7 and Valkey 9 answer while a slot migrates (tests/test_cluster_resharding.py meets them live)."""
    assert migrating(error)
    assert "moving a slot to another node (a resharding)" in describe(error)
    assert isinstance(SlotMigrating("x"), MOVED) and isinstance(SlotMigrating("x"), TRANSIENT)
    assert not migrating(exceptions.ResponseError("ERR wrong number of arguments"))
    assert not migrating(exceptions.ClusterError("Cluster mode is not enabled"))
