"""Results: the value a job returned, kept in Redis for a while and readable by jid (opt-in; off by default, as
Sidekiq keeps none).

    class Price(kiq.Job):
        kiq_options = {"result_ttl": 3600}            # keep the return value for an hour

    jid = Price.perform_async(42)
    results.result(jid, wait=5)                       # the value, waiting up to 5 s for it
    await results.aio.result(jid, wait=5)             # the same from asyncio code

Enable it with ``plugins = ["results"]`` in the workers; ``job_result_ttl`` keeps every job's value. With task
tracking on, a tracked job's event holds its result too. See the README, "Results".
"""

from __future__ import annotations

from . import aio
from .plugin import ResultsPlugin, tracked_result
from .store import NoResult, ResultError, result

__all__ = ["NoResult", "ResultError", "ResultsPlugin", "aio", "result", "tracked_result"]
