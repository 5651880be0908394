"""``max_payload_bytes``: a job whose JSON is larger is refused at push, with an error naming its size, the limit
and the setting, and nothing is written (one job, a bulk push with the big job in its last batch, scheduled jobs,
the sync and the asyncio client)."""

from __future__ import annotations

import json
import re
import time

import pytest
import redis

import kiq
from tests.support import run_async as run


class Sized(kiq.Job):
    kiq_name = "Sized"

    def perform(self, text: str) -> None: ...


LIMIT = 4096


@pytest.fixture
def limited(config: kiq.Config) -> kiq.Config:
    config.max_payload_bytes = LIMIT
    return config


def refused_size(error: pytest.ExceptionInfo[kiq.PayloadTooLarge]) -> int:
    message = str(error.value)
    assert f"max_payload_bytes = {LIMIT:,}" in message and "nothing was pushed" in message
    found = re.search(r"is ([\d,]+) bytes of JSON", message)
    assert found, message
    return int(found.group(1).replace(",", ""))


def test_the_default_is_8_mib() -> None:
    assert kiq.Config(redis_url="redis://127.0.0.1:1").max_payload_bytes == 8 * 1024 * 1024


def test_a_single_push_over_the_limit_is_refused_naming_size_limit_and_setting(
    limited: kiq.Config, r: redis.Redis
) -> None:
    with pytest.raises(kiq.PayloadTooLarge) as refused:
        Sized.perform_async("x" * LIMIT)
    assert refused_size(refused) > LIMIT
    with pytest.raises(kiq.PayloadTooLarge):
        Sized.perform_in(60, "x" * LIMIT)
    assert r.dbsize() == 0
    assert Sized.perform_async("x" * (LIMIT - 200))  # just under: pushed
    assert r.llen("queue:default") == 1


def test_the_size_is_counted_in_utf8_bytes_not_characters(limited: kiq.Config, r: redis.Redis) -> None:
    text = "é" * (LIMIT // 2)  # LIMIT / 2 characters, LIMIT bytes in UTF-8
    with pytest.raises(kiq.PayloadTooLarge) as refused:
        Sized.perform_async(text)
    data = json.dumps({"text": text}, ensure_ascii=False).encode()
    assert refused_size(refused) > len(data) - 20
    assert r.dbsize() == 0


def test_a_bulk_push_with_one_big_job_in_its_last_batch_writes_nothing(limited: kiq.Config, r: redis.Redis) -> None:
    args = [[str(number)] for number in range(2500)] + [["x" * LIMIT]]
    with pytest.raises(kiq.PayloadTooLarge):
        Sized.perform_bulk(args)
    assert r.dbsize() == 0


def test_the_asyncio_client_refuses_too(limited: kiq.Config, r: redis.Redis) -> None:
    with pytest.raises(kiq.PayloadTooLarge):
        run(limited, lambda: Sized.aio.perform_async("x" * LIMIT))
    with pytest.raises(kiq.PayloadTooLarge):
        run(limited, lambda: Sized.aio.perform_bulk([["small"], ["x" * LIMIT]]))
    with pytest.raises(kiq.PayloadTooLarge):
        run(limited, lambda: Sized.aio.perform_at(time.time() + 60, "x" * LIMIT))
    assert r.dbsize() == 0


def test_a_limit_below_1024_bytes_is_a_config_error() -> None:
    with pytest.raises(kiq.ConfigError, match="max_payload_bytes"):
        kiq.Config(redis_url="redis://127.0.0.1:1", max_payload_bytes=100)
