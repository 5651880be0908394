"""Jobs for tests/plugins/profiling and the Profiles tab's browser test (``-r tests.jobs.profiling``): CPU-bound
work in named functions, so a profile of it shows them."""

from __future__ import annotations

import asyncio

import kiq


def crunch_numbers(rounds: int) -> int:
    """CPU-bound: sums of squares, many calls (pyinstrument samples at calls)."""
    return sum(square_sum(n % 500) for n in range(rounds))


def square_sum(n: int) -> int:
    return sum(i * i for i in range(n))


class CrunchReport(kiq.Job):
    kiq_name = "ProfilingCrunchReport"

    def perform(self, rounds: int) -> None:
        crunch_numbers(rounds)


class FailingCrunch(kiq.Job):
    kiq_name = "ProfilingFailingCrunch"
    kiq_options = {"retry": False}

    def perform(self, rounds: int) -> None:
        crunch_numbers(rounds)
        raise ValueError("the report's totals do not add up")


class AsyncCrunch(kiq.Job):
    kiq_name = "ProfilingAsyncCrunch"

    async def perform(self, rounds: int) -> None:
        await asyncio.sleep(0.05)
        crunch_numbers(rounds)
