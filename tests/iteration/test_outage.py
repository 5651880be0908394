"""An interrupted job whose re-push Redis refuses (the server is down right after the job saved its cursor) is held
by the worker's OutcomeKeeper and written once Redis is back: the fetched copy is acknowledged only then, and
nothing is lost. A real redis-server of the test's own is stopped and restarted (AOF keeps what it had)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import kiq
import kiq.ext
from kiq.payload import dumps, new_jid
from kiq.server.outcomes import RedisOutage
from kiq.server.processor import Processor
from tests.outage_support import AofRedis, aof_redis
from tests.support import Unit, fresh_config, wait_until

STOP = threading.Event()


class OutageWalk(kiq.IterableJob):
    kiq_name = "IterationOutageWalk"
    kiq_options = {"queue": "outage"}

    def build_enumerator(self, *, cursor: Any) -> Any:
        return ((index, index) for index in range(cursor or 0, 10))

    def each_iteration(self, index: int) -> None:
        if index == 2:
            STOP.set()


class StopsRedisWhenInterrupted(kiq.ServerMiddleware):
    """Takes Redis away between the job's last save and the worker's re-push."""

    def __init__(self, server: AofRedis) -> None:
        self.server = server

    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> kiq.Wrapper:
        try:
            yield
        except kiq.Interrupted:
            self.server.stop("kill")
            raise


def test_a_re_push_redis_refuses_is_held_then_written(tmp_path: Path) -> None:
    with aof_redis(tmp_path / "redis") as server:
        configs = fresh_config(server.url)
        config = next(configs)
        try:
            config.server_middleware.add(StopsRedisWhenInterrupted, server)
            STOP.clear()
            processor = Processor(config, fetcher=None, stopping=STOP, outage=RedisOutage(config), name="t")  # type: ignore[arg-type]
            jid = new_jid()
            unit = Unit(dumps({"class": OutageWalk.kiq_name, "args": [], "jid": jid, "queue": "outage"}), "outage")
            processor.process(unit)
            assert processor.keeper.held == 1 and unit.acked == 0  # held, not acknowledged, not dropped
            server.start()
            wait_until(lambda: unit.acked == 1, 30, message="the held re-push written and the job acknowledged")
            r = server.client()
            [raw] = r.lrange("queue:outage", 0, -1)
            assert kiq.ext.loads(raw)["jid"] == jid and r.hget(f"it-{jid}", "c") == "3"
            assert processor.keeper.held == 0 and r.zcard("retry") == 0
        finally:
            configs.close()
