"""What the encryption plugin costs, in µs per job, next to the same job without the plugin: at the push (the
client chain, the check and the encoding: ``Client.encode``) and in the worker (the payload parsed and the server
chain run around a no-op ``perform``), for an unencrypted job with the plugin on and for an encrypted one (its last
argument, a 16-character string, sealed with AES-256-GCM and opened).

    .venv/bin/python -m bench.encryption_cost [--count 20000]

Prints ``{"rows": [{"what", "plain_us", "us", "added_us"}, ...]}`` as JSON, the shape of bench/activejob_cost.py's
rows. No Redis (the pushes are encoded, not written): only the per-job CPU work differs.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import time
import timeit
from collections.abc import Callable
from typing import Any

import kiq
import kiq.testing
from kiq.payload import parse_payload

KEYS = {"1": base64.b64encode(os.urandom(32)).decode()}
ARGS = [7, "4242424242424242"]


class Plain(kiq.Job):
    kiq_name = "BenchEncPlain"

    def perform(self, order_id: int, card: str) -> None:
        pass


class Encrypted(Plain):
    kiq_name = "BenchEncEncrypted"
    kiq_options = {"encrypt": True}


def _us(steps: list[Callable[[], Any]], count: int, rounds: int = 7) -> list[float]:
    """CPU µs of this process per call of each step: the best of ``rounds`` rounds, the steps taking turns within
    each round, so that another process's load (on a shared machine) falls on all of them alike."""
    best = [float("inf")] * len(steps)
    for step in steps:
        step()
    for _ in range(rounds):
        for index, step in enumerate(steps):
            best[index] = min(best[index], timeit.Timer(step, timer=time.process_time).timeit(count))
    return [seconds / count * 1e6 for seconds in best]


def push_step(config: kiq.Config, job_class: type[kiq.Job]) -> Callable[[], Any]:
    client = kiq.Client(config)
    return lambda: client.encode({"class": job_class, "args": list(ARGS)})


def job_step(config: kiq.Config, job_class: type[kiq.Job]) -> Callable[[], Any]:
    with kiq.testing.fake(config):
        encoded = kiq.Client(config).encode({"class": job_class, "args": list(ARGS)})
    assert encoded is not None
    payload = encoded[3]
    chain = config.server_middleware

    def step() -> Any:
        job = parse_payload(payload)
        instance = job_class()
        instance.jid, instance.job = job["jid"], job
        return chain.invoke((instance, job, "default"), lambda: instance.perform(*job["args"]))

    return step


def measure(count: int = 20000) -> list[dict[str, Any]]:
    without = kiq.Config()
    with_plugin = kiq.Config(plugins=["encryption"], encryption_keys=KEYS)
    rows = []
    with kiq.testing.fake():  # the pushes are encoded, never written
        for where, step in (("per push (encode)", push_step), ("per job (parse, server chain)", job_step)):
            plain_us, *figures = _us(
                [step(without, Plain), step(with_plugin, Plain), step(with_plugin, Encrypted)], count
            )
            for what, us in zip(
                ("encryption plugin, unencrypted job", "encryption plugin, encrypted job (last argument)"),
                figures,
                strict=True,
            ):
                rows.append({
                    "what": f"{what}: {where}", "plain_us": round(plain_us, 2), "us": round(us, 2),
                    "added_us": round(us - plain_us, 2),
                })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.encryption_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20000)
    print(json.dumps({"rows": measure(parser.parse_args().count)}, indent=2))


if __name__ == "__main__":
    main()
