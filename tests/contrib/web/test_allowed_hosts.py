"""``kiq web`` against DNS rebinding, over real HTTP to a real ``kiq web``: a request whose ``Host`` is not an allowed
host (a page of ``rebind.attacker.example`` whose name resolves to 127.0.0.1) is answered 400, GET and POST alike,
and changes nothing, even with a valid CSRF token; the loopback names and the bound address are allowed by default,
``--allowed-host`` (and ``web_allowed_hosts``) add names, ``.example.com`` its subdomains; a malformed entry stops
``kiq web`` with a message naming it. The Host parsing itself is checked on its own (ports, IPv6, case)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
import redis

import kiq
from kiq.contrib.http import host_allowed, host_name
from kiq.contrib.web.command import LOOPBACK_HOSTS, allowed_hosts
from tests.support import ROOT, child_env

from .http_support import enqueue, job, kiq_web, post_form, private_config

REBIND = "rebind.attacker.example:7777"


@pytest.fixture
def e2e_config(one_redis_url: str) -> Iterator[kiq.Config]:
    """The dashboard's config, on a database of these tests' own (see http_support)."""
    yield from private_config(one_redis_url)


@pytest.fixture
def five_queued(e2e_config: kiq.Config) -> redis.Redis:
    connection = e2e_config.redis
    enqueue(connection, "mail", *(job(f"mail-{n}", queue="mail") for n in range(5)))
    return connection


def redis_url(config: kiq.Config) -> str:
    assert config.redis_url is not None
    return config.redis_url


def test_a_foreign_host_gets_400_on_get_and_post_and_nothing_changes(
    e2e_config: kiq.Config, five_queued: redis.Redis
) -> None:
    with kiq_web(redis_url(e2e_config)) as (process, base), httpx.Client(base_url=base) as browser:
        page = browser.get("/queues/mail")  # through an allowed host (127.0.0.1:port): a valid cookie and token
        assert page.status_code == 200 and "5 jobs" in page.text
        token = browser.cookies["kiq_csrf"]
        rebound = {"Host": REBIND, "Origin": f"http://{REBIND}"}

        read = browser.get("/queues/mail", headers={"Host": REBIND})
        assert read.status_code == 400, read.text
        assert read.headers["content-type"].startswith("text/plain") and "mail-" not in read.text
        assert "not an allowed host" in read.text
        assert browser.get("/static/kiq.css", headers={"Host": REBIND}).status_code == 400
        clear = post_form(browser, "/queues/mail", [("csrf", token), ("op", "clear")], rebound)
        assert clear.status_code == 400, clear.text
        assert five_queued.llen("queue:mail") == 5, "the POST of a foreign Host changed nothing"

        # the same POST through an allowed host is carried out: the 400 above was the Host check's
        allowed = post_form(browser, "/queues/mail", [("csrf", token), ("op", "clear")], {"Origin": base})
        assert allowed.status_code == 303 and five_queued.llen("queue:mail") == 0
        process.terminate()
        assert process.wait(15) == 0


def test_the_loopback_names_are_allowed_by_default_whatever_the_port(e2e_config: kiq.Config) -> None:
    with kiq_web(redis_url(e2e_config)) as (_, base):
        port = base.rsplit(":", 1)[1]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", "localhost", f"[::1]:{port}",
                     "127.0.0.1:1", "localhost."):  # fmt: skip
            answer = httpx.get(f"{base}/", headers={"Host": host})
            assert answer.status_code == 200 and "<h1>Dashboard</h1>" in answer.text, host
        for host in ("", "example.com", "127.0.0.2", "localhost.attacker.example", "[::2]", "local host"):
            assert httpx.get(f"{base}/", headers={"Host": host}).status_code == 400, host


def test_allowed_host_flags_add_names_and_subdomains(e2e_config: kiq.Config) -> None:
    with kiq_web(redis_url(e2e_config), "--allowed-host", "dash.internal", "--allowed-host", ".example.com") as (
        _,
        base,
    ):
        for host in ("dash.internal:7433", "Dash.Internal", "example.com", "ops.example.com:80", "a.b.example.com",
                     "localhost"):  # fmt: skip
            assert httpx.get(f"{base}/queues", headers={"Host": host}).status_code == 200, host
        for host in ("other.internal", "badexample.com", "example.com.attacker.example", REBIND):
            assert httpx.get(f"{base}/queues", headers={"Host": host}).status_code == 400, host


def test_the_setting_gives_the_names_and_star_allows_any(e2e_config: kiq.Config) -> None:
    env = {**child_env(), "KIQ_WEB_ALLOWED_HOSTS": "dash.internal,ops.internal"}
    command = [sys.executable, "-m", "kiq.cli", "web", "--redis-url", redis_url(e2e_config), "--port", "0"]
    with kiq_web(redis_url(e2e_config), "--allowed-host", "*") as (_, base):
        assert httpx.get(f"{base}/", headers={"Host": REBIND}).status_code == 200
    with subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as (
        process
    ):
        assert process.stdout is not None
        said = process.stdout.readline()  # where it serves and to which hosts
        process.terminate()
        process.wait(15)
    assert "localhost, 127.0.0.1, [::1], dash.internal, ops.internal" in said, said


def test_a_malformed_allowed_host_stops_kiq_web_naming_it(e2e_config: kiq.Config) -> None:
    command = [sys.executable, "-m", "kiq.cli", "web", "--redis-url", redis_url(e2e_config), "--port", "0",
               "--allowed-host", "https://dash.example.com/"]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "'https://dash.example.com/' is not a host name" in done.stderr + done.stdout


def test_host_names_and_the_matching_rule() -> None:
    assert host_name("Example.COM:8000") == "example.com"
    assert host_name("[::1]:7433") == "[::1]" and host_name("[::1]") == "[::1]"
    assert host_name("example.com.") == "example.com"
    assert host_name("::1") is None and host_name("a b") is None and host_name("") is None
    assert host_name("evil.example/path") is None
    assert host_allowed("a.example.com", [".example.com"]) and host_allowed("example.com", [".example.com"])
    assert not host_allowed("badexample.com", [".example.com"])
    assert host_allowed("anything", ["*"]) and not host_allowed("anything", [])


def test_the_bound_address_is_allowed_unless_a_wildcard() -> None:
    assert allowed_hosts("10.1.2.3", []) == ["localhost", "127.0.0.1", "[::1]", "10.1.2.3"]
    assert allowed_hosts("fe80::1", ["Dash.Internal"]) == [
        "localhost",
        "127.0.0.1",
        "[::1]",
        "[fe80::1]",
        "dash.internal",
    ]
    assert allowed_hosts("0.0.0.0", []) == allowed_hosts("::", []) == ["localhost", "127.0.0.1", "[::1]"]


def test_a_server_started_with_allowed_hosts_refuses_the_others(e2e_config: kiq.Config) -> None:
    """What the demo's ``--serve`` dashboard does (``serve_in_background(..., allowed_hosts=...)``): the WSGI apps
    served behind the same check as ``kiq web``."""
    from kiq.contrib import web
    from kiq.contrib.http import serve_in_background

    server = serve_in_background(web.wsgi_app(e2e_config), allowed_hosts=LOOPBACK_HOSTS)
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        assert httpx.get(base, headers={"Host": REBIND}).status_code == 400
        assert httpx.get(base, headers={"Host": "localhost:8077"}).status_code == 200
    finally:
        server.shutdown()
        server.server_close()
