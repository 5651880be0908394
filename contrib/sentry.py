"""Sentry for kiq: ``sentry_sdk.init(dsn=..., integrations=[KiqIntegration()])`` in the processes that push and run
jobs (``pip install 'kiq[sentry]'``).

- A job that raises is captured once per failed attempt (``report_only_dead_jobs=True``: once, when it dies), with
  the job's class, queue, jid and retry count as tags (``kiq.class``, ``kiq.queue``, ``kiq.jid``,
  ``kiq.retry_count``) and a ``kiq`` context; its arguments are in the event's ``extra`` (``kiq-job``), where the
  SDK's scrubber applies (``EventScrubber(recursive=True)`` reaches keyword arguments named like ``password``).
- A push carries the pushing process's trace (``sentry-trace`` and ``baggage``, in the payload's
  ``trace_propagation_headers``: sentry-ruby's Sidekiq key, so a Ruby worker continues a Python trace and the other
  way round); the run continues it, in a ``queue.process`` transaction when the SDK's tracing is on
  (``traces_sample_rate``), so a job's error and spans sit in the trace of the request that pushed it.
- Pushes and runs leave breadcrumbs (category ``kiq``).

The integration registers ``SentryPlugin`` (kiq's hooks) on the process's config and on every worker's
(``kiq.configure_client``/``configure_server``); while the SDK is not initialised (or was closed) it does nothing.
docs/guide/sentry.md has the details.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sentry_sdk
from sentry_sdk.integrations import Integration
from sentry_sdk.tracing import TransactionSource
from sentry_sdk.utils import event_from_exception

import kiq

if TYPE_CHECKING:
    import redis

HEADERS = "trace_propagation_headers"  # the payload key of the pushing process's trace (sentry-ruby's Sidekiq key)
CATEGORY = "kiq"


class KiqIntegration(Integration):
    """kiq's Sentry integration. ``report_only_dead_jobs``: capture a job's error only when it dies (its retries
    exhausted, not retryable, or killed), not at every failed attempt. ``propagate_traces``: carry the pushing
    process's trace in the payload (and continue it in the worker)."""

    identifier = "kiq"

    def __init__(self, report_only_dead_jobs: bool = False, propagate_traces: bool = True) -> None:
        self.report_only_dead_jobs = report_only_dead_jobs
        self.propagate_traces = propagate_traces

    @staticmethod
    def setup_once() -> None:
        kiq.configure_client(_register)
        kiq.configure_server(_register)


def _register(config: kiq.Config) -> None:
    config.add_plugin(SentryPlugin)


def _active() -> KiqIntegration | None:
    """The integration of the SDK's client, while one is initialised with a DSN (and not closed); else None."""
    client = sentry_sdk.get_client()
    if not client.is_active() or client.transport is None:
        return None
    return client.get_integration(KiqIntegration)


def _tags_of(job: dict[str, Any], queue: str) -> dict[str, str]:
    return {
        "kiq.class": str(job.get("class")),
        "kiq.queue": queue,
        "kiq.jid": str(job.get("jid")),
        "kiq.retry_count": str(job.get("retry_count", "none")),  # absent until its first failure, as in Sidekiq
    }


def _describe(scope: sentry_sdk.Scope, job: dict[str, Any], queue: str) -> None:
    """Put ``job`` on ``scope``: its tags and context, its arguments in ``extra`` (scrubbed by the SDK's rules)."""
    for key, value in _tags_of(job, queue).items():
        scope.set_tag(key, value)
    scope.set_context(
        "kiq",
        {
            "class": job.get("class"),
            "queue": queue,
            "jid": job.get("jid"),
            "retry_count": job.get("retry_count"),
            "enqueued_at": job.get("enqueued_at"),
        },
    )
    scope.set_extra("kiq-job", {"args": job.get("args"), "kwargs": job.get("kwargs")})
    scope.set_transaction_name(str(job.get("class")), source=TransactionSource.TASK)


