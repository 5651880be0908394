"""The test project's jobs: they use Django's ORM, so they run only where Django is set up."""

from __future__ import annotations

import kiq


class CreateUser(kiq.Job):
    kiq_options = {"queue": "django", "retry": False}

    def perform(self, username: str) -> None:
        from django.contrib.auth.models import User

        User.objects.create(username=username)
