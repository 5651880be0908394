"""The Retries, Scheduled and Dead pages: paged by rank (``ZRANGE``, whatever the set's size), sorted either way,
filtered by text (``JobSet.search``: a window of ``FILTER_WINDOW`` entries per request, in the page's order, and a
"Search further" link that goes on from where it stopped); actions on one job, on the selection, or on all; and a
job's own page (with why the job failed, and its backtrace or how to keep one).

An entry is named in links and forms by ``<score>-<jid>``, as in Sidekiq's Web UI: the score finds it in one
``ZRANGEBYSCORE``, the jid tells it from others with the same score.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from kiq.api import DeadSet, JobSet, RetrySet, ScheduledSet, SortedEntry, iteration_states

from . import iteration
from .html import Markup, Node, el, link, number, pager, pretty, table, when
from .view import NotFound, Page, Refused, View, action_name, arguments, payload_time, shown, truncated

PAGE_SIZE = 25
FILTER_WINDOW = 100_000  # entries a filter request looks at: ~0.1 s on a local Redis (docs/guide/dashboard.md)
ENTRY_KEY = re.compile(r"(-?\d+(?:\.\d+)?(?:e[+-]?\d+)?)-(.*)", re.DOTALL)


@dataclass(frozen=True)
class SetPage:
    path: str
    title: str
    job_title: str  # of one job's page
    make: Callable[..., JobSet]
    when_label: str
    newest_first: bool  # the default order
    actions: tuple[str, ...]  # on one job and on a selection
    all_actions: tuple[str, ...]


SETS = {
    "retries": SetPage(
        "retries", "Retries", "Retry", RetrySet, "Next retry", False,
        ("Retry now", "Delete", "Kill"), ("Retry all", "Delete all", "Kill all"),
    ),
    "scheduled": SetPage(
        "scheduled", "Scheduled", "Scheduled job", ScheduledSet, "When", False, ("Add to queue", "Delete"),
        ("Delete all",),
    ),
    "dead": SetPage(
        "dead", "Dead", "Dead job", DeadSet, "Died", True, ("Retry now", "Delete"), ("Retry all", "Delete all")
    ),
}  # fmt: skip


ENTRY_ACTIONS = {
    "Retry now": SortedEntry.retry,
    "Delete": SortedEntry.delete,
    "Kill": SortedEntry.kill,
    "Add to queue": SortedEntry.add_to_queue,
}


def entry_key(entry: SortedEntry) -> str:
    return f"{entry.score!r}-{entry.jid or ''}"


def find_entry(job_set: JobSet, key: str) -> SortedEntry:
    matched = ENTRY_KEY.fullmatch(key)
    if matched is None:
        raise NotFound(f"malformed entry {key[:80]!r}")
    score, jid = float(matched.group(1)), matched.group(2)
    for entry in job_set.fetch(score):
        if (entry.jid or "") == jid:
            return entry
    raise NotFound("that job is no longer there (it ran, moved or was deleted)")


def set_page(view: View, kind: SetPage) -> Page:
    job_set = kind.make(view.config)
    size = job_set.size
    page = view.number_param("page", 1, 10**7)
    order = view.query.get("order", "newest" if kind.newest_first else "oldest")
    newest_first = order != "oldest"
    text = view.query.get("q", "")
    if text:
        entries, counted, further = _filtered(view, kind, job_set, text, newest_first, size)
    else:
        entries = job_set.page((page - 1) * PAGE_SIZE, PAGE_SIZE, newest_first)
        counted = f"{number(size)} jobs"
        further = pager(view.url(kind.path), view.query, page, page * PAGE_SIZE < size)
    form_id = f"{kind.path}-selection"
    rows = [_row(view, kind, entry, form_id) for entry in entries]
    columns = [_select_all(view, form_id), kind.when_label, "Queue", "Job", "Arguments"]
    if kind.path != "scheduled":
        columns += ["Error", "Retries"]
    other = "oldest" if newest_first else "newest"
    fresh = {name: value for name, value in view.query.items() if name not in ("after", "searched")}  # from the top
    controls = el(
        "div",
        el("form", el("input", type="search", name="q", value=text, placeholder="class, argument or error",
                      aria_label="filter"), el("input", type="hidden", name="order", value=order),
           el("button", "Filter", type="submit"), method="get", action=view.url(kind.path), class_="filter"),
        link(f"{other.capitalize()} first", view.url(kind.path, {**fresh, "order": other, "page": "1"}),
             class_="order"),
        el("span", counted, class_="muted", id="count"),
        class_="controls",
    )  # fmt: skip
    selection = Markup()
    if rows and not view.read_only:
        selection = el(
            "p",
            "Selected: ",
            [view.action(kind.path, label, form=form_id, danger=label != "Retry now") for label in kind.actions],
            " All: ",
            [view.action(kind.path, label, form=form_id, danger=True, confirm=f"{label}: {number(size)} jobs?")
             for label in kind.all_actions],
            class_="actions",
        )  # fmt: skip
    body = Markup(
        controls
        + view.selection_form(form_id, kind.path)
        + selection
        + table(columns, rows, "No match." if text else "No jobs.", id="entries")
        + further
    )
    return Page(kind.title, body, section=kind.path)


def _filtered(
    view: View, kind: SetPage, job_set: JobSet, text: str, newest_first: bool, size: int
) -> tuple[list[SortedEntry], str, Markup]:
    """The matches of one filter request (a page of them at most, from a window of the set), what the page says
    about how far it searched, and the link that searches further."""
    searched = view.number_param("searched", 0, 10**10)  # entries looked at by the requests before this one
    found = job_set.search(text, newest_first, view.query.get("after") or None, PAGE_SIZE, FILTER_WINDOW)
    reached = searched + found.examined
    matches = f"{number(len(found.entries))} {'match' if len(found.entries) == 1 else 'matches'}"
    order = "newest" if newest_first else "oldest"
    counted = f"{matches} in jobs {number(min(searched + 1, reached))}–{number(reached)} of {number(size)}, " \
              f"{order} first{' (searched to the end)' if found.resume is None else ''}"  # fmt: skip
    if found.resume is None:
        return found.entries, counted, Markup()
    query = {**view.query, "after": found.resume, "searched": str(reached)}
    further = link("Search further ›", view.url(kind.path, query), rel="next", id="further")
    return found.entries, counted, el("nav", further, class_="pager")


def _select_all(view: View, form_id: str) -> Markup:
    if view.read_only:
        return Markup()
    return el("input", type="checkbox", class_="select-all", data_form=form_id, aria_label="select all")


def _row(view: View, kind: SetPage, entry: SortedEntry, form_id: str) -> list[Markup | str | None]:
    key = entry_key(entry)
    box = Markup() if view.read_only else el(
        "input", type="checkbox", name="key", value=key, form=form_id, aria_label="select"
    )  # fmt: skip
    page_link = link(entry.display_class, view.url(f"{kind.path}/{key}"))
    shown_arguments = (
        arguments(entry.display_args, entry.display_kwargs) if entry.parsed else el("code", truncated(entry.value))
    )
    cells: list[Markup | str | None] = [box, when(entry.score), entry.queue, page_link, shown_arguments]
    if kind.path != "scheduled":
        error = f"{entry.error_class}: {entry.error_message}" if entry.error_class else ""
        cells += [truncated(error), number(entry.retry_count) if entry.retry_count is not None else ""]
    return cells


def job_page(view: View, kind: SetPage, key: str) -> Page:
    entry = find_entry(kind.make(view.config), key)
    items: list[tuple[str, Node]] = [
        ("Queue", entry.queue),
        ("Job", entry.display_class),
        ("Arguments", el("code", shown(entry.display_args))),
        *([("Keyword arguments", el("code", shown(entry.display_kwargs)))] if entry.kwargs else []),
        ("JID", entry.jid),
        (kind.when_label, when(entry.score)),
        ("Created", payload_time(entry, "created_at", entry.created_at)),
        ("Enqueued", payload_time(entry, "enqueued_at", entry.enqueued_at)),
    ]
    if entry.error_class or entry.retry_count is not None:
        items += [
            ("Failed", payload_time(entry, "failed_at", entry.failed_at)),
            ("Retried", payload_time(entry, "retried_at", entry.retried_at)),
            ("Retry count", entry.retry_count),
        ]
    buttons = [view.action(f"{kind.path}/{key}", label, {"op": label}, danger=label != "Retry now")
               for label in kind.actions]  # fmt: skip
    state = iteration_states([entry.jid], view.config).get(entry.jid or "")
    if state is not None:  # an iterable job that ran: where it stopped
        items += iteration.facts(state)
    if kind.path != "dead" and entry.jid and iteration.cancellable(state, entry.item.get("class")):
        buttons.append(iteration.cancel_button(view, entry.jid, f"{kind.path}/{key}"))  # before it runs again
    actions = el("p", buttons, class_="actions")
    sections = [
        actions,
        _failure(kind, entry),
        el("dl", [[el("dt", k), el("dd", v)] for k, v in items], class_="facts"),
    ]
    payload = pretty(entry.shown) if entry.parsed else entry.value
    sections += [el("h2", "Payload"), el("pre", payload, id="payload")]
    return Page(kind.job_title, Markup("".join(sections)), section=kind.path)


def _failure(kind: SetPage, entry: SortedEntry) -> Markup:
    """Why the job failed, first on its page: the error's class and message, then its backtrace, or why there is
    none and how to keep one (a job keeps a backtrace only when its ``backtrace`` option says so)."""
    if kind.path == "scheduled" and not entry.error_class:
        return Markup()
    title = el("h2", "Why it died" if kind.path == "dead" else "Why it failed")
    if not entry.parsed:
        return Markup(title + el("p", "This entry is not valid JSON: no worker could read it (see the payload below).",
                                 class_="error", id="error"))  # fmt: skip
    if not entry.error_class:
        return Markup(title + el("p", "No error was recorded with this job (it was moved here by hand or by another "
                                 "tool).", class_="muted", id="error"))  # fmt: skip
    error = el("pre", el("strong", entry.error_class), ": ", entry.error_message or "", class_="error", id="error")
    backtrace = entry.error_backtrace
    if backtrace:
        return Markup(title + error + el("pre", "\n".join(backtrace), id="backtrace"))
    if "error_backtrace" in entry.item:
        note = "Its backtrace was recorded but cannot be read (not base64 of zlib-compressed JSON)."
    else:
        note = (
            f"{entry.display_class} kept no backtrace: a job keeps one when its backtrace option is set "
            '(kiq_options = {"backtrace": True}, or a number of lines), or for every job class through the '
            "default_job_options setting. The next failure will then show where it happened."
        )
    return Markup(title + error + el("p", note, class_="muted", id="no-backtrace"))


def act(view: View, kind: SetPage, action: str, keys: list[str]) -> str:
    """Carry out a button's action on the selected entries (or on all); returns where to go next."""
    labels = {action_name(label): label for label in (*kind.actions, *kind.all_actions)}
    label = labels.get(action)
    if label is None:
        raise Refused(f"{action!r} is not an action of {kind.title}")
    job_set = kind.make(view.config)
    if label in kind.all_actions:  # the set's own method: retry_all, kill_all; "Delete all" clears it
        job_set.clear() if label == "Delete all" else getattr(job_set, action)()
        return kind.path
    if not keys:
        raise Refused("select at least one job")
    method = ENTRY_ACTIONS[label]
    for key in keys:
        try:
            method(find_entry(job_set, key))
        except NotFound:  # moved meanwhile (the poller, another admin): the others still go
            continue
    return kind.path
