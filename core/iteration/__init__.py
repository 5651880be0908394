"""Iterable jobs: long jobs that resume where they stopped and can be cancelled (Sidekiq 7.3's IterableJob).

``kiq.IterableJob`` (kiq.iteration.job) runs them; their state lives in ``it-<jid>`` (kiq.iteration.state);
``kiq.cancel(jid)`` cancels one. See docs/guide/iteration.md.
"""

from __future__ import annotations

from .cancellation import cancel
from .job import IterableJob
from .state import IterationState

__all__ = ["IterableJob", "IterationState", "cancel"]
