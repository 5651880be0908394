"""The profiling plugin's dashboard tab, "Profiles" (``kiq.contrib.web``; see ``kiq.tabs``): the profiles kept on
this Redis, newest first, as Sidekiq 8's Profiles page lists them; a profile's page with its facts and call tree;
pyinstrument's interactive page (``<key>/html``: call tree, timeline, flame graph) served as a sandboxed document
that loads nothing from the network; and the Firefox Profiler JSON (``<key>/data``), as Sidekiq's Data button
gives it."""

from __future__ import annotations

import kiq
from kiq.tabs import Cell, Code, Document, Facts, Heading, Link, Pager, Tab, Table, TabRequest, TabView, Text, When

from .store import ProfileRecord, profile_data, record, records
from .views import call_tree, flame_page, session_of

PAGE_SIZE = 50
COLUMNS = ["Started", "Job class", "JID", "Token", "Elapsed", "Size", "Outcome", ""]


def profiles_tab(config: kiq.Config) -> Tab:
    return Tab("profiles", "Profiles", lambda request: render(config, request))


def render(config: kiq.Config, request: TabRequest) -> TabView | Document:
    path = request.path
    if not path:
        return listing(config, request.page)
    for suffix, serve in (("/html", flame), ("/data", firefox_data)):
        if path.endswith(suffix):
            return serve(config, path.removesuffix(suffix))
    return profile_page(config, path)


def listing(config: kiq.Config, page: int) -> TabView:
    found = records(config.redis, limit=page * PAGE_SIZE + 1)
    shown = found[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    rows: list[list[Cell]] = [
        [When(profile.started_at), profile.type, profile.jid, profile.token, f"{profile.elapsed:.3f} s",
         size(profile.size), outcome(profile), Link("View", profile.key)]
        for profile in shown
    ]  # fmt: skip
    note = Text('Jobs pushed with a profile token (MyJob.set(profile="token")) are kept here for a day.')
    empty = "No profiles: push a job with a profile token to make one."
    return TabView("Profiles", [note, Table(COLUMNS, rows, empty=empty), Pager(page, len(found) > page * PAGE_SIZE)])


def profile_page(config: kiq.Config, key: str) -> TabView:
    profile = found(config, key)
    stored = profile_data(config.redis, key, "pyinstrument")
    facts: list[tuple[str, Cell]] = [
        ("Job class", profile.type), ("JID", profile.jid), ("Token", profile.token),
        ("Started", When(profile.started_at)), ("Elapsed", f"{profile.elapsed:.3f} s"), ("Outcome", outcome(profile)),
        ("Size", f"{size(profile.size)} (the Firefox Profiler's JSON, gzipped)"),
    ]  # fmt: skip
    if profile.cut:
        facts.append(("Cut", profile.cut))
    if stored is not None:
        facts.append(("Interactive view", Link("pyinstrument's call tree and timeline", f"{key}/html")))
    facts.append(("Firefox Profiler JSON", Link("download", f"{key}/data")))
    if stored is None:  # a profile Sidekiq (Vernier) wrote: only its Firefox Profiler JSON
        return TabView(f"Profile {key}", [Facts(facts), Text("No call tree: Sidekiq wrote this profile.")])
    return TabView(f"Profile {key}", [Facts(facts), Heading("Call tree"), Code(call_tree(session_of(stored)))])


def flame(config: kiq.Config, key: str) -> Document:
    found(config, key)
    stored = profile_data(config.redis, key, "pyinstrument")
    if stored is None:
        raise LookupError(f"profile {key!r:.120} holds no pyinstrument session")
    return Document(flame_page(session_of(stored)).encode(), "text/html; charset=utf-8")


def firefox_data(config: kiq.Config, key: str) -> Document:
    found(config, key)
    data = profile_data(config.redis, key, "data")
    if data is None:
        raise LookupError(f"profile {key!r:.120} holds no data")
    return Document(data, "application/json", filename=f"{key}.json", content_encoding="gzip")


def found(config: kiq.Config, key: str) -> ProfileRecord:
    profile = record(config.redis, key)
    if profile is None:
        raise LookupError(f"no profile {key!r:.120}: it expired (profiles are kept a day) or never was")
    return profile


def outcome(profile: ProfileRecord) -> str:
    return f"failed: {profile.error}" if profile.error else "done"


def size(count: int) -> str:
    return f"{count / 1024:.1f} KiB" if count >= 1024 else f"{count} B"
