"""A tab's ``Document`` (``kiq.tabs``): served as it is, outside the dashboard's layout. HTML runs sandboxed (an
origin of its own: no cookie, no access to the dashboard) and may load nothing from the network; any other type is
a file to save, under a name made safe, with its encoding said (a gzipped body the client reads uncompressed)."""

from __future__ import annotations

import gzip
from collections.abc import Iterator

import pytest

import kiq
from kiq.tabs import Document, Tab, TabRequest, TabView

from .http_support import private_config
from .test_tabs import Plugin, mounted


@pytest.fixture
def e2e_config(one_redis_url: str) -> Iterator[kiq.Config]:
    yield from private_config(one_redis_url)


def viewer(request: TabRequest) -> TabView | Document:
    if request.path == "page":
        return Document(b"<html><script>document.title = 'inline'</script></html>", "text/html; charset=utf-8")
    if request.path == "file":
        return Document(gzip.compress(b'{"a": 1}'), "application/json", '../a "b"\r\n.json', "gzip")
    return TabView("Viewer", [])


def test_an_html_document_is_served_sandboxed_and_loads_nothing(e2e_config: kiq.Config) -> None:
    e2e_config.add_plugin(Plugin(Tab("viewer", "Viewer", viewer)))
    answer = mounted(e2e_config).get("/kiq/tabs/viewer/page")
    assert answer.status_code == 200 and answer.text.startswith("<html><script>document.title")  # no layout
    policy = answer.headers["content-security-policy"]
    assert policy.startswith("sandbox allow-scripts; default-src 'none'; script-src 'unsafe-inline';")
    assert "allow-same-origin" not in policy and "http" not in policy and "'self'" not in policy
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert "set-cookie" not in answer.headers


def test_another_document_is_a_file_under_a_safe_name(e2e_config: kiq.Config) -> None:
    e2e_config.add_plugin(Plugin(Tab("viewer", "Viewer", viewer)))
    answer = mounted(e2e_config).get("/kiq/tabs/viewer/file")
    assert answer.status_code == 200
    assert answer.headers["content-disposition"] == 'attachment; filename=".._a__b___.json"'
    assert answer.headers["content-encoding"] == "gzip" and answer.json() == {"a": 1}  # httpx decompresses it
    assert answer.headers["content-security-policy"].endswith("sandbox")
