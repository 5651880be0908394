"""The example's job: it uses the ORM, so it runs in a worker where Django is set up (``manage.py kiq worker``)."""

from __future__ import annotations

from django.contrib.auth.models import User

import kiq


class WelcomeCustomer(kiq.Job):
    kiq_options = {"queue": "mail"}

    def perform(self, user_id: int) -> None:
        # stands for the real work (sending the welcome mail); the mark lets the walk-through see that it ran
        User.objects.filter(pk=user_id).update(first_name="welcomed")
