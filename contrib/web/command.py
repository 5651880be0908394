"""``kiq web``: the dashboard on its own, on the standard library's threaded WSGI server.

It binds loopback unless told otherwise. ``--password`` (or ``KIQ_WEB_PASSWORD``) asks for HTTP basic auth,
``--token`` (or ``KIQ_WEB_TOKEN``) accepts ``Authorization: Bearer <token>``; binding another address without either
is allowed but warned about, as anyone who reaches the port could then retry, delete or stop.

It answers only requests whose ``Host`` names it (DNS rebinding: a site whose name resolves to 127.0.0.1 would
otherwise be same-origin with the dashboard): ``localhost``, ``127.0.0.1``, ``[::1]``, the address it binds unless a
wildcard, and the ``web_allowed_hosts`` setting or ``--allowed-host`` (repeatable; the flags replace the setting).
Mounted in an application, the dashboard leaves that check to the framework (Django's ``ALLOWED_HOSTS``, Starlette's
``TrustedHostMiddleware``, …).
"""

from __future__ import annotations

import argparse
import base64
import hmac
import os
import signal
import sys
import threading
from collections.abc import Callable

import kiq
from kiq.cli.output import inspected_config

from ..http import Answer, Request, allowed_hosts_only, host_name, serve_wsgi, wsgi_server
from .app import Dashboard

DEFAULT_PORT = 7433
LOOPBACK = {"127.0.0.1", "::1", "localhost"}
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")  # always allowed: a rebinding page cannot send these names
WILDCARDS = {"", "0.0.0.0", "::"}


class WebCommand:
    """Adds ``kiq web`` to the command line (an installed plugin in the ``kiq.plugins`` group, for its command)."""

    @kiq.hookimpl
    def kiq_cli(self, commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        web = commands.add_parser("web", help="serve the web dashboard (http://127.0.0.1:7433 by default)")
        web.add_argument("-C", "--config", help="config file (default: kiq.toml or [tool.kiq] in pyproject.toml)")
        web.add_argument("--redis-url", help="Redis to show (default: the redis_url setting, else the embedded one)")
        web.add_argument("--shard", metavar="NAME", help="show this shard (a name in the shards setting)")
        web.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, loopback only)")
        web.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT}; 0: any)")
        web.add_argument("--read-only", action="store_true", help="show everything, allow no action")
        web.add_argument("--user", default="kiq", help="basic auth user name (with --password; default: kiq)")
        web.add_argument(
            "--password",
            default=os.environ.get("KIQ_WEB_PASSWORD"),
            help="require HTTP basic auth with this password (default: $KIQ_WEB_PASSWORD)",
        )
        web.add_argument("--token", default=os.environ.get("KIQ_WEB_TOKEN"),
                         help="accept 'Authorization: Bearer TOKEN' (default: $KIQ_WEB_TOKEN)")  # fmt: skip
        web.add_argument("--allowed-host", action="append", metavar="NAME", dest="allowed_hosts",
                         help="also answer requests for this Host (repeatable; .example.com: with its subdomains; "
                              "*: any, unsafe; default: the web_allowed_hosts setting)")  # fmt: skip
        web.set_defaults(run=run_web)


def run_web(args: argparse.Namespace) -> int:
    config = inspected_config(args)
    dashboard = Dashboard(config, read_only=args.read_only)
    hosts = allowed_hosts(args.host, config.web_allowed_hosts if args.allowed_hosts is None else args.allowed_hosts)
    handler = allowed_hosts_only(guarded(dashboard, args.user, args.password, args.token), hosts)
    if args.host not in LOOPBACK and not (args.password or args.token):
        print(f"kiq web: warning: serving {args.host} with no password or token: anyone who reaches it can act on "
              "your jobs", file=sys.stderr)  # fmt: skip
    server = wsgi_server(serve_wsgi(handler), args.host, args.port)
    host, port = str(server.server_address[0]), server.server_address[1]
    print(f"kiq web: serving the dashboard on http://{host}:{port}/ to the hosts {', '.join(hosts)} (Ctrl-C stops)",
          flush=True)  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def allowed_hosts(bound: str, extra: list[str]) -> list[str]:
    """The ``Host`` names ``kiq web`` answers: the loopback names, the bound address unless a wildcard, ``extra``."""
    hosts = list(LOOPBACK_HOSTS)
    if bound not in WILDCARDS:
        hosts.append(f"[{bound}]" if ":" in bound else bound)
    for entry in extra:
        if entry != "*" and host_name(entry.removeprefix(".")) != entry.lower().removeprefix("."):
            raise kiq.ConfigError(
                f"allowed host {entry!r} is not a host name: give one as a Host header holds it, without scheme, "
                "port or path (dash.example.com, 10.0.0.5, [fe80::1], .example.com with its subdomains, * for any)"
            )
        hosts.append(entry)
    return list(dict.fromkeys(host.lower() for host in hosts))


def guarded(
    handle: Callable[[Request], Answer], user: str, password: str | None, token: str | None
) -> Callable[[Request], Answer]:
    """``handle`` behind basic auth and/or a bearer token (either one is enough); as it is when neither is set."""
    if not password and not token:
        return handle
    accepted: list[bytes] = []
    if password:
        accepted.append(b"Basic " + base64.b64encode(f"{user}:{password}".encode()))
    if token:
        accepted.append(f"Bearer {token}".encode())

    def check(request: Request) -> Answer:
        given = request.headers.get("authorization", "").encode("latin-1", "replace")
        if any(hmac.compare_digest(given, expected) for expected in accepted):
            return handle(request)
        challenge = (("WWW-Authenticate", 'Basic realm="kiq", charset="UTF-8"'),) if password else ()
        return Answer.text(401, "sign in to see the dashboard", challenge)

    return check
