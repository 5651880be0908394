"""bench/cluster.py: its report on synthetic drains, and a short real run (a private 3-primary cluster, a standalone
redis-server and kiq workers: the harness end to end, `make bench` runs it long)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from bench import cluster, cluster_report

QUEUE = "cluster, slots = queue"


def _drain(
    target: str, fetch: str, queues: dict[str, str], rate: float, redis_us: float, **extra: Any
) -> dict[str, Any]:
    nodes = extra.pop("nodes", {"6490": {"calls": 100, "redis_us": redis_us}})
    return {
        "setup": f"{target}, {fetch}", "target": target, "fetch": fetch, "queues": queues, "version": "0.1.0",
        "jobs": 1000, "jobs/s": rate, "redis_us": redis_us, "worker_us": 20.0, "nodes": nodes, "notes": [], **extra,
    }  # fmt: skip


def _rounds(rates: list[float], redis_us: float) -> list[dict[str, float]]:
    return [{"round": n, "jobs/s": rate, "redis_us": redis_us, "worker_us": 20.0} for n, rate in enumerate(rates)]


def _run() -> dict[str, Any]:
    spread = {"7600": {"calls": 120, "redis_us": 1.5}, "7601": {"calls": 100, "redis_us": 1.2}}
    spread["7602"] = {"calls": 80, "redis_us": 1.1}
    abc = {"a": "7602", "b": "7600", "c": "7601"}
    drains = [
        _drain("standalone", "basic", {"default": "6490"}, 40_000.0, 4.0),
        _drain("cluster, slots = one", "basic", {"default": "7602"}, 30_000.0, 5.0,
               notes=["heartbeat: 'RedisCluster' object has no attribute 'connection_pool'"]),
        {"setup": "cluster, slots = one, reliable", "target": "cluster, slots = one", "fetch": "reliable",
         "error": "no job taken within 20 s: EVALSHA - all keys\nmust map | to the same key slot"},
        _drain("standalone", "basic", {"a": "6490", "b": "6490", "c": "6490"}, 34_000.0, 4.0,
               rounds=_rounds([36_000.0, 30_000.0, 34_000.0], 4.0)),
        _drain(QUEUE, "basic", abc, 18_000.0, 3.8, nodes=spread, rounds=_rounds([18_000.0, 21_000.0, 17_000.0], 3.8)),
    ]  # fmt: skip
    settings = {"jobs": 1000, "rounds": 3, "primaries": 3, "poll_us": 10.0, "cluster": "c", "standalone": "s"}
    settings["spread_queues"] = {"a": [15495, 7602], "b": [3300, 7600], "c": [7365, 7601]}
    return {"command": "c", "date": "d", "machine": {}, "settings": settings, "drains": drains}


def test_the_report_gives_ratios_to_standalone_the_spread_per_primary_and_the_target() -> None:
    run = _run()
    text = cluster_report.markdown(run)
    lines = text.splitlines()
    one = next(line for line in lines if line.startswith("| cluster, slots = one | basic | default"))
    assert "| 30,000 (0.75x) | 5.00 (1.25x) | 20.0 (1.00x) |" in one
    spread_drain = next(line for line in lines if line.startswith(f"| {QUEUE} | basic | a, b, c"))
    # against the standalone drain over 3 queues, round by round: 0.50x, 0.70x, 0.50x
    assert "| 18,000 (0.50x) | 3.80 (0.95x) | 20.0 (1.00x) |" in spread_drain
    failed = next(line for line in lines if line.startswith("| cluster, slots = one | reliable"))
    assert "not measured: no job taken within 20 s: EVALSHA - all keys must map / to the same key slot" in failed
    assert (
        "the median of 3 drains (17,000 to 21,000 jobs/s); jobs/s over the standalone drain's round by round: "
        "0.50x, 0.70x, 0.50x" in text
    )
    assert "every job ran (retry and dead empty), but the worker logged `heartbeat:" in text
    assert "| cluster, slots = queue, basic | :7600 | b | 120 | 0.12 | +20% | 1.50 |" in text
    assert "| cluster, slots = queue, basic | :7602 | a | 80 | 0.08 | -20% | 1.10 |" in text
    assert "| 20% | within ±25% |" in text
    (target,) = cluster_report.targets(run)
    assert target[1] == ":7600 +20%, :7601 +0%, :7602 -20% (largest **20%**)" and target[2] == "met"
    run["drains"][-1]["nodes"]["7602"]["calls"] = 40  # 260 calls: 7600 gets 138 % of an even share
    assert cluster_report.targets(run)[0][2] == "**not met**"
    costs = {row[0]: row[1] for row in cluster_report.costs(run)}
    assert costs["Redis Cluster (3 primaries), slots = one: basic drain, 1 queue"] == "0.75x the standalone drain"
    assert costs["Redis Cluster (3 primaries), slots = queue: basic drain, 3 queues"] == "0.50x the standalone drain"


def test_the_spread_queues_fall_on_different_primaries_and_the_log_errors_are_kept_once(tmp_path: Path) -> None:
    owners = {(0, 5460): 7600, (5461, 10921): 7601, (10922, 16383): 7602}
    assert cluster.spread_queues(owners, 3) == ("a", "b", "c")  # slots 15495, 3300, 7365
    assert cluster.spread_queues({(0, 16383): 7600}, 1) == ("a",)
    with pytest.raises(ValueError, match="3 queues on different primaries need 3 primaries"):
        cluster.spread_queues({(0, 16383): 7600}, 3)
    log = tmp_path / "worker.log"
    log.write_text(
        "2026-11-25T15:45:40Z pid=1 tid=a WARNING: heartbeat: boom\n"
        'Traceback (most recent call last):\n  File "x.py", line 1, in f\n    g()\nAttributeError: no pool\n'
        "2026-11-25T15:45:41Z pid=1 tid=a WARNING: heartbeat: boom\n"
        "2026-11-25T15:45:41Z pid=1 tid=a WARNING: job BenchAwait goes to queue 'default', which this worker does "
        "not serve (its queues: a, b, c)\n"
    )
    assert cluster.logged_errors(log) == ["heartbeat: boom", "AttributeError: no pool"]


def _free_base(count: int) -> int:
    """A port with ``count`` free ports from it, and their cluster bus ports (+10,000) free too."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            base = int(sock.getsockname()[1])
        if base + 10_000 + count > 65_535:
            continue
        ports = [base + i for i in range(count)] + [base + 10_000 + i for i in range(count)]
        if all(_free(port) for port in ports):
            return base
    raise RuntimeError("no free ports for a cluster")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.mark.slow
