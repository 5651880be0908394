"""``kiq.cancel(jid)``: cancel an iterable job from anywhere (another process, the dashboard, the CLI).

The mark is Sidekiq's (``HSETNX it-<jid> cancelled <epoch seconds>``), so a Ruby Sidekiq 7.3+ job sees it too. The
job notices it when it starts or at its next state flush (every ``iteration_flush_interval`` seconds), runs
``on_cancel`` and completes: it is neither retried nor dead. Cancelling a job that is not iterable, or already
finished, only leaves the mark (it expires with the state's 30 days).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..async_client import async_redis
from ..config import config_or_default
from . import state

if TYPE_CHECKING:
    from ..config import Config


class Cancel:
    """``kiq.cancel(jid)``, and ``await kiq.cancel.aio(jid)`` in asyncio code; both return the epoch seconds of
    the cancellation (the first one's, when the job was cancelled before)."""

    def __call__(self, jid: str, config: Config | None = None) -> int:
        return state.cancel(config_or_default(config).redis, _checked(jid))

    async def aio(self, jid: str, config: Config | None = None) -> int:
        return await state.acancel(async_redis(config_or_default(config)), _checked(jid))


def _checked(jid: object) -> str:
    if not isinstance(jid, str) or not jid:
        raise ValueError(f"kiq.cancel takes a job id (the 24-hex jid perform_async returned), got {jid!r:.80}")
    return jid


cancel = Cancel()
"""Cancel an iterable job by its jid: ``kiq.cancel(jid)``, ``await kiq.cancel.aio(jid)`` (see ``Cancel``)."""
