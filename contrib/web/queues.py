"""The Queues page (size, latency, paused; pause, unpause, clear) and one queue's jobs, paged with ``LRANGE``
(delete one)."""

from __future__ import annotations

from kiq.api import JobRecord, Queue

from .html import Markup, duration, el, link, number, pager, table
from .view import NotFound, Page, Refused, View, arguments, payload_time, truncated

PAGE_SIZE = 25
# how far around its shown position a job is looked for when deleting it (other jobs moved the list meanwhile)
DELETE_WINDOW = 100


def queues(view: View) -> Page:
    rows = []
    for queue in Queue.all(view.config):
        paused = queue.paused
        rows.append([
            link(queue.name, view.url(f"queues/{queue.name}")),
            number(queue.size),
            duration(queue.latency),
            _pause_state(paused),
            Markup(
                _pause_button(view, queue.name, paused)
                + view.action(f"queues/{queue.name}", "Clear", {"op": "clear"},
                              confirm=f"Delete every job in {queue.name}?", danger=True)
            ),
        ])  # fmt: skip
    body = table(["Queue", "Size", "Latency", "State", ""], rows, "No queues.", id="queues")
    return Page("Queues", body, section="queues")


def _pause_state(paused: bool) -> Markup:
    return el("span", "paused", class_="badge") if paused else Markup("running")


def _pause_button(view: View, name: str, paused: bool) -> Markup:
    """Unpause a paused queue, or pause one (the workers leave it alone within a second; pushes go on)."""
    if paused:
        return view.action(f"queues/{name}", "Unpause", {"op": "unpause"})
    return view.action(f"queues/{name}", "Pause", {"op": "pause"}, confirm=f"Stop the workers taking jobs from {name}?")


def queue_page(view: View, name: str) -> Page:
    queue = Queue(name, view.config)
    size = queue.size
    page = view.number_param("page", 1, 10**7)
    start = (page - 1) * PAGE_SIZE
    rows = []
    for offset, record in enumerate(queue.page(start, PAGE_SIZE)):
        rows.append([
            record.display_class,
            arguments(record.display_args, record.display_kwargs)
            if record.parsed else el("code", truncated(record.value)),
            record.jid,
            payload_time(record, "enqueued_at", record.enqueued_at),
            view.action(f"queues/{name}", "Delete",
                        {"op": "delete", "jid": record.jid or "", "index": str(start + offset)}, danger=True),
        ])  # fmt: skip
    if not rows and size == 0 and page == 1 and name not in {q.name for q in Queue.all(view.config)}:
        raise NotFound(f"no queue {name!r}")
    paused = queue.paused
    head = el(
        "p",
        f"{number(size)} jobs, newest first; latency {duration(queue.latency)}. ",
        _pause_state(paused),
        " ",
        _pause_button(view, name, paused),
        view.action(f"queues/{name}", "Clear", {"op": "clear"}, confirm=f"Delete every job in {name}?", danger=True),
        class_="muted",
    )
    body = Markup(
        head
        + table(["Job", "Arguments", "JID", "Enqueued"], rows, "This queue is empty.", id="jobs")
        + pager(view.url(f"queues/{name}"), view.query, page, start + PAGE_SIZE < size)
    )
    return Page(f"Queue {name}", body, section="queues")


def act_on_queue(view: View, name: str, form: dict[str, str]) -> str:
    queue = Queue(name, view.config)
    op = form.get("op")
    if op == "clear":
        queue.clear()
        return "queues"
    if op == "pause":
        queue.pause()
        return "queues"
    if op == "unpause":
        queue.unpause()
        return "queues"
    if op == "delete":
        record = _find(queue, form.get("jid", ""), form.get("index", ""))
        if record is None:
            raise NotFound("that job is no longer in the queue")
        record.delete()
        return f"queues/{name}"
    raise Refused("op must be clear, delete, pause or unpause")


def _find(queue: Queue, jid: str, index: str) -> JobRecord | None:
    """The job with ``jid`` near position ``index`` (the list moved since the page was shown), by one LRANGE."""
    if not jid or not index.isdigit():
        raise Refused("a job to delete needs its jid and position")
    start = max(0, int(index) - DELETE_WINDOW)
    return next((record for record in queue.page(start, 2 * DELETE_WINDOW) if record.jid == jid), None)
