"""What the profiling plugin costs a job pushed without a profile token, in µs per job: the server chain around a
no-op ``perform`` with the plugin on, next to the same chain without it; alone (an empty chain, which a job passes
without entering it, next to one layer the job skips) and beside another layer (a middleware that only yields: the
plugin's layer is then one look-up, ``only_with``). A layer that only yields is measured too: what the plugin would
cost as a plain middleware that checks the option in its ``call``.

    .venv/bin/python -m bench.profiling_cost [--count 20000]

Prints ``{"rows": [{"what", "plain_us", "us", "added_us"}, ...]}`` as JSON, the shape of bench/activejob_cost.py's
rows. No Redis: a job without a token never reaches it. Each figure is the fastest of 21 timed repeats of a quarter
of ``--count`` jobs (the quietest moments of a busy machine).
"""

from __future__ import annotations

import argparse
import json
import timeit
from typing import Any

import kiq


class BenchNoop(kiq.Job):
    kiq_name = "BenchProfilingNoop"

    def perform(self, number: int) -> None:
        pass


class OnlyYields(kiq.ServerMiddleware):
    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> kiq.Wrapper:
        yield


def _chain_us(config: kiq.Config, count: int) -> float:
    chain = config.server_middleware
    job = {"class": "BenchProfilingNoop", "args": [1], "jid": "a" * 24, "queue": "default"}
    instance = BenchNoop()
    instance.jid, instance.job = job["jid"], job

    def step() -> None:
        chain.invoke((instance, job, "default"), lambda: instance.perform(1))

    step()
    number = max(1, count // 4)
    return min(timeit.repeat(step, number=number, repeat=21)) / number * 1e6


def measure(count: int = 20000) -> list[dict[str, Any]]:
    url = "redis://127.0.0.1:1/0"  # never connected: nothing here reaches Redis
    plain, layer = kiq.Config(redis_url=url), kiq.Config(redis_url=url)
    profiling, both = kiq.Config(redis_url=url, plugins=["profiling"]), kiq.Config(redis_url=url)
    layer.server_middleware.add(OnlyYields)
    both.server_middleware.add(OnlyYields)
    both.add_plugin("profiling")
    plain_us, layer_us, profiling_us, both_us = (_chain_us(config, count) for config in (plain, layer, profiling, both))
    what = "profiling plugin, a job without a profile token"
    rows = [
        (f"{what}: alone in the server chain", plain_us, profiling_us),
        (f"{what}: beside another layer", layer_us, both_us),
        ("(reference) a server middleware that only yields", plain_us, layer_us),
    ]
    return [
        {"what": name, "plain_us": round(base, 2), "us": round(us, 2), "added_us": round(us - base, 2)}
        for name, base, us in rows
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20000)
    print(json.dumps({"rows": measure(parser.parse_args().count)}, indent=2))


if __name__ == "__main__":
    main()
