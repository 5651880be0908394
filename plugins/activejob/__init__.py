"""Rails ActiveJob on the wire, both ways.

Run a Rails app's ``perform_later`` jobs in Python: a payload of ActiveJob's Sidekiq wrapper runs the kiq job
registered under the Rails job's name, with the arguments ActiveJob serialized turned into Python values (keyword
ones included) and the envelope as ``self.active_job``::

    class ReportJob(kiq.Job):
        kiq_name = "ReportJob"
        kiq_options = {"queue": "reports"}
        def perform(self, account_id, title, when=None): ...

Enqueue Rails jobs from Python::

    from kiq.plugins import activejob
    activejob.perform_later("ReportJob", 7, "x", when=date(2026, 11, 25), queue="reports")
    activejob.job("ReportJob").set(wait=300, priority=5).perform_later(8)
    await activejob.job("ReportJob").aio.perform_later(9)

Enable it with ``plugins = ["activejob"]`` in the workers (enqueueing works without it). See docs/ruby.md,
"ActiveJob", and docs/plugins/activejob.md.
"""

from __future__ import annotations

from typing import Any

import kiq
import kiq.ext

from .arguments import decode_arguments, encode_arguments
from .enqueue import ActiveJobSetter, AsyncActiveJobSetter, job, perform_later
from .envelope import RAILS_WRAPPER, SIDEKIQ_WRAPPER, WRAPPERS, Envelope, unwrap
from .errors import ActiveJobError
from .middleware import ActiveJobContext
from .settings import SETTINGS
from .values import GlobalID, Symbol

__all__ = [
    "RAILS_WRAPPER",
    "SIDEKIQ_WRAPPER",
    "WRAPPERS",
    "ActiveJobError",
    "ActiveJobPlugin",
    "ActiveJobSetter",
    "AsyncActiveJobSetter",
    "Envelope",
    "GlobalID",
    "Symbol",
    "decode_arguments",
    "encode_arguments",
    "job",
    "perform_later",
]


class ActiveJobPlugin:
    @kiq.hookimpl
    def kiq_settings(self) -> list[kiq.ext.Setting]:
        return SETTINGS

    @kiq.hookimpl
    def kiq_unwrap_job(self, job: dict[str, Any]) -> str | None:
        return unwrap(job)

    @kiq.hookimpl
    def kiq_server_middleware(self, chain: kiq.Chain[kiq.ServerMiddleware]) -> None:
        chain.add(ActiveJobContext)
