"""The two middleware: the client one seals at the push, the server one opens before the other layers run.

Order (Sidekiq Enterprise's): the client middleware is the last layer before the push's own check, so the other
client middleware (a unique lock's digest, tracking) see the clear values; the server middleware is the first
layer, so the other server middleware and ``perform`` do. The stored payload is never changed: the server layer
gives the job its clear arguments for the inner layers and puts the sealed ones back when they are done, so a
retry, a dead entry, an error handler's ``job`` and the ``<identity>:work`` entry hold only sealed values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import kiq

from .fields import open_job, seal_job
from .keys import KeyRing

if TYPE_CHECKING:
    import redis

SETTING = "encryption_keys"
KEYS_HINT = (
    'set KIQ_ENCRYPTION_KEYS (a JSON object of key version to base64 of 32 random bytes, e.g. {"1": "..."}) or '
    "encryption_keys in kiq.toml (docs/plugins/encryption.md)"
)


def key_ring(config: kiq.Config, job_name: object) -> KeyRing:
    ring: KeyRing | None = config.get(SETTING)
    if ring is None:
        raise kiq.ConfigError(
            f"{job_name}: its arguments are to be encrypted, and no encryption_keys are set: {KEYS_HINT}"
        )
    return ring


class EncryptionClientMiddleware(kiq.ClientMiddleware):
    only_with = "encrypt"  # a push without the option skips this layer: one look-up

    def call(self, job_class: type[kiq.Job] | str, job: dict[str, Any], queue: str, redis: redis.Redis) -> kiq.Wrapper:
        option = job["encrypt"]
        if option is not None and option is not False:
            seal_job(job, key_ring(self.config, job["class"]), job_class)
        yield


class DecryptionServerMiddleware(kiq.ServerMiddleware):
    only_with = "encrypt"  # as the client's: a job without the option skips this layer

    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> kiq.Wrapper:
        option = job["encrypt"]
        if option is None or option is False:
            yield
            return
        opened = open_job(job, key_ring(self.config, job.get("class")))
        if opened is None:
            yield
            return
        sealed_args, sealed_kwargs = job["args"], job.get("kwargs")
        job["args"] = opened[0]
        if opened[1] is not None:
            job["kwargs"] = opened[1]
        try:
            yield
        finally:  # the job as stored again, for what reads it after (error handlers, death hooks, observers)
            job["args"] = sealed_args
            if opened[1] is not None:
                job["kwargs"] = sealed_kwargs