def test_a_short_run_drains_every_layout_and_spreads_three_queues_over_three_primaries(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    argv = ["--jobs", "1000", "--rounds", "1", "--fetches", "basic", "--port", str(_free_base(1))]
    argv += ["--cluster-port", str(_free_base(3)), "--out", str(tmp_path), "--json", str(out), "--no-pin"]
    assert cluster.main(argv) == 0
    run = json.loads(out.read_text())
    drains = {(row["target"], len(row["queues"])): row for row in run["drains"]}
    assert len(drains) == 6 and not [row["error"] for row in run["drains"] if row.get("error")]
    assert all(row["jobs"] == 1000 and row["jobs/s"] > 0 and row["redis_us"] > 0 for row in drains.values())
    spread = drains[QUEUE, 3]
    assert len(set(spread["queues"].values())) == 3  # a queue on each primary
    assert all(node["calls"] > 0 for node in spread["nodes"].values())
    one = drains["cluster, slots = one", 3]
    assert sorted(node["calls"] > 0 for node in one["nodes"].values()) == [False, False, True]  # all on one primary
    assert "| largest deviation |" in cluster_report.markdown(run)


def test_make_bench_runs_the_cluster_part_and_reports_its_tables_costs_and_target(tmp_path: Path) -> None:
    from bench import all as everything

    args = everything.parse_args(["--quick", "--parts", "cluster", "--port", "6391"])
    command = everything.commands(args, tmp_path, 0)["cluster"]
    assert command[1:4] == ["-m", "bench.cluster", "--quick"] and command[command.index("--port") + 1] == "6396"
    text = everything.markdown({"command": "c", "date": "d", "parts": {"cluster": _run()}, "errors": {}})
    assert "## A 3-primary Redis Cluster against one redis-server (bench/cluster.py)" in text
    assert "| cluster, slots = queue, basic | :7601 | c | 100 | 0.10 | +0% | 1.20 |" in text
    assert '| cluster, slots = "queue", 3 queues: commands per primary within ±25% |' in text
    assert "| Redis Cluster (3 primaries), slots = one: basic drain, 1 queue | 0.75x the standalone drain |" in text
