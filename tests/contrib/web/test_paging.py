"""Paging through big sets and queues over HTTP: a retry set of 10,000 entries and a queue of 1,000 jobs show
exactly the expected entries on the first, second and last page, in either order, with the pager's links where
they belong; the text filter finds exactly the matching entries, a page at a time; jids with unusual characters
open their page; an entry gone meanwhile answers 404; and "Delete" on a selection deletes only the selected entries."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from urllib.parse import unquote

import httpx
import pytest
import redis

import kiq

from .http_support import Document, enqueue, entry_key, failed, job, parse, post_form, private_config, set_jids

Dashboard = Callable[..., str]  # the conftest's fixture
SIZE = 10_000
PAGE = 25
BASE = float(int(time.time()) + 365 * 86_400)  # the retries are due from then on, one a second
NEEDLE = "needle"
MATCHES = [i for i in range(SIZE) if i % 250 == 7]  # 40 entries carry the needle in their arguments
TO_THE_END = "{} in jobs 1–10,000 of 10,000, oldest first (searched to the end)"
JOB_LINK = re.compile(r"/retries/(?P<score>[^-]+)-(?P<jid>.+)")


@pytest.fixture
def e2e_config(one_redis_url: str) -> Iterator[kiq.Config]:
    """The dashboard's config, on a database of these tests' own (see http_support)."""
    yield from private_config(one_redis_url)


def jid(i: int) -> str:
    return f"p{i:05d}"


@pytest.fixture
def retries(e2e_config: kiq.Config) -> redis.Redis:
    """10,000 retries, the i-th due at BASE + i (one pipelined ZADD per thousand)."""
    r = e2e_config.redis
    pipe = r.pipeline(transaction=False)
    for start in range(0, SIZE, 1000):
        members = {}
        for i in range(start, start + 1000):
            arguments = [NEEDLE, i] if i in MATCHES else [f"arg {i}"]
            members[json.dumps(failed(jid(i), args=arguments))] = BASE + i
        pipe.zadd("retry", members)
    pipe.execute()
    assert r.zcard("retry") == SIZE
    return r


def shown(page: Document) -> list[str]:
    """The jids of the entries a Retries page shows, from their links, top to bottom."""
    jids = []
    for row in page.tables.get("entries", []):
        matched = JOB_LINK.fullmatch(unquote(row[3].hrefs[0]))
        assert matched is not None, row[3].hrefs
        jids.append(matched["jid"])
    return jids


def pager(page: Document) -> dict[str, str]:
    """The pager's links by rel (prev, next)."""
    return {str(attributes["rel"]): str(attributes["href"]) for tag, attributes in page.tags
            if tag == "a" and attributes.get("rel") in ("prev", "next")}  # fmt: skip


def get(browser: httpx.Client, path: str, **params: str | int) -> Document:
    answer = browser.get(path, params=params or None)  # httpx: any params replace the query of ``path``
    assert answer.status_code == 200, (path, params, answer.status_code)
    return parse(answer.text)


