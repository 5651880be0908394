"""Server middleware: a job run from an ActiveJob payload sees its envelope as ``self.active_job``."""

from __future__ import annotations

from typing import Any

import kiq

from .envelope import IN_MEMORY_KEY


class ActiveJobContext(kiq.ServerMiddleware):
    """Sets ``active_job`` on the job instance: the Envelope, or None for a job that came without one."""

    def call(self, job_instance: Any, job: dict[str, Any], queue: str) -> kiq.Wrapper:
        job_instance.active_job = job.get(IN_MEMORY_KEY)
        yield
