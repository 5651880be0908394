"""Encrypted job arguments (Sidekiq Enterprise's ``encrypt``), with AES-256-GCM from ``cryptography``.

    class ChargeCard(kiq.Job):
        kiq_options = {"encrypt": True}            # the last positional argument, Sidekiq Enterprise's rule
        def perform(self, order_id, card): ...

    class Enroll(kiq.Job):
        kiq_options = {"encrypt": ["ssn"]}         # keyword arguments by name
        def perform(self, user_id, *, ssn): ...

Give the ``encryption_keys`` setting (``KIQ_ENCRYPTION_KEYS``: a JSON object of key version to the base64 of 32
random bytes; the highest version encrypts, every one decrypts), which loads the plugin, to every process that
pushes or runs such jobs; ``plugins = ["encryption"]`` without keys where only the dashboard and the CLI run.
Redis, the retry and dead sets, the dashboard, the CLI, ``kiq.api`` and the logs hold the sealed value or
``[encrypted]``, never the value. See docs/plugins/encryption.md.
"""

from __future__ import annotations

from typing import Any

import kiq
import kiq.ext

from .fields import ENCRYPTED, redact
from .keys import DecryptionError, KeyRing, parse_key_ring
from .middleware import KEYS_HINT, SETTING, DecryptionServerMiddleware, EncryptionClientMiddleware

__all__ = ["ENCRYPTED", "DecryptionError", "EncryptionPlugin", "KeyRing"]


class EncryptionPlugin:
    @kiq.hookimpl
    def kiq_settings(self) -> list[kiq.ext.Setting]:
        help_text = (
            'JSON object of key version to base64 of 32 random bytes, e.g. {"1": "...", "2": "..."}: the highest '
            "version encrypts, every one decrypts"
        )
        return [kiq.ext.Setting(SETTING, None, parse_key_ring, help_text)]

    @kiq.hookimpl
    def kiq_job_options(self) -> list[str]:
        return ["encrypt"]

    @kiq.hookimpl
    def kiq_client_middleware(self, chain: kiq.Chain[kiq.ClientMiddleware]) -> None:
        chain.add(EncryptionClientMiddleware)  # list the plugin after those whose client middleware read arguments

    @kiq.hookimpl
    def kiq_server_middleware(self, chain: kiq.Chain[kiq.ServerMiddleware]) -> None:
        chain.prepend(DecryptionServerMiddleware)  # outermost: every other layer and perform get the clear value

    @kiq.hookimpl
    def kiq_check(self, config: kiq.Config) -> None:
        if config.get(SETTING) is None:  # a worker without keys could run no encrypted job
            raise kiq.ConfigError(f"the encryption plugin needs its keys: {KEYS_HINT}")

    @kiq.hookimpl
    def kiq_redact_job(self, job: dict[str, Any]) -> None:
        redact(job)
