"""Job profiling, Sidekiq 8's way: a job pushed with a profile token runs under a sampling profiler (pyinstrument)
and its profile is kept in Redis for a day, in Sidekiq 8's layout::

    ReportJob.set(profile="ana").perform_async(2026)     # or kiq_options = {"profile": "ana"}

Enable it with ``plugins = ["profiling"]`` (``pip install 'kiq[profiling]'``) in the workers and where jobs are
pushed. ``kiq profiles`` and the dashboard's Profiles tab list the profiles; the tab opens one as a call tree and
pyinstrument's flame graph; a Sidekiq 8 Web UI on the same Redis lists them too. See docs/plugins/profiling.md.
"""

from __future__ import annotations

import kiq

from .plugin import ProfilingPlugin
from .store import EXPIRY, PROFILES, ProfileRecord, profile_data, record, records

__all__ = ["EXPIRY", "PROFILES", "ProfileRecord", "ProfilingPlugin", "profile", "profiles"]


def profiles(config: kiq.Config | None = None, limit: int | None = None) -> list[ProfileRecord]:
    """The profiles kept on the config's Redis, newest first (the expired ones dropped from the listing first)."""
    return records((config or kiq.default_config()).redis, limit=limit)


def profile(key: str, config: kiq.Config | None = None) -> tuple[ProfileRecord, bytes] | None:
    """The profile ``key`` (``<token>-<jid>``) and its Firefox Profiler JSON (gzip-compressed), or None when gone."""
    redis = (config or kiq.default_config()).redis
    found = record(redis, key)
    data = profile_data(redis, key, "data")
    return None if found is None or data is None else (found, data)
