"""The profiling plugin's middleware: the client checks a ``profile`` token at the push; the worker runs a job that
has one under pyinstrument and stores the profile, whether the job returned or raised.

A job without a token costs one dictionary look-up in the worker: the layers declare ``only_with = "profile"``, so
the chain skips them for a payload without the option (``kiq.ServerMiddleware.only_with``). A job run inside an
event loop (``async def perform``) is profiled in its own task (pyinstrument's ``async_mode="enabled"``: time the
job spends awaiting shows as ``[await]`` under the awaiting call, not as other tasks' work); a sync job in its own
thread. Storing the profile is not the job's outcome: a Redis that refuses it, or a profile that cannot be made, is
logged and the job's result stands.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

from pyinstrument.session import Session

import kiq
import kiq.ext

from .encode import fitted
from .firefox import Record, firefox_profile
from .recorder import OVER_LIMIT_NOTE, started, trimmed
from .store import save

if TYPE_CHECKING:
    import redis

log = logging.getLogger("kiq.profiling")

TOKEN_MAX = 100  # characters of a profile token: it names a Redis key and shows in listings


def token_problem(token: object) -> str | None:
    """Why ``token`` cannot name a profile, or None when it can."""
    if not isinstance(token, str) or isinstance(token, bool):
        return f"must be a string naming who asked for the profile (e.g. your name), got {token!r:.80}"
    if not token or len(token) > TOKEN_MAX or not token.isprintable():
        return f"must be 1 to {TOKEN_MAX} printable characters, got {token!r:.120}"
    return None


class ProfilingClientMiddleware(kiq.ClientMiddleware):
    only_with = "profile"  # a push without the option skips this layer: one look-up

    def call(self, job_class: type[kiq.Job] | str, job: dict[str, Any], queue: str, redis: redis.Redis) -> kiq.Wrapper:
        token = job.get("profile")
        if token is not None and (problem := token_problem(token)) is not None:
            raise kiq.InvalidJobError(f"{job.get('class')}: option 'profile' {problem}")
        yield


class ProfilingServerMiddleware(kiq.ServerMiddleware):
    only_with = "profile"  # the only cost of a job nobody profiles: the chain's one look-up, no call

    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> kiq.Wrapper:
        token = job.get("profile")
        if token is None:  # pushed with profile=None
            yield
            return
        yield from self.profiled(job, token)

    def profiled(self, job: dict[str, Any], token: object) -> Generator[None, Any, None]:
        problem = token_problem(token)
        title = f"{job.get('wrapped') or job.get('class')} {job.get('jid')}, profile token {token!r:.120}"
        profiler = None if problem else started(inspect.currentframe(), title)
        if profiler is None:
            log.warning("%s %s: not profiled: option 'profile' %s", job.get("class"), job.get("jid"),
                        problem or "is set, but a profiler already runs in this thread or task")  # fmt: skip
            yield
            return
        started_at, began = time.time(), time.perf_counter()
        error: BaseException | None = None
        try:
            yield
        except BaseException as exc:
            error = exc
            raise
        finally:
            elapsed = time.perf_counter() - began
            session = profiler.stop()
            self.keep(job, str(token), session, started_at, elapsed, error, profiler.over_limit)

    def keep(
        self, job: dict[str, Any], token: str, session: Session, started_at: float, elapsed: float,
        error: BaseException | None, over_limit: bool = False,
    ) -> None:  # fmt: skip
        """Store the profile of one run; a failure is logged (the job's own outcome stands)."""
        jid = str(job.get("jid"))
        job_type = str(job.get("wrapped") or job.get("class"))
        try:
            session.frame_records = trimmed(session)
            meta = {"class": job_type, "jid": jid, "token": token}
            thread = threading.current_thread()

            def firefox(records: Sequence[Record]) -> dict[str, object]:
                return firefox_profile(records, started_at, os.getpid(), thread.native_id or 0, thread.name, meta)

            encoded = fitted(session, firefox, int(self.config.get("profile_max_bytes")))
            fields: dict[str, str | int | float | bytes] = {
                "started_at": int(started_at), "token": token, "type": job_type, "jid": jid,
                "elapsed": round(elapsed, 6), "data": encoded.data, "size": len(encoded.data),
                "pyinstrument": encoded.session,
            }  # fmt: skip
            if error is not None:
                fields["error"] = kiq.ext.error_class(error)
            cuts = [OVER_LIMIT_NOTE] if over_limit else []
            cuts += [encoded.cut] if encoded.cut is not None else []
            if cuts:
                fields["cut"] = "; ".join(cuts)
                log.warning("%s %s: profile cut: %s", job_type, jid, fields["cut"])
            key = save(self.config.redis, fields)
            log.info("%s %s: profile %s stored (%d bytes, %.3f s)", job_type, jid, key, encoded.size, elapsed)
        except Exception:
            log.exception("%s %s: the profile could not be stored; the job's outcome stands", job_type, jid)
