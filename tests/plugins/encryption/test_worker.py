"""Encrypted arguments with real workers (in this process) and a real Redis: what Redis holds (queue, schedule,
retry, dead, the running job's entry) never contains the clear value, the job receives it, a key is rotated, and a
payload that cannot be opened (unknown key version, tampered, another producer's) fails into the retry set with an
error naming the field and the key version; the logs, the API, the CLI and the dashboard show ``[encrypted]``."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import redis

import kiq
from kiq.api import DeadSet, Queue, RetrySet, ScheduledSet
from kiq.cli import main
from kiq.contrib.web import wsgi_app
from tests.contrib.web.conftest import serve
from tests.jobs.encryption import RECEIVED, AsyncCharge, ChargeCard, Enroll, FailingCharge
from tests.support import FAST, InProcessWorker, make_retries_due, raw_redis, wait_until

StartWorker = Callable[..., InProcessWorker]
WORKER = ("-r", "tests.jobs.encryption", "-c", "2")
CARD = "4242-4242-4242-4242"
SSN = "078-05-1120"
KEY_1, KEY_2 = (base64.b64encode(os.urandom(32)).decode() for _ in range(2))


def keys(**versions: str) -> str:
    return json.dumps({name.removeprefix("v"): key for name, key in versions.items()})


def worker_env(key_json: str) -> dict[str, str]:
    return {**FAST, "KIQ_PLUGINS": "encryption", "KIQ_ENCRYPTION_KEYS": key_json, "KIQ_POLL_INTERVAL": "0.2"}


@pytest.fixture
def config(e2e_config: kiq.Config) -> kiq.Config:
    e2e_config.add_plugin("encryption")
    e2e_config.encryption_keys = keys(v1=KEY_1)
    return e2e_config


def stored(r: redis.Redis) -> bytes:
    """Every byte of every value in Redis (lists, sorted sets, hashes, sets, strings), keys included, but the test
    jobs' own record of what they received."""
    out = []
    for key in r.scan_iter():
        if key == RECEIVED.encode():
            continue
        kind = r.type(key)
        out.append(key)
        if kind == b"list":
            out += r.lrange(key, 0, -1)
        elif kind == b"zset":
            out += r.zrange(key, 0, -1)
        elif kind == b"hash":
            out += [part for pair in r.hgetall(key).items() for part in pair]
        elif kind == b"set":
            out += list(r.smembers(key))
        elif kind == b"string":
            out.append(r.get(key) or b"")
    return b"\n".join(out)


def received(r: redis.Redis) -> dict[str, Any]:
    return {entry[0]: entry[1:] for entry in map(json.loads, r.lrange(RECEIVED, 0, -1))}


def test_redis_holds_no_clear_value_and_the_jobs_receive_it(config: kiq.Config, start_worker: StartWorker) -> None:
    r = raw_redis(config)
    charged = ChargeCard.perform_async(7, CARD)
    enrolled = Enroll.perform_async(8, ssn=SSN, card={"number": CARD}, note="visible")
    later = ChargeCard.perform_in(3600, 9, CARD)
    awaited = AsyncCharge.perform_async(10, CARD)
    everything = stored(r)
    assert CARD.encode() not in everything and SSN.encode() not in everything
    assert everything.count(b"kiq-enc:1:") == 5 and b"visible" in everything  # the other keyword argument is clear
    (scheduled,) = ScheduledSet(config)
    assert scheduled.display_args == [9, "[encrypted]"]
    assert [job.display_args for job in Queue("default", config)][::-1] == [
        [7, "[encrypted]"],
        [8],
        [10, "[encrypted]"],
    ]
    assert Queue("default", config).find_job(enrolled).display_kwargs == {  # type: ignore[union-attr]
        "ssn": "[encrypted]",
        "card": "[encrypted]",
        "note": "visible",
    }

    worker = start_worker(*WORKER, env=worker_env(keys(v1=KEY_1)))
    wait_until(lambda: len(received(r)) == 3, message=f"the jobs to run\n{worker.output()}")
    r.zadd("schedule", {r.zrange("schedule", 0, 0)[0]: time.time()})  # due now: the poller pushes it again
    wait_until(lambda: later in received(r), message="the scheduled job to run")
    assert received(r) == {
        charged: [[7, CARD], {}],
        enrolled: [[8], {"ssn": SSN, "card": {"number": CARD}, "note": "visible"}],
        later: [[9, CARD], {}],  # sealed once: the poller's push did not seal it again
        awaited: [[10, CARD], {}],
    }
    assert CARD not in worker.output() and "kiq-enc" not in worker.output()
    assert CARD.encode() not in stored(r)


