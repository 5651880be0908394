"""The dashboard's text filter on a dead set of 1,000,000 entries, over real HTTP: a request looks at a window of
``FILTER_WINDOW`` entries (not the whole set), says which ones it searched, and offers "Search further", which goes on
from where it stopped and finds what lies beyond the first window. (Its time per request is measured once and
written in docs/guide/dashboard.md, not asserted here.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import redis

import kiq
from kiq.contrib.web.sets import FILTER_WINDOW
from tests.support import fresh_config

from .http_support import parse

Dashboard = Callable[..., str]  # the conftest's fixture
SIZE = 1_000_000
MARKER_RANK = FILTER_WINDOW + FILTER_WINDOW // 2  # newest first: the marker lies in the second window
# ZADD in batches of 1,000 inside Redis, 10,000 entries a call: a million entries in a few seconds, without a
# million round trips (on the tests' own server: see e2e_config)
FILL = """
for start = tonumber(ARGV[1]), tonumber(ARGV[2]), 1000 do
  local args = {}
  for i = start, start + 999 do
    local word = 'hay'
    if i == tonumber(ARGV[3]) then word = 'marker' end
    args[#args + 1] = i
    args[#args + 1] = string.format('{"class":"Fragile","args":["%s",%d],"jid":"%024x","error_class":"E"}', word, i, i)
  end
  redis.call('ZADD', KEYS[1], unpack(args))
end
return redis.call('ZCARD', KEYS[1])
"""


@pytest.fixture
def e2e_config(own_redis_url: str) -> Iterator[kiq.Config]:
    """The dashboard's config, on a redis-server of these tests' own: the fill keeps a server busy for seconds (100
    calls of ~60 ms back to back), which on the shared server held up the other test processes' commands (one
    process's poller enqueued a scheduled job 0.38 s late)."""
    yield from fresh_config(own_redis_url)


@pytest.fixture
def million_dead(e2e_config: kiq.Config) -> Iterator[redis.Redis]:
    connection = e2e_config.redis
    marker_score = SIZE - MARKER_RANK + 1  # rank 1 is the highest score, SIZE
    for start in range(1, SIZE, 10_000):
        connection.eval(FILL, 1, "dead", start, start + 9_999, marker_score)
    assert connection.zcard("dead") == SIZE
    yield connection
    connection.unlink("dead")


def count(html: str) -> str:
    page = parse(html)
    [said] = [text for text in page.texts["span"] if " in jobs " in text]
    return said


def further(html: str) -> str | None:
    links = [str(attributes["href"]) for tag, attributes in parse(html).tags if attributes.get("id") == "further"]
    return links[0] if links else None


def test_a_filter_searches_a_window_and_searching_further_goes_on(
    dashboard: Dashboard, million_dead: redis.Redis
) -> None:
    window = f"{FILTER_WINDOW:,}"
    with httpx.Client(base_url=dashboard(), timeout=60) as browser:
        first = browser.get("/dead", params={"q": "marker"})
        assert first.status_code == 200
        assert count(first.text) == f"0 matches in jobs 1–{window} of 1,000,000, newest first"
        assert "No match." in first.text
        onward = further(first.text)
        assert onward is not None, "a search that stopped before the end offers to search further"
        query = parse_qs(urlsplit(onward).query)
        assert query["q"] == ["marker"] and query["searched"] == [str(FILTER_WINDOW)]

        second = browser.get(onward)
        assert second.status_code == 200
        assert (
            count(second.text)
            == f"1 match in jobs {FILTER_WINDOW + 1:,}–{2 * FILTER_WINDOW:,} of 1,000,000, newest first"
        )
        jid = f"{SIZE - MARKER_RANK + 1:024x}"
        assert f"/dead/{float(SIZE - MARKER_RANK + 1)!r}-{jid}" in second.text, "the marker's row links its page"
        assert further(second.text) is not None

        # oldest first, the marker is near the end: the windows are the set's other end
        oldest = browser.get("/dead", params={"q": "marker", "order": "oldest"})
        assert count(oldest.text) == f"0 matches in jobs 1–{window} of 1,000,000, oldest first"
        assert million_dead.zcard("dead") == SIZE, "searching changes nothing"
