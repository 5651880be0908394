"""The profiling plugin's hooks: the ``profile`` job option and its setting, the middleware, the dashboard's
Profiles tab and ``kiq profiles``."""

from __future__ import annotations

import argparse

import kiq
import kiq.ext
from kiq.tabs import Tab

from . import cli
from .middleware import ProfilingClientMiddleware, ProfilingServerMiddleware
from .web import profiles_tab

SETTINGS = [
    kiq.ext.Setting.integer(
        "profile_max_bytes",
        2_000_000,
        minimum=20_000,
        help="bytes a stored profile may take (its two gzipped forms together); a larger one is cut, saying so",
    )
]


class ProfilingPlugin:
    """``plugins = ["profiling"]`` in the workers (they profile) and where jobs are pushed (the token is checked)."""

    @kiq.hookimpl
    def kiq_job_options(self) -> list[str]:
        return ["profile"]

    @kiq.hookimpl
    def kiq_settings(self) -> list[kiq.ext.Setting]:
        return SETTINGS

    @kiq.hookimpl
    def kiq_client_middleware(self, chain: kiq.Chain[kiq.ClientMiddleware]) -> None:
        chain.add(ProfilingClientMiddleware)

    @kiq.hookimpl
    def kiq_server_middleware(self, chain: kiq.Chain[kiq.ServerMiddleware]) -> None:
        chain.add(ProfilingServerMiddleware)  # innermost when added: the profile shows the job, not other layers

    @kiq.hookimpl
    def kiq_web_tabs(self, config: kiq.Config) -> list[Tab]:
        return [profiles_tab(config)]

    @kiq.hookimpl
    def kiq_cli(self, commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        cli.add_commands(commands)
