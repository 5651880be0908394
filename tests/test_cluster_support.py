"""The loopback clusters the cluster tests run on (tests/cluster_support.py), checked with redis-py's RedisCluster
alone, on both servers: formed as asked, hash tags and CROSSSLOT as a cluster has them, and a primary's replica taking
over after a kill -9 and after CLUSTER FAILOVER (the seconds each took are printed: ``pytest -s``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.cluster import RedisCluster
from redis.exceptions import ClusterCrossSlotError

from tests.cluster_support import PRIMARIES, SERVERS, ClusterPool, LoopbackCluster, started_cluster

pytestmark = pytest.mark.cluster


@pytest.fixture(params=SERVERS)
def shared_cluster(request: pytest.FixtureRequest, cluster_pool: ClusterPool) -> LoopbackCluster:
    """The test process's shared cluster of the server, emptied."""
    shared = cluster_pool.get(request.param)
    shared.flush()
    return shared


@pytest.fixture(params=SERVERS)
def own_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LoopbackCluster]:
    """A cluster of the test's own: the test breaks it."""
    yield from started_cluster(tmp_path, request.param)


@pytest.fixture
def client(shared_cluster: LoopbackCluster) -> Iterator[RedisCluster]:
    connection = shared_cluster.client()
    yield connection
    connection.close()


def test_the_cluster_has_three_primaries_each_with_a_replica_and_every_slot(
    shared_cluster: LoopbackCluster, client: RedisCluster
) -> None:
    primaries, replicas = shared_cluster.primaries(), shared_cluster.replicas()
    assert len(primaries) == len(replicas) == PRIMARIES
    assert {shared_cluster.replica_of(primary).port for primary in primaries} == {replica.port for replica in replicas}
    info = client.cluster_info(target_nodes=RedisCluster.RANDOM)
    assert (info["cluster_state"], info["cluster_slots_assigned"], info["cluster_known_nodes"]) == ("ok", "16384", "6")
    assert shared_cluster.url == "redis+cluster://" + ",".join(
        f"127.0.0.1:{node.port}" for node in shared_cluster.nodes
    )


def test_hash_tags_put_keys_in_one_slot_and_keys_without_one_refuse_a_multi_key_command(client: RedisCluster) -> None:
    assert client.keyslot("{kiq}a") == client.keyslot("{kiq}b")
    client.rpush("{kiq}a", "job")
    assert client.lmove("{kiq}a", "{kiq}b") == "job"
    assert client.eval("return redis.call('llen', KEYS[1])", 1, "{kiq}b") == 1
    assert client.keyslot("queue:a") != client.keyslot("queue:b")  # else the CROSSSLOT below proves nothing
    node = client.get_node_from_key("queue:a")  # sent to one node as it is: redis-py would refuse it before sending
    with pytest.raises(ClusterCrossSlotError):  # the server's CROSSSLOT reply
        client.execute_command("LMOVE", "queue:a", "queue:b", "LEFT", "RIGHT", target_nodes=node)


def test_command_counts_and_cpu_are_read_per_primary(shared_cluster: LoopbackCluster, client: RedisCluster) -> None:
    shared_cluster.reset_stats()
    owner = client.get_node_from_key("{kiq}counted")
    for _ in range(5):
        client.incrby("{kiq}counted", 1)
    counts = shared_cluster.primary_command_counts()
    assert counts[f"{owner.host}:{owner.port}"]["incrby"] == 5
    assert sum(per_primary.get("incrby", 0) for per_primary in counts.values()) == 5
    assert all(seconds > 0 for seconds in shared_cluster.primary_cpu_seconds().values())


def test_a_killed_primary_is_replaced_by_its_replica_and_rejoins_as_a_replica_then_cluster_failover_swaps_back(
    own_cluster: LoopbackCluster,
) -> None:
    client = own_cluster.client()
    try:
        client.set("{kiq}kept", "yes")
        primary = own_cluster.primaries()[0]
        replica = own_cluster.replica_of(primary)
        client.execute_command(
            "WAIT", 1, 5000, target_nodes=client.get_node_from_key("{kiq}kept")
        )  # the write reached the replicas

        own_cluster.kill_primary(primary)
        recovered = own_cluster.wait_healthy()
        assert replica in own_cluster.primaries() and primary not in own_cluster.live_nodes()
        assert client.get("{kiq}kept") == "yes"  # redis-py follows the slots to their new primary
        rejoined = own_cluster.revive(primary)
        assert own_cluster.replica_of(replica) == primary

        promoted = own_cluster.failover(primary)
        assert promoted == primary and own_cluster.replica_of(primary) == replica
        client.set("{kiq}after", "failover")
        assert client.get("{kiq}after") == "failover"
    finally:
        client.close()
    print(f"{own_cluster}: recovered from kill -9 in {recovered:.1f}s, rejoined in {rejoined:.1f}s")
