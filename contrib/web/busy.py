"""The Busy page: the live processes (quiet and stop buttons) and the jobs running now (iterable ones with their
run, cursor and runtime, and a Cancel button)."""

from __future__ import annotations

from kiq.api import ProcessSet, Workers, iteration_states

from . import iteration
from .html import Markup, Node, duration, el, megabytes, number, table, when
from .view import Page, Refused, View, arguments

SIGNALS = {"quiet": "TSTP", "stop": "TERM"}


def busy(view: View) -> Page:
    processes = list(ProcessSet(view.config))
    rows = []
    for process in processes:
        identity = process.identity
        state = process.state
        labels = el("span", [el("span", label, class_="badge") for label in process["labels"] or []])
        rows.append([
            el("span", identity, class_="identity"),
            process.tag, labels,
            when(process.started_at),
            f"{number(process.busy)} / {number(int(process['concurrency'] or 0))}",
            megabytes(int(process["rss"] or 0)),
            el("span", duration(process.seconds_since_beat), title=state),
            ", ".join(process.queues),
            el("span", state, class_=f"state {state}"),
            Markup(
                (view.action("busy", "Quiet", {"identity": identity, "signal": "quiet"}) if state == "running" else "")
                + view.action("busy", "Stop", {"identity": identity, "signal": "stop"},
                              confirm=f"Stop {identity}?", danger=True)
            ),
        ])  # fmt: skip
    everyone = Markup()
    if processes:
        everyone = el(
            "p",
            view.action("busy", "Quiet all", {"identity": "", "signal": "quiet"}, confirm="Quiet every process?"),
            view.action("busy", "Stop all", {"identity": "", "signal": "stop"}, confirm="Stop every process?",
                        danger=True),
            class_="actions",
        )  # fmt: skip
    summary = el(
        "p",
        f"{number(len(processes))} processes, {number(sum(p.busy for p in processes))} busy of "
        f"{number(sum(int(p['concurrency'] or 0) for p in processes))} threads",
        class_="muted",
    )
    columns = ["Process", "Tag", "Labels", "Started", "Busy", "RSS", "Last beat", "Queues", "State", ""]
    jobs = _running_jobs(view)
    body = Markup(
        summary
        + everyone
        + table(columns, rows, "No live processes.", id="processes")
        + el("h2", "Jobs running now")
        + table(
            ["Process", "Thread", "Job", "Queue", "Arguments", "JID", "Started", "Iteration", ""],
            jobs,
            "Nothing running.",
            id="running",
        )
    )
    return Page("Busy", body, section="busy")


def _running_jobs(view: View) -> list[list[Node]]:
    """The rows of the jobs running now; an iterable job's with its state and a Cancel button."""
    works = list(Workers(view.config))
    states = iteration_states((work.payload.get("jid") for work in works), view.config)  # one pipeline
    jobs: list[list[Node]] = []
    for work in works:
        jid = str(work.payload.get("jid") or "")
        saved = states.get(jid)
        cancellable = iteration.cancellable(saved, work.payload.get("class"))
        jobs.append([
            work.process_id,
            work.thread_id,
            work.payload.get("wrapped") or work.payload.get("class"),
            work.queue,
            arguments(work.args, work.kwargs),
            jid,
            when(work.run_at),
            iteration.summary(saved, work.run_at) if saved else None,
            iteration.cancel_button(view, jid, "busy") if cancellable else None,
        ])  # fmt: skip
    return jobs


def signal(view: View, form: dict[str, str]) -> str:
    """Quiet or stop one process, or every one (``identity`` empty); returns where to go next."""
    name = SIGNALS.get(form.get("signal", ""))
    if name is None:
        raise Refused("signal must be quiet or stop")
    processes = ProcessSet(view.config)
    identity = form.get("identity", "")
    if identity:
        processes.get(identity).signal(name)
    else:
        for process in processes:
            process.signal(name)
    return "busy"
