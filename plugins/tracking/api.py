"""The tracking API on a config (the default one unless given): its Tracker, and the shortcuts to it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kiq import Call, Config, Job, JobFunction, JobSetter, default_config

from .plugin import TrackingPlugin
from .tracker import Tracker


def tracker_for(config: Config | None = None) -> Tracker:
    """The Tracker of ``config`` (the default config if None), adding the tracking plugin to it if needed."""
    config = config or default_config()
    return config.add_plugin(TrackingPlugin).tracker(config)


def create_task(
    job: type[Job] | JobFunction[Any, Any] | JobSetter, args_list: Iterable[list[Any] | Call], name: str | None = None
) -> str:
    """``Tracker.create_task`` on the default config."""
    return tracker_for().create_task(job, args_list, name)


def message(job: Job | str, text: str) -> None:
    """``Tracker.message`` on the default config (inside a job: the worker's). Nothing happens where that config
    does not track (a unit test calling ``perform``, ``kiq.testing``, a worker without the plugin): a progress
    message never opens a tracking database of its own."""
    config = default_config()
    plugin = config.plugins.find(TrackingPlugin)
    if plugin is not None:
        plugin.tracker(config).message(job, text)
