"""Reading results by jid: ``result(jid)`` answers the value a job returned, waiting for it up to ``wait`` seconds."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import kiq
import kiq.ext
import kiq.testing

from .plugin import ResultsPlugin
from .record import read_value, result_key

READ_BACKOFF = (0.01, 0.2)  # seconds between reads of a result not there yet: the first pause and the cap


class NoResult(kiq.KiqError, LookupError):
    """No result is stored for the job: it has not finished (or failed so far), its result expired, or its result is
    not kept (no ``result_ttl``, or the results plugin is not in the worker)."""


class ResultError(kiq.KiqError):
    """The job has a result record, but no value: it returned something that is not strict JSON (or not its return
    annotation's type), it died, or it was dropped without running; or the stored value cannot be read as its
    return annotation's type. The message says which."""


def answer(jid: str, text: str | bytes | None) -> Any:
    """The value in a stored record; raises NoResult (none stored) or ResultError (an error recorded)."""
    if text is None:
        raise NoResult(
            f"no result for job {jid}: not finished yet, expired, or not kept (a job keeps its result with the "
            "result_ttl option or the job_result_ttl setting, in a worker with the results plugin)"
        )
    record = kiq.ext.loads(text if isinstance(text, str) else text.decode())
    if "error" in record:
        raise ResultError(str(record["error"]))
    try:
        return read_value(record)
    except kiq.ext.ResultTypeError as exc:
        raise ResultError(f"job {jid}: {exc}") from None


def refuse_unkept(jid: str, config: kiq.Config) -> kiq.Config:
    """``config``, unless no result can be there: under ``kiq.testing`` (the jobs run in this process) a config
    without the results plugin kept none, so NoResult says so, before a Redis is opened (or an embedded one
    started in the test's directory)."""
    if kiq.testing.mode() is not None and config.plugins.find(ResultsPlugin) is None:
        raise NoResult(
            f"no result for job {jid}: the results plugin is not enabled in this config, and kiq.testing ran the job "
            "here, so no result was kept; enable it: plugins = ['results'] in the settings, or "
            "config.add_plugin('results')"
        )
    return config


def pauses(wait: float) -> Iterator[float | None]:
    """The pauses between reads while waiting ``wait`` seconds for a result: from 10 ms, doubling up to 0.2 s; then
    None, after which the last read is the answer."""
    if not math.isfinite(wait) or wait < 0:
        raise ValueError(f"wait must be a number of seconds >= 0, got {wait!r}")
    deadline = time.monotonic() + wait
    backoff = kiq.ext.Backoff(*READ_BACKOFF)
    while (left := deadline - time.monotonic()) > 0:
        yield min(backoff.next(), left)
    yield None


def result(jid: str, config: kiq.Config | None = None, wait: float = 0.0) -> Any:
    """The value job ``jid`` returned (kept by the results plugin in the worker, for jobs with ``result_ttl`` or
    the ``job_result_ttl`` setting). ``wait``: seconds to wait for it to appear. Raises ``NoResult`` if there is
    none, ``ResultError`` if the job's value could not be kept (the message says why)."""
    redis = refuse_unkept(jid, config or kiq.default_config()).redis
    for pause in pauses(wait):
        text = redis.get(result_key(redis, jid))
        if text is not None or pause is None:
            return answer(jid, text)
        time.sleep(pause)
    raise AssertionError("pauses() ends with None")