def test_a_set_of_10000_pages_by_rank_in_either_order(dashboard: Dashboard, retries: redis.Redis) -> None:
    last = SIZE // PAGE
    with httpx.Client(base_url=dashboard()) as browser:
        first = get(browser, "/retries")  # due soonest first, by default
        assert shown(first) == [jid(i) for i in range(PAGE)]
        assert "10,000 jobs" in first.texts["span"]
        assert set(pager(first)) == {"next"}
        epochs = [float(str(attributes["data-epoch"])) for tag, attributes in first.tags if tag == "time"]
        assert epochs == [BASE + i for i in range(PAGE)]  # each row's time is its score

        second = get(browser, pager(first)["next"])
        assert shown(second) == [jid(i) for i in range(PAGE, 2 * PAGE)]
        assert set(pager(second)) == {"prev", "next"} and "page=1" in pager(second)["prev"]
        end = get(browser, "/retries", page=last)
        assert shown(end) == [jid(i) for i in range(SIZE - PAGE, SIZE)]
        assert set(pager(end)) == {"prev"}, "no next page after the last"
        assert shown(get(browser, "/retries", page=last + 1)) == []

        newest = get(browser, "/retries", order="newest")
        assert shown(newest) == [jid(i) for i in range(SIZE - 1, SIZE - 1 - PAGE, -1)]
        assert "order=newest" in pager(newest)["next"]
        following = get(browser, pager(newest)["next"])
        assert shown(following) == [jid(i) for i in range(SIZE - 1 - PAGE, SIZE - 1 - 2 * PAGE, -1)]
        oldest_last = get(browser, "/retries", order="newest", page=last)
        assert shown(oldest_last) == [jid(i) for i in range(PAGE - 1, -1, -1)]
        assert "next" not in pager(oldest_last)

        # the link that flips the order starts again at page 1
        [flip] = [str(attributes["href"]) for tag, attributes in second.tags if attributes.get("class") == "order"]
        assert "order=newest" in flip and "page=1" in flip
        assert shown(get(browser, flip)) == shown(newest)


def test_the_filter_finds_exactly_the_matching_entries(dashboard: Dashboard, retries: redis.Redis) -> None:
    with httpx.Client(base_url=dashboard()) as browser:
        found = get(browser, "/retries", q=NEEDLE)  # a page of matches: the search stops at the 25th
        assert "25 matches in jobs 1–6,008 of 10,000, oldest first" in found.texts["span"]
        assert shown(found) == [jid(i) for i in MATCHES[:PAGE]]
        rest = get(browser, pager(found)["next"])  # "Search further" goes on after the last match
        assert shown(rest) == [jid(i) for i in MATCHES[PAGE:]] and "next" not in pager(rest)
        assert "15 matches in jobs 6,009–10,000 of 10,000, oldest first (searched to the end)" in rest.texts["span"]
        newest = get(browser, "/retries", q=NEEDLE, order="newest")
        assert shown(newest) == [jid(i) for i in reversed(MATCHES)][:PAGE]
        one = get(browser, "/retries", q=jid(4321))  # the jid is in the JSON too
        assert shown(one) == [jid(4321)] and TO_THE_END.format("1 match") in one.texts["span"]
        none = get(browser, "/retries", q="no such text *?[]")  # glob characters are literal
        assert shown(none) == [] and TO_THE_END.format("0 matches") in none.texts["span"]
        assert "No match." in none.text


def test_a_queue_of_1000_pages_newest_first(dashboard: Dashboard, e2e_config: kiq.Config) -> None:
    enqueue(e2e_config.redis, "bulk", *(job(f"q{i:04d}", queue="bulk") for i in range(1000)))
    with httpx.Client(base_url=dashboard()) as browser:
        first = get(browser, "/queues/bulk")
        assert first.column("jobs", 2) == [f"q{i:04d}" for i in range(999, 974, -1)]
        assert set(pager(first)) == {"next"}
        second = get(browser, pager(first)["next"])
        assert second.column("jobs", 2) == [f"q{i:04d}" for i in range(974, 949, -1)]
        last = get(browser, "/queues/bulk", page=40)
        assert last.column("jobs", 2) == [f"q{i:04d}" for i in range(24, -1, -1)]
        assert set(pager(last)) == {"prev"}

        # deleting one job from the second page takes that job only
        form = second.form("/queues/bulk", op="delete", jid="q0960")
        assert post_form(browser, form.action, form.fields).status_code == 303
    left = [json.loads(value)["jid"] for value in e2e_config.redis.lrange("queue:bulk", 0, -1)]
    assert len(left) == 999 and "q0960" not in left and {"q0959", "q0961"} <= set(left)


