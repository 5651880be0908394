"""What running a Rails ActiveJob payload costs a kiq worker, in µs per job, next to a plain job: the payload parsed,
its class looked up, and for the ActiveJob one the envelope unwrapped (``kiq_unwrap_job``: the arguments decoded by
ActiveJob's rules, the Envelope made) through the same function the processor calls (kiq.server.runner.unwrap).

    .venv/bin/python -m bench.activejob_cost [--count 20000]

Prints ``{"rows": [{"what", "plain_us", "us", "added_us"}, ...]}`` as JSON, the shape of bench/arguments_cost.py's
rows. No Redis: only the per-job CPU work differs between the two kinds of payload.
"""

from __future__ import annotations

import argparse
import json
import timeit
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import kiq
from kiq.payload import dumps, parse_payload
from kiq.plugins.activejob import Symbol, job
from kiq.server.runner import unwrap


class BenchReport(kiq.Job):
    kiq_name = "BenchReportJob"

    def perform(self, *args: Any, **kwargs: Any) -> None:
        pass


JSON_ARGS = (7, "x", [1, 2])
TYPED_ARGS = (Decimal("12.50"), date(2026, 11, 25), datetime(2026, 11, 25, 9, 16, 38, tzinfo=UTC), {Symbol("a"): 1})


def _us(step: Callable[[], Any], count: int) -> float:
    step()
    return min(timeit.repeat(step, number=count, repeat=5)) / count * 1e6


def measure(count: int = 20000) -> list[dict[str, Any]]:
    config = kiq.Config(plugins=["activejob"])
    plain = dumps({"class": "BenchReportJob", "args": list(JSON_ARGS), "jid": "a" * 24, "queue": "default"})
    cases = {
        "ActiveJob envelope, 3 JSON arguments": job("BenchReportJob", config).payload(JSON_ARGS, {}),
        "ActiveJob envelope, BigDecimal, Date, Time, symbol-keyed hash and a keyword": job(
            "BenchReportJob", config
        ).payload(TYPED_ARGS, {"mode": Symbol("fast")}),
    }

    def run(payload: str) -> Callable[[], Any]:
        def step() -> Any:
            parsed = parse_payload(payload)
            return kiq.registry.find(parsed["class"]) or unwrap(config, parsed)

        return step

    plain_us = _us(run(plain), count)
    rows = []
    for what, payload in cases.items():
        us = _us(run(dumps({**payload, "jid": "b" * 24})), count)
        rows.append(
            {"what": what, "plain_us": round(plain_us, 2), "us": round(us, 2), "added_us": round(us - plain_us, 2)}
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20000)
    print(json.dumps({"rows": measure(parser.parse_args().count)}, indent=2))


if __name__ == "__main__":
    main()
