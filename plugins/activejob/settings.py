"""The plugin's settings (declared through ``kiq_settings``; documented in docs/guide/configuration.md)."""

from __future__ import annotations

import kiq
import kiq.ext

from .envelope import RAILS_WRAPPER, SIDEKIQ_WRAPPER

WRAPPER = kiq.ext.Setting.choice(
    "activejob_wrapper",
    RAILS_WRAPPER,
    [RAILS_WRAPPER, SIDEKIQ_WRAPPER],
    help="the class perform_later's payloads name: Rails' adapter JobWrapper (Rails 6.1-7.1, and Sidekiq 7.3+ "
    "keeps it as an alias), or Sidekiq::ActiveJob::Wrapper (only Sidekiq 7.3+ workers know it)",
)
RAILS = kiq.ext.Setting.choice(
    "activejob_rails",
    "7",
    ["6.1", "7"],
    help="the Rails of the workers perform_later feeds: 6.1 has no BigDecimal serializer, so a Decimal goes as "
    "its string there (as 6.1 sends one); 7 (7.0 and later) sends it as a BigDecimal",
)
SETTINGS = [WRAPPER, RAILS]
