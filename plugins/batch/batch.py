"""``Batch``: a group of jobs followed as one, with callbacks when it is complete, when it succeeded, and when one of
its jobs died.

    batch = Batch("import 2024-05", on_success=(Notify, [user_id]), on_complete=Report)
    with batch:                       # or ``async with batch:`` in asyncio code
        for row in rows:
            ImportRow.perform_async(row)

Jobs are pushed at once, as usual; they join the batch through its client middleware, and the block registers them
when it closes (a token keeps the batch from completing while it is open). A batch made inside another batch's block
is its child. Inside a running job of a batch, ``with Batch.of(self):`` adds jobs to it.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterator
from typing import Any

import kiq
import kiq.ext

from .callbacks import Callback, callback_item, encode_callback
from .context import Block, open_block, running_job
from .keys import EVENTS, checked_bid, new_bid
from .plugin import BatchPlugin
from .scripts import EXISTS, GONE, PARENT_FINAL, SUCCEEDED
from .status import BatchStatus, status

log = logging.getLogger("kiq.batch")

REGISTER_CHUNK = 1000  # jids per registration call


class BatchError(kiq.KiqError):
    """A batch cannot take jobs: it succeeded already, or it is gone (expired, or never created)."""


class Batch:
    """A batch of jobs (Sidekiq Pro's ``Sidekiq::Batch``). ``bid`` is known at once; the batch exists in Redis from
    its first ``with`` block. Callbacks are jobs: ``JobClass``, ``(JobClass, [args])``, ``JobClass.set(...)`` or
    ``(JobClass.set(...), [args])``; each is pushed once when its event fires, with ``batch_callback`` (``{"bid",
    "event"}``) in its payload."""

    def __init__(
        self,
        description: str = "",
        *,
        on_complete: Callback | None = None,
        on_success: Callback | None = None,
        on_death: Callback | None = None,
        config: kiq.Config | None = None,
    ) -> None:
        if not isinstance(description, str):
            raise TypeError(f"a batch description is text, got {type(description).__name__}")
        self.config = config or kiq.default_config()
        self.bid = new_bid()
        self.description = description
        given = zip(EVENTS, (on_complete, on_success, on_death), strict=True)
        self._callbacks = {event: callback_item(spec) for event, spec in given if spec is not None}
        self._changes = self.config.add_plugin(BatchPlugin).changes(self.config)
        self._exists = False

    @classmethod
    def open(cls, bid: str, config: kiq.Config | None = None) -> Batch:
        """An existing batch, to add jobs to it: ``with Batch.open(bid): ...``."""
        batch = cls(config=config)
        batch.bid = checked_bid(bid)
        batch._exists = True
        return batch

    @classmethod
    def of(cls, job: kiq.Job) -> Batch | None:
        """The batch of a running job (None if it has none), to add jobs to it: ``with Batch.of(self): ...``."""
        bid = job.job.get("bid")
        return cls.open(bid) if isinstance(bid, str) else None

    def status(self) -> BatchStatus | None:
        return status(self.bid, self.config)

    def __repr__(self) -> str:
        return f"Batch({self.bid!r}, {self.description[:60]!r})"

    # -- blocks ------------------------------------------------------------------------------------------
    def __enter__(self) -> Batch:
        block, argv = self._entering()
        self._entered(block, self._changes.run(argv))
        return self

    def __exit__(self, *exc_info: object) -> None:
        for argv in self._registrations(self._leaving()):
            self._registered(self._changes.run(argv))

    async def __aenter__(self) -> Batch:
        block, argv = self._entering()
        self._entered(block, await self._changes.run_async(argv))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for argv in self._registrations(self._leaving()):
            self._registered(await self._changes.run_async(argv))

    def _entering(self) -> tuple[Block, list[Any]]:
        """The block about to open, and the change that opens it (creating the batch the first time)."""
        outer = open_block.get()
        if outer is not None and outer.bid == self.bid:
            raise BatchError(f"batch {self.bid} is open in this block already")
        running = running_job.get()
        own_job = running is not None and running.bid == self.bid
        block = Block(self.bid, "" if own_job else secrets.token_hex(8))
        if self._exists:
            return block, self._changes.argv("open", self.bid, block.token)
        parent = outer.bid if outer is not None else None
        fields = [repr(time.time()), *self._fields(parent)]
        return block, self._changes.argv("create", self.bid, parent or "", block.token, *fields)

    def _fields(self, parent: str | None) -> Iterator[str]:
        """The batch's hash fields: its info, and each callback's payload, queue and jid."""
        names = {event: _job_name(item["class"]) for event, item in self._callbacks.items()}
        yield from ("info", kiq.ext.dumps({"description": self.description, "callbacks": names}))
        for event, item in self._callbacks.items():
            queue, jid, payload = encode_callback(item, event, self.bid, parent)
            yield from (f"cb:{event}", payload, f"cbq:{event}", queue, f"cbj:{event}", jid)

    def _entered(self, block: Block, answer: str) -> None:
        if answer == EXISTS:
            raise BatchError(f"batch {self.bid} exists already")
        if answer == PARENT_FINAL:
            raise BatchError(f"batch {self.bid} cannot be a child of a batch that succeeded or is gone")
        if answer in (GONE, SUCCEEDED):
            raise BatchError(f"batch {self.bid} {'is gone' if answer == GONE else 'succeeded'}: it takes no more jobs")
        self._exists = True
        block.reset = open_block.set(block)

    def _leaving(self) -> Block:
        block = open_block.get()
        if block is None or block.bid != self.bid or block.reset is None:
            raise RuntimeError(f"batch {self.bid}: its block is not the innermost one open here")
        open_block.reset(block.reset)
        return block

    def _registrations(self, block: Block) -> Iterator[list[Any]]:
        """The changes that register the block's jobs; the last one closes the block (removes its token)."""
        jids = block.jids
        for start in range(0, len(jids), REGISTER_CHUNK):
            last = start + REGISTER_CHUNK >= len(jids)
            yield self._changes.argv(
                "add", self.bid, block.token if last else "", *jids[start : start + REGISTER_CHUNK]
            )
        if not jids and block.token:
            yield self._changes.argv("add", self.bid, block.token)

    def _registered(self, answer: str) -> None:
        if answer != "ok":  # the jobs were pushed and run, but the batch cannot count them any more
            log.warning("batch %s %s before its block closed: the jobs it pushed are not counted in it", self.bid,
                        "expired" if answer == GONE else "succeeded")  # fmt: skip


def _job_name(job_class: type[kiq.Job] | str) -> str:
    return job_class if isinstance(job_class, str) else job_class.kiq_name