UNUSUAL = ["a-b-c", "a/b", "a//b", "/lead", "with space", "50%", "%41", "q?x=1", "h#x", "plus+sign", "é-ü",
           "1.5-2.5", "-", "<tag>", "quote\"s", "a;b,c=d"]  # fmt: skip


def test_entries_with_unusual_jids_open_from_their_links(dashboard: Dashboard, e2e_config: kiq.Config) -> None:
    r = e2e_config.redis
    died = time.time() - 60
    r.zadd("dead", {json.dumps(failed(name)): died + index for index, name in enumerate(UNUSUAL)})
    with httpx.Client(base_url=dashboard()) as browser:
        listing = get(browser, "/dead", order="oldest")
        links = [row[3].hrefs[0] for row in listing.tables["entries"]]
        assert len(links) == len(UNUSUAL)
        for name, link in zip(UNUSUAL, links, strict=True):
            page = get(browser, link)
            facts = dict(zip(page.texts["dt"], page.texts["dd"], strict=True))
            assert facts["JID"] == name, (link, facts["JID"])
        # and act from there: delete one by its page's form
        page = get(browser, links[UNUSUAL.index("q?x=1")])
        form = page.form(links[UNUSUAL.index("q?x=1")], op="Delete")
        assert post_form(browser, form.action, form.fields).status_code == 303
    assert "q?x=1" not in set_jids(r, "dead") and len(set_jids(r, "dead")) == len(UNUSUAL) - 1


def test_an_entry_gone_meanwhile_answers_404(dashboard: Dashboard, retries: redis.Redis) -> None:
    with httpx.Client(base_url=dashboard()) as browser:
        link = get(browser, "/retries").tables["entries"][3][3].hrefs[0]
        assert browser.get(link).status_code == 200
        retries.zremrangebyscore("retry", BASE + 3, BASE + 3)  # the poller moved it, or another admin
        gone = browser.get(link)
        assert gone.status_code == 404 and gone.headers["content-type"].startswith("text/html")
        assert "no longer there" in gone.text
        for malformed in ("/retries/not-a-key", "/retries/1e999999-x", "/retries/-", "/retries/1.5"):
            answer = browser.get(malformed)
            assert answer.status_code == 404, (malformed, answer.status_code)
        # a queue job deleted meanwhile: its Delete button answers 404, nothing else goes
        enqueue(retries, "small", job("s1", queue="small"), job("s2", queue="small"))
        form = get(browser, "/queues/small").form("/queues/small", op="delete", jid="s1")
        retries.lrem("queue:small", 1, str(retries.lindex("queue:small", 1)))
        assert post_form(browser, form.action, form.fields).status_code == 404
        assert [json.loads(value)["jid"] for value in retries.lrange("queue:small", 0, -1)] == ["s2"]


def test_delete_on_a_selection_deletes_only_the_selected(dashboard: Dashboard, retries: redis.Redis) -> None:
    with httpx.Client(base_url=dashboard()) as browser:
        page = get(browser, "/retries", page=2)
        boxes = [str(box["value"]) for box in page.checkboxes if box.get("name") == "key"]
        assert boxes == [entry_key(BASE + i, jid(i)) for i in range(PAGE, 2 * PAGE)]
        chosen = [boxes[1], boxes[4], boxes[20]]
        [form] = [form for form in page.post_forms() if form.id == "retries-selection"]
        page.button("retries-selection", "delete")
        answer = post_form(browser, form.action, [*form.fields, ("action", "delete"), *(("key", k) for k in chosen)])
        assert answer.status_code == 303 and answer.headers["location"] == "/retries"
        after = get(browser, "/retries", page=2)
    gone = {jid(PAGE + 1), jid(PAGE + 4), jid(PAGE + 20)}
    assert retries.zcard("retry") == SIZE - 3
    assert gone.isdisjoint(set_jids(retries, "retry")[PAGE : 3 * PAGE])
    assert shown(after) == [jid(i) for i in range(PAGE, 2 * PAGE + 3) if jid(i) not in gone]
