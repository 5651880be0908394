"""The job statuses tracking records (a module of its own so the middleware and the CLI need no SQLAlchemy)."""

from __future__ import annotations

ENQUEUED, WORKING, FINISHED, FAILED, ERROR = "enqueued", "working", "finished", "failed", "error"
STATUSES = (ENQUEUED, WORKING, FINISHED, FAILED, ERROR)
DONE_STATUSES = (FINISHED, FAILED, ERROR)