def _capture(exc: BaseException, handled: bool) -> None:
    """``exc`` as an event of the current scope, marked as kiq's."""
    event, hint = event_from_exception(
        exc, client_options=sentry_sdk.get_client().options, mechanism={"type": "kiq", "handled": handled}
    )
    sentry_sdk.capture_event(event, hint=hint)


def _trace_headers(job: dict[str, Any]) -> dict[str, str]:
    headers = job.get(HEADERS)
    if not isinstance(headers, dict):  # absent, or another producer wrote something else
        return {}
    return {key: value for key, value in headers.items() if isinstance(key, str) and isinstance(value, str)}


class SentryClientMiddleware(kiq.ClientMiddleware):
    """Carries the current trace in the payload (once: a retry or a scheduled job's re-push keeps the first) and
    leaves a breadcrumb for the push."""

    def call(self, job_class: type[kiq.Job] | str, job: dict[str, Any], queue: str, redis: redis.Redis) -> kiq.Wrapper:
        integration = _active()
        if integration is None:
            yield
            return
        if integration.propagate_traces and HEADERS not in job:
            headers = dict(sentry_sdk.get_current_scope().iter_trace_propagation_headers())
            if headers:
                job[HEADERS] = headers
        yield
        sentry_sdk.add_breadcrumb(
            category=CATEGORY,
            message=f"pushed {job.get('class')} to {queue}",
            data={"jid": job.get("jid"), "queue": queue, "at": job.get("at")},
        )


class SentryServerMiddleware(kiq.ServerMiddleware):
    """Runs each job in a scope of its own: tags, context and arguments, the pushing process's trace continued
    (a ``queue.process`` transaction), a breadcrumb; captures the attempt's error unless only deaths are reported."""

    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> kiq.Wrapper:
        integration = _active()
        if integration is None:
            yield
            return
        with sentry_sdk.isolation_scope() as scope:
            scope.clear_breadcrumbs()  # the thread's earlier jobs are not this one's story
            _describe(scope, job, queue)
            headers = _trace_headers(job) if integration.propagate_traces else {}
            transaction = sentry_sdk.continue_trace(
                headers, op="queue.process", name=str(job.get("class")), source=TransactionSource.TASK,
                origin="auto.queue.kiq",
            )  # fmt: skip
            transaction.set_data("messaging.message.id", job.get("jid"))
            transaction.set_data("messaging.destination.name", queue)
            transaction.set_data("messaging.message.retry.count", job.get("retry_count", 0))
            sentry_sdk.add_breadcrumb(category=CATEGORY, message=f"run {job.get('class')} {job.get('jid')}")
            with sentry_sdk.start_transaction(transaction):
                try:
                    yield
                except Exception as exc:
                    transaction.set_status("internal_error")
                    if not integration.report_only_dead_jobs:
                        _capture(exc, handled=False)
                    raise
                transaction.set_status("ok")


class SentryPlugin:
    """kiq's hooks of the integration (registered by ``KiqIntegration``; no setting of its own)."""

    @kiq.hookimpl
    def kiq_client_middleware(self, chain: kiq.Chain[kiq.ClientMiddleware]) -> None:
        chain.add(SentryClientMiddleware)

    @kiq.hookimpl
    def kiq_server_middleware(self, chain: kiq.Chain[kiq.ServerMiddleware]) -> None:
        chain.add(SentryServerMiddleware)

    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any], exc: BaseException | None, config: kiq.Config) -> None:
        """With ``report_only_dead_jobs``: the job's last error, in the trace it was pushed in."""
        integration = _active()
        if integration is None or not integration.report_only_dead_jobs:
            return
        with sentry_sdk.isolation_scope() as scope:
            queue = str(job.get("queue"))
            _describe(scope, job, queue)
            if integration.propagate_traces:
                sentry_sdk.continue_trace(_trace_headers(job))
            if exc is not None:
                _capture(exc, handled=False)
            else:  # killed without an exception of this process (e.g. a poison pill that kept killing workers)
                sentry_sdk.capture_message(f"{job.get('class')} {job.get('jid')} died: {job.get('error_message')}")
