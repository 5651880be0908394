"""Iterable jobs on the dashboard: what their ``it-<jid>`` state says (run, cursor, runtime) on the Busy page and the
job pages, and the Cancel button (``kiq.cancel``: a POST with the CSRF token, like every action; none in
read-only mode)."""

from __future__ import annotations

import re

import kiq
from kiq.api import runtime_so_far

from .html import Markup, duration, el, when
from .view import Refused, View, shown, truncated

JID = re.compile(r"[0-9A-Za-z_-]{1,64}")
# the pages a Cancel button returns to: the Busy page, or the job's page in the retry or scheduled set
RETURN_TO = re.compile(r"busy|(?:retries|scheduled)/[^/]+")


def summary(state: kiq.IterationState, run_at: float | None) -> Markup:
    """One cell: "run 3 · cursor 41000 · ran 2 min", and "cancelled" once it is."""
    ran = duration(runtime_so_far(state, run_at))
    parts = [
        el("span", f"run {state.executions}", class_="run"),
        Markup("cursor " + el("code", truncated(shown(state.cursor), 60), class_="cursor")),
        el("span", f"ran {ran}", class_="runtime", title="run time over all its runs"),
    ]
    if state.cancelled:
        parts.append(el("span", "cancelled", class_="badge cancelled"))
    return el("span", Markup(" · ".join(parts)), class_="iteration")


def facts(state: kiq.IterationState) -> list[tuple[str, Markup | str]]:
    """The state as a job page's facts."""
    return [
        ("Iteration run", str(state.executions)),
        ("Cursor", el("code", shown(state.cursor))),
        ("Run time", duration(state.runtime)),
        ("Cancelled", when(state.cancelled_at) if state.cancelled_at is not None else "no"),
    ]


def cancellable(saved: kiq.IterationState | None, job_class: object) -> bool:
    """Whether a Cancel button makes sense: the job saved an iteration state and is not cancelled yet, or it has
    saved none yet (its first seconds, or not started) but this process registers its class as an iterable job."""
    if saved is not None:
        return not saved.cancelled
    registered = kiq.registry.find(job_class) if isinstance(job_class, str) else None
    return isinstance(registered, type) and issubclass(registered, kiq.IterableJob)


def cancel_button(view: View, jid: str, back: str) -> Markup:
    return view.action(
        "cancel", "Cancel", {"jid": jid, "back": back}, confirm=f"Cancel job {jid}? It stops at its next state flush."
    )


def cancel(view: View, form: dict[str, str]) -> str:
    """Cancel the job of the form's ``jid``; returns the page it came from."""
    jid, back = form.get("jid", ""), form.get("back", "busy")
    if not JID.fullmatch(jid):
        raise Refused(f"not a job id: {jid[:80]!r}")
    if not RETURN_TO.fullmatch(back):
        raise Refused(f"cannot return to {back[:80]!r}")
    kiq.cancel(jid, view.config)
    return back
