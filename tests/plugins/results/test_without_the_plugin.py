"""Under ``kiq.testing`` without the results plugin, ``result()`` says which plugin to enable, and opens no Redis
(it started an embedded one in the test's directory)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

import kiq
import kiq.testing
from kiq.config import set_default_config
from kiq.plugins import results


class Price(kiq.Job):
    kiq_name = "tests.results.unkept.Price"
    kiq_options = {"result_ttl": 60}

    def perform(self, amount: int) -> int:
        return amount * 2


@pytest.fixture
def no_redis_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[kiq.Config]:
    """A default config with no redis_url and no plugin, run from an empty directory."""
    monkeypatch.chdir(tmp_path)
    previous = kiq.default_config()
    config = set_default_config(kiq.Config())
    yield config
    set_default_config(previous)


@pytest.mark.parametrize("mode", [kiq.testing.inline, kiq.testing.fake])
def test_result_names_the_plugin_and_starts_no_redis(
    no_redis_anywhere: kiq.Config, tmp_path: Path, mode: object
) -> None:
    with mode() as running:  # type: ignore[operator]
        jid = Price.perform_async(21)
        if isinstance(running, kiq.testing.Fake):
            running.drain()
        with pytest.raises(results.NoResult) as sync_refusal:
            results.result(jid)
        with pytest.raises(results.NoResult) as async_refusal:
            asyncio.run(results.aio.result(jid))
    for refusal in (sync_refusal, async_refusal):
        message = str(refusal.value)
        assert "results plugin is not enabled" in message and "plugins = ['results']" in message
    assert not (tmp_path / ".kiq").exists()  # no embedded Redis was started
    assert no_redis_anywhere._redis is None  # nor any Redis connection opened


def test_with_the_plugin_inline_keeps_the_result(config: kiq.Config) -> None:
    config.add_plugin("results")
    with kiq.testing.inline():
        jid = Price.perform_async(21)
        assert jid is not None and results.result(jid) == 42
