"""Expiring jobs: a job that has not started within ``expires_in`` seconds of being due is dropped.

    class RefreshQuote(kiq.Job):
        kiq_options = {"expires_in": 30}          # a quote nobody waits for after 30 s is not worth computing

    RefreshQuote.set(expires_in=5).perform_async(42)

Enable it with ``plugins = ["expiry"]`` in the processes that push such jobs (they stamp the deadline) and in the
workers (they check it). See the README, "Expiring jobs".
"""

from __future__ import annotations

import kiq
import kiq.ext

from .middleware import EXPIRED, ExpiryClientMiddleware, ExpiryServerMiddleware

__all__ = ["ExpiryPlugin", "expired_counts"]


class ExpiryPlugin:
    @kiq.hookimpl
    def kiq_job_options(self) -> list[str]:
        return ["expires_in", "expires_at"]

    @kiq.hookimpl
    def kiq_client_middleware(self, chain: kiq.Chain[kiq.ClientMiddleware]) -> None:
        chain.add(ExpiryClientMiddleware)

    @kiq.hookimpl
    def kiq_server_middleware(self, chain: kiq.Chain[kiq.ServerMiddleware]) -> None:
        chain.prepend(ExpiryServerMiddleware)  # outermost: an expired job costs no other plugin's work


def expired_counts(config: kiq.Config | None = None) -> dict[str, int]:
    """How many jobs were dropped because their deadline had passed, by job class (every worker on the Redis)."""
    redis = (config or kiq.default_config()).redis
    counts = redis.hgetall(kiq.ext.keyspace(redis).key(EXPIRED))
    return {str(name): int(count) for name, count in counts.items()}
