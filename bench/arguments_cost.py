"""What keyword arguments and typed arguments (kiq.arguments) cost, in µs: per push (the job normalized, checked and
converted, and encoded: ``Client.encode``), per job (``perform`` called with the payload's arguments converted back:
``kiq.arguments.call_perform``), and the whole single push (``perform_async``, its Redis round trip included); and
what a return annotation costs a result (``kiq.ext.result_form`` at the end of a run, ``result_value`` at a read).

    .venv/bin/python -m bench.arguments_cost REDIS_URL [--count 20000]

Prints ``{"rows": [{"what", "plain_us", "us", "added_us"}, ...]}`` as JSON; bench/profile.py runs it (``make bench``'s
``profile`` part) and bench/all.py shows its rows among the features' costs. Each row compares the same job with
its arguments passed positionally and unannotated (``plain_us``) and passed by keyword, or annotated (``us``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import timeit
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import kiq
import kiq.ext
from kiq.arguments import call_perform

ID = UUID("8f14e45f-ceea-467a-9575-4bc0c8e5b1a2")
WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@dataclasses.dataclass
class BenchOrder:
    id: UUID
    total: Decimal
    placed: datetime


class BenchPlain(kiq.Job):
    """Three unannotated parameters: the baseline (and, by keyword, the cost of keyword arguments alone)."""

    kiq_name = "BenchArgumentsPlain"

    def perform(self, id: Any, amount: Any, when: Any) -> None:
        pass


class BenchTyped(kiq.Job):
    """The same parameters annotated: a UUID, a Decimal and an aware datetime, converted both ways."""

    kiq_name = "BenchArgumentsTyped"

    def perform(self, id: UUID, amount: Decimal, when: datetime) -> None:
        pass


class BenchDataclass(kiq.Job):
    """One dataclass of the three."""

    kiq_name = "BenchArgumentsDataclass"

    def perform(self, order: BenchOrder) -> None:
        pass


class BenchResultPlain(kiq.Job):
    """Returns a value as it is (no return annotation): the baseline of a typed result."""

    kiq_name = "BenchResultPlain"

    def perform(self) -> Any:
        return "12.50"


class BenchResultTyped(kiq.Job):
    """Returns a Decimal, kept in its JSON form and read back as one (kiq.returns)."""

    kiq_name = "BenchResultTyped"

    def perform(self) -> Decimal:
        return Decimal("12.50")


PLAIN = [str(ID), "12.50", WHEN.isoformat()]  # the JSON forms, passed by hand: what a job without annotations gets
CASES: dict[str, tuple[type[kiq.Job], list[Any], dict[str, Any]]] = {
    "keyword arguments (3, JSON values)": (BenchPlain, [], dict(zip(("id", "amount", "when"), PLAIN, strict=True))),
    "typed arguments (UUID, Decimal, datetime)": (BenchTyped, [ID, Decimal("12.50"), WHEN], {}),
    "typed arguments by keyword": (BenchTyped, [], {"id": ID, "amount": Decimal("12.50"), "when": WHEN}),
    "a dataclass of the three": (BenchDataclass, [BenchOrder(ID, Decimal("12.50"), WHEN)], {}),
}


def _us(step: Callable[[], Any], count: int) -> float:
    step()
    return min(timeit.repeat(step, number=count, repeat=5)) / count * 1e6


def measure(count: int) -> list[dict[str, Any]]:
    """The rows: per push, per job and the single push of each case, against the plain positional job."""
    client = kiq.Client()

    def encode(job: type[kiq.Job], args: list[Any], kwargs: dict[str, Any]) -> Callable[[], Any]:
        item = {"class": job, "args": args, **({"kwargs": kwargs} if kwargs else {})}
        return lambda: client.encode(dict(item))

    def run(job: type[kiq.Job], args: list[Any], kwargs: dict[str, Any]) -> Callable[[], Any]:
        encoded = client.encode({"class": job, "args": args, **({"kwargs": kwargs} if kwargs else {})})
        assert encoded is not None
        instance = job()
        instance.job = kiq.ext.loads(encoded[3])
        wire_args = instance.job["args"]
        return lambda: call_perform(instance, wire_args)

    def push(job: type[kiq.Job], args: list[Any], kwargs: dict[str, Any]) -> Callable[[], Any]:
        return lambda: job.perform_async(*args, **kwargs)

    def timed(step: Callable[[], Any]) -> float:
        us = _us(step, count)
        kiq.default_config().redis.delete("queue:default")  # the single pushes' jobs
        return us

    rows = []
    for kind, make in (("per push (encode)", encode), ("per job (perform)", run), ("single push", push)):
        for what, (job, args, kwargs) in CASES.items():
            plain = timed(make(BenchPlain, PLAIN, {}))  # again beside each case: the machine's pace drifts
            us = timed(make(job, args, kwargs))
            rows.append({"what": f"{what}: {kind}", "plain_us": plain, "us": us, "added_us": us - plain})
    for kind, plain_step, step in (
        ("its JSON form (per job)", lambda: kiq.ext.result_form(BenchResultPlain, "12.50"),
         lambda: kiq.ext.result_form(BenchResultTyped, Decimal("12.50"))),
        ("read back (per result read)", lambda: kiq.ext.result_value(BenchResultPlain, "12.50"),
         lambda: kiq.ext.result_value(BenchResultTyped, "12.50")),
    ):  # fmt: skip
        plain, us = _us(plain_step, count), _us(step, count)
        rows.append({"what": f"a typed result (Decimal): {kind}", "plain_us": plain, "us": us, "added_us": us - plain})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.arguments_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("redis_url")
    parser.add_argument("--count", type=int, default=20_000, help="calls per timing")
    args = parser.parse_args(argv)
    kiq.default_config().redis_url = args.redis_url
    print(json.dumps({"rows": measure(args.count)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
