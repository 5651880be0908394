"""What the batch plugin knows about the code running now: the ``with batch:`` block that pushes join, and the batch
job being performed (so its own batch can take more jobs without a token, and a drop by an inner layer is seen).

Context variables, so each thread and each asyncio task has its own; tasks started inside a block inherit it."""

from __future__ import annotations

from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Block:
    """An open ``with batch:`` block: the jids its pushes added, registered when it closes. ``token`` keeps the
    batch from completing meanwhile; it is empty in a running job of the same batch, whose own pending outcome does
    that already."""

    bid: str
    token: str
    jids: list[str] = field(default_factory=list)
    reset: Token[Block | None] | None = None


@dataclass(eq=False)
class RunningJob:
    """A job of a batch inside the batch's server middleware; ``dropped`` is set when an inner layer dropped it."""

    bid: str
    job: dict[str, Any]
    dropped: str | None = None


open_block: ContextVar[Block | None] = ContextVar("kiq_batch_block", default=None)
running_job: ContextVar[RunningJob | None] = ContextVar("kiq_batch_job", default=None)
