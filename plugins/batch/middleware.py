"""The batch's two middleware: pushes inside a ``with batch:`` block join the batch (``bid`` in the payload, as
Sidekiq Pro writes it), and a worker records each batch job's outcome in its batch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import kiq

from .context import RunningJob, open_block, running_job

if TYPE_CHECKING:
    import redis

    from .plugin import BatchPlugin


class BatchClientMiddleware(kiq.ClientMiddleware):
    def call(self, job_class: type[kiq.Job] | str, job: dict[str, Any], queue: str, redis: redis.Redis) -> kiq.Wrapper:
        block = open_block.get()
        if block is None or "bid" in job:  # no block, or a job of a batch already (a retry, a callback)
            yield
            return
        job["bid"] = block.bid
        pushed = yield
        if pushed is not None:  # not dropped by an inner middleware, nor refused (that raised at the yield)
            block.jids.append(job["jid"])


class BatchServerMiddleware(kiq.ServerMiddleware):
    """A job of a batch that returned succeeded; one that raised failed (its retries may still make it succeed); one
    an inner layer dropped (``kiq_job_dropped``) failed for good. A job requeued by a hard stop has no outcome yet.
    The outcome is written before the job is acknowledged (kiq.plugins.batch.writer)."""

    def __init__(self, plugin: BatchPlugin) -> None:
        self.plugin = plugin

    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> kiq.Wrapper:
        bid, jid = job.get("bid"), job.get("jid")
        if not isinstance(bid, str) or not isinstance(jid, str):
            yield
            return
        running = RunningJob(bid, job)
        reset = running_job.set(running)
        try:
            yield
        except kiq.Shutdown:
            raise  # requeued: it runs again
        except BaseException:
            self.plugin.record(self.config, "failed", bid, jid)
            raise
        finally:
            running_job.reset(reset)
        self.plugin.record(self.config, "succeeded" if running.dropped is None else "failed", bid, jid)
