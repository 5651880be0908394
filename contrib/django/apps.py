"""The Django app: on start-up, ``settings.KIQ`` is applied to kiq's process-wide default config."""

from __future__ import annotations

from django.apps import AppConfig

import kiq

from .config import apply_settings


class KiqConfig(AppConfig):
    name = "kiq.contrib.django"
    label = "kiq"
    verbose_name = "kiq"

    def ready(self) -> None:
        # the default config is what perform_async uses; a worker builds its own (see the kiq_worker command),
        # so configure_client leaves a worker's config alone
        kiq.configure_client(apply_settings)
