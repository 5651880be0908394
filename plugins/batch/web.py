"""The batch plugin's dashboard tab, "Batches" (``kiq.contrib.web``; see ``kiq.tabs``).

    (first page)    the batches, newest first, 25 a page: one page of the ``kiq:batches`` index (ZREVRANGE), and
                    one pipelined round trip for their statuses; the keyspace is never scanned
    <bid>           one batch: its counts, state and times, its parent, children and callbacks

As ``kiq batches`` does, a page drops from the index the batches it finds gone (expired); a page read after that
starts that many batches further down. An unknown or malformed bid answers 404 (``LookupError``); Redis away raises,
and the dashboard shows the error in the tab.
"""

from __future__ import annotations

from typing import Any

import kiq
import kiq.ext
from kiq.tabs import Cell, Facts, Heading, Link, Pager, Tab, Table, TabRequest, TabView, When

from .cli import state
from .keys import BID, index_key
from .status import collect, queue_reads, status

PAGE_SIZE = 25
COLUMNS = ["Batch", "Description", "State", "Total", "Pending", "Failures", "Dead", "Created"]


def batches_tab(config: kiq.Config) -> Tab:
    """The "batches" tab on ``config``'s Redis."""
    return Tab("batches", "Batches", lambda request: render(config, request))


def render(config: kiq.Config, request: TabRequest) -> TabView:
    if not request.path:
        return batch_list(config, request)
    if not BID.fullmatch(request.path):
        raise LookupError(f"not a batch id: {request.path!r:.80}")
    return batch_page(config, request.path)


def batch_list(config: kiq.Config, request: TabRequest) -> TabView:
    page = request.page
    start = (page - 1) * PAGE_SIZE
    keys = kiq.ext.keyspace(config.redis)
    bids = [str(bid) for bid in config.redis.zrevrange(index_key(keys), start, start + PAGE_SIZE)]  # one more: more?
    shown = bids[:PAGE_SIZE]
    pipe = config.redis.pipeline(transaction=False)
    for bid in shown:
        queue_reads(pipe, keys, bid)
    found, gone = collect(shown, pipe.execute() if shown else [])
    if gone:
        config.redis.zrem(index_key(keys), *gone)
    rows: list[list[Cell]] = [
        [
            Link(batch.bid, batch.bid),
            batch.description,
            state(batch),
            batch.total,
            batch.pending,
            batch.failures,
            batch.dead,
            When(batch.created_at),
        ]
        for batch in found
    ]
    table = Table(COLUMNS, rows, empty="No batches (or none on this page any more: they expired).")
    return TabView("Batches", [table, Pager(page, len(bids) > PAGE_SIZE)])


def batch_page(config: kiq.Config, bid: str) -> TabView:
    batch = status(bid, config)
    if batch is None:
        raise LookupError(f"no batch {bid}: never created, or expired")
    facts: list[tuple[str, Cell]] = [
        ("Batch", batch.bid),
        ("Description", batch.description),
        ("State", state(batch)),
        ("Total", batch.total),
        ("Pending", batch.pending),
        ("Failures", batch.failures),
        ("Dead", batch.dead),
        ("Open blocks", batch.open_blocks),
        ("Created", When(batch.created_at)),
    ]
    times = (("Complete", batch.complete_at), ("Success", batch.success_at), ("First death", batch.death_at))
    facts += [(label, When(at)) for label, at in times if at is not None]
    facts.append(("Parent", "none" if batch.parent_bid is None else Link(batch.parent_bid, batch.parent_bid)))
    blocks: list[Any] = [Facts(facts)]
    children: list[list[Cell]] = [
        [Link(child, child), child_state] for child, child_state in sorted(batch.children.items())
    ]
    blocks += [Heading("Children"), Table(["Batch", "State"], children, empty="No child batches.")]
    callbacks: list[list[Cell]] = [[event, job_class] for event, job_class in batch.callbacks.items()]
    blocks += [Heading("Callbacks"), Table(["On", "Job class"], callbacks, empty="No callbacks.")]
    return TabView(f"Batch {batch.bid}", blocks)