def test_retry_and_dead_entries_stay_encrypted_and_show_as_encrypted(
    config: kiq.Config, start_worker: StartWorker, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    r = raw_redis(config)
    jid = FailingCharge.perform_async(7, CARD)
    sealed = json.loads(r.lindex("queue:default", 0))["args"][-1]  # type: ignore[arg-type]
    worker = start_worker(*WORKER, env=worker_env(keys(v1=KEY_1)))
    wait_until(lambda: RetrySet(config).size == 1, message=f"the job to fail\n{worker.output()}")
    (retry,) = RetrySet(config)
    assert retry.item["args"] == [7, sealed]  # the stored form, not the clear arguments the job ran with
    assert retry.display_args == [7, "[encrypted]"] and retry.as_dict()["args"] == [7, "[encrypted]"]
    make_retries_due(config.redis)
    wait_until(lambda: DeadSet(config).size == 1, message=f"the job to die\n{worker.output()}")
    assert received(r)[jid] == [[7, CARD], {}]
    (dead,) = DeadSet(config)
    assert dead.item["args"] == [7, sealed] and dead.error_message == "the gateway said no"
    assert CARD.encode() not in stored(r)
    assert CARD not in worker.output() and sealed not in worker.output()

    capsys.readouterr()
    monkeypatch.setenv("KIQ_PLUGINS", "encryption")  # the CLI needs no key to hide the values
    assert main(["dead", "--redis-url", str(config.redis_url), "--json"]) == 0
    listed = capsys.readouterr().out
    assert main(["dead", "--redis-url", str(config.redis_url)]) == 0
    listed += capsys.readouterr().out
    assert "[encrypted]" in listed and CARD not in listed and sealed not in listed

    pages = dashboard_pages(config, ["/dead", f"/dead/{dead.score!r}-{jid}"])
    assert "[encrypted]" in pages and CARD not in pages and sealed not in pages


def dashboard_pages(config: kiq.Config, paths: list[str]) -> str:
    url, stop = serve(wsgi_app(config, False, None))
    try:
        return "".join(httpx.get(url + path, follow_redirects=True).text for path in paths)
    finally:
        stop()


def test_rotation_a_job_sealed_with_the_old_key_runs_after_a_new_key_is_added(
    config: kiq.Config, start_worker: StartWorker
) -> None:
    r = raw_redis(config)
    old = ChargeCard.perform_async(1, CARD)
    config.encryption_keys = keys(v1=KEY_1, v2=KEY_2)  # the new key is the highest: new pushes use it
    new = ChargeCard.perform_async(2, CARD)
    versions = [json.loads(entry)["args"][-1].split(":")[1] for entry in r.lrange("queue:default", 0, -1)]
    assert versions == ["2", "1"]
    worker = start_worker(*WORKER, env=worker_env(keys(v1=KEY_1, v2=KEY_2)))
    wait_until(lambda: len(received(r)) == 2, message=f"the jobs to run\n{worker.output()}")
    assert received(r) == {old: [[1, CARD], {}], new: [[2, CARD], {}]}


def test_a_worker_without_the_key_version_sends_the_job_to_retry_naming_the_version(
    config: kiq.Config, start_worker: StartWorker
) -> None:
    r = raw_redis(config)
    config.encryption_keys = keys(v2=KEY_2)
    jid = ChargeCard.perform_async(7, CARD)
    worker = start_worker(*WORKER, env=worker_env(keys(v1=KEY_1)))
    wait_until(lambda: RetrySet(config).size == 1, message=f"the job to fail\n{worker.output()}")
    (retry,) = RetrySet(config)
    assert retry.error_class == "kiq.plugins.encryption.DecryptionError"
    assert retry.error_message == (
        "args[-1] was encrypted with key version 2, which this process's encryption_keys lack (versions 1): add "
        "that key to KIQ_ENCRYPTION_KEYS and the job runs at its next retry"
    )
    assert jid not in received(r)
    output = worker.output()
    assert "key version 2" in output and CARD not in output and "kiq-enc" not in output
    pages = dashboard_pages(config, ["/retries", f"/retries/{retry.score!r}-{jid}"])
    assert "key version 2" in pages and "[encrypted]" in pages and CARD not in pages and "kiq-enc" not in pages
    assert CARD.encode() not in stored(r)


def test_tampered_or_foreign_payloads_never_run_and_retry_with_a_clear_error(
    config: kiq.Config, start_worker: StartWorker
) -> None:
    r = raw_redis(config)
    ChargeCard.perform_async(1, CARD)
    genuine = json.loads(r.lindex("queue:default", 0))  # type: ignore[arg-type]
    r.delete("queue:default")
    sealed = genuine["args"][-1]
    version, body = sealed.rsplit(":", 1)[0], base64.b64decode(sealed.rsplit(":", 1)[1])
    flipped = bytes([body[-1] ^ 1])
    bad = {  # jid -> (last argument or payload change, the error it must give)
        "a" * 24: (
            {"args": [1, f"{version}:{base64.b64encode(body[:-1] + flipped).decode()}"]},
            "failed authentication",
        ),
        "b" * 24: ({"args": [1, f"{version}:{base64.b64encode(body[:20]).decode()}"]}, "is truncated"),
        "c" * 24: ({"args": [1, f"{version}:not base64!"]}, "a kiq-enc: value of a wrong form"),
        "d" * 24: ({"args": [1, 4242]}, "args[-1] is of type int, not an encrypted value"),
        "e" * 24: ({"args": [1, CARD + "\x00"]}, "args[-1] is not an encrypted value (20 characters)"),
        "f" * 24: ({"args": [1, "x" * 5_000_000]}, "args[-1] is not an encrypted value (5000000 characters)"),
        "0" * 24: ({"args": [1, sealed], "class": "EncAsyncCharge"}, "failed authentication"),  # moved to another job
        "1" * 24: ({"args": [1, sealed], "encrypt": "yes"}, "the encrypt option must be true"),
        "2" * 24: ({"args": []}, "no positional argument to decrypt"),
        "3" * 24: ({"args": [1, f"{version}:abcde"]}, "is not valid base64"),
    }
    for jid, (change, _) in bad.items():
        r.lpush("queue:default", json.dumps({**genuine, "jid": jid, **change}))
    worker = start_worker(*WORKER, env=worker_env(keys(v1=KEY_1)))
    wait_until(lambda: RetrySet(config).size == len(bad), message=f"the jobs to fail\n{worker.output()}")
    errors = {entry.jid: (entry.error_class, entry.error_message) for entry in RetrySet(config)}
    for jid, (_, error) in bad.items():
        assert errors[jid][0] == "kiq.plugins.encryption.DecryptionError" and error in str(errors[jid][1]), (
            jid,
            errors[jid],
        )
    assert received(r) == {}  # none ran
    assert CARD not in "".join(str(message) for _, message in errors.values()) and CARD not in worker.output()
