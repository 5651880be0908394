"""A worker's peak memory for a big job stays within 2.5x the payload: a real ``kiq worker`` process, one job of
64 MB that runs through several heartbeats (which write the running jobs to Redis), both fetchers; the peak
resident size (VmHWM) is read from /proc before and after."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import kiq
from tests.jobs.payload import BigArgument
from tests.outage_support import AofRedis, aof_redis
from tests.support import FAST, WorkerProcess, identity_of, wait_until

pytestmark = pytest.mark.slow  # kiq worker processes

PAYLOAD = 64 * 1024 * 1024


@pytest.fixture
def server(tmp_path: Path) -> Iterator[AofRedis]:
    with aof_redis(tmp_path / "redis") as own:
        yield own


def peak_rss(pid: int) -> int:
    """The process's peak resident set size in bytes (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


@pytest.mark.parametrize("fetch", ["basic", "reliable"])
def test_peak_memory_of_a_worker_running_a_64_mb_job_is_within_2_5x(
    server: AofRedis, tmp_path: Path, fetch: str
) -> None:
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc (Linux)")
    env = {**FAST, "KIQ_MAX_PAYLOAD_BYTES": str(2 * PAYLOAD), "KIQ_FETCH": fetch}
    args = ["-r", "tests.jobs.payload", "-q", "default", "-c", "5"]
    watch = server.client()
    with WorkerProcess(args, server.url, tmp_path / "worker.log", env, fork=False) as worker:  # its own memory
        identity = identity_of(watch, worker)  # registered: started, fetching, one heartbeat written
        idle = peak_rss(worker.pid)
        config = kiq.Config(redis_url=server.url, max_payload_bytes=2 * PAYLOAD)
        blob = "x" * (PAYLOAD - 200)
        jid = kiq.Client(config).push({"class": BigArgument, "args": [blob, 2.0]})
        del blob
        # while it runs, the heartbeats show it in the process registry, by its small fields only
        running = wait_until(lambda: watch.hgetall(f"{identity}:work"), 30, message="the job in the registry")
        payload = json.loads(json.loads(next(iter(running.values())))["payload"])
        assert payload["jid"] == jid and payload["class"] == "BigArgument" and "too large" in payload["args"][0]
        wait_until(lambda: watch.hexists("sizes", jid), 60, message="the job done")
        peak = peak_rss(worker.pid)
        assert worker.stop() == 0, worker.output()
    assert int(watch.hget("sizes", jid) or 0) == PAYLOAD - 200
    factor = (peak - idle) / PAYLOAD
    assert factor <= 2.5, f"{fetch}: peak {peak / 2**20:.0f} MB, idle {idle / 2**20:.0f} MB: {factor:.2f}x the payload"
