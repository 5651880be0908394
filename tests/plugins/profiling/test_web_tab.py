"""The Profiles tab over HTTP (the browser test is tests/contrib/web/test_profiles_tab.py): a profile Sidekiq wrote
(Vernier's, no pyinstrument session) is listed and its page offers its data without a call tree; a profile that is
gone answers 404, saying profiles are kept a day."""

from __future__ import annotations

import gzip
import time
from collections.abc import Iterator

import pytest

import kiq
from kiq.plugins.profiling.store import save
from tests.contrib.web.http_support import private_config
from tests.contrib.web.test_tabs import mounted


@pytest.fixture
def e2e_config(one_redis_url: str) -> Iterator[kiq.Config]:
    yield from private_config(one_redis_url)


def test_a_profile_sidekiq_wrote_is_listed_and_offers_its_data(e2e_config: kiq.Config) -> None:
    e2e_config.add_plugin("profiling")
    data = gzip.compress(b'{"meta": {"product": "Ruby/Vernier"}, "threads": []}')
    save(e2e_config.redis, {"started_at": int(time.time()), "token": "mike", "type": "HardJob", "jid": "a" * 24,
                            "elapsed": 1.25, "data": data, "size": len(data),
                            "filename": "/tmp/mike-HardJob-aaa.json.gz"})  # fmt: skip
    client = mounted(e2e_config)
    listing = client.get("/kiq/tabs/profiles")
    assert listing.status_code == 200 and "HardJob" in listing.text and "mike" in listing.text
    page = client.get(f"/kiq/tabs/profiles/mike-{'a' * 24}")
    assert page.status_code == 200 and "No call tree: Sidekiq wrote this profile." in page.text
    assert "interactive" not in page.text
    assert client.get(f"/kiq/tabs/profiles/mike-{'a' * 24}/data").json()["meta"]["product"] == "Ruby/Vernier"
    assert client.get(f"/kiq/tabs/profiles/mike-{'a' * 24}/html").status_code == 404


def test_a_profile_that_is_gone_answers_404(e2e_config: kiq.Config) -> None:
    e2e_config.add_plugin("profiling")
    answer = mounted(e2e_config).get("/kiq/tabs/profiles/ana-0123")
    assert answer.status_code == 404 and "it expired (profiles are kept a day)" in answer.text
