"""The shop's own test, as a project writes it: ``python manage.py test shop``. The welcome job is pushed at the
commit of the view's transaction, which a ``TestCase`` never commits: ``captureOnCommitCallbacks(execute=True)``
runs the deferred push, and kiq's fake mode captures it instead of sending it to Redis."""

from __future__ import annotations

from django.test import TestCase

import kiq.testing

from .jobs import WelcomeCustomer


class SignupTest(TestCase):
    def test_signup_pushes_the_welcome_job_once(self) -> None:
        with kiq.testing.fake() as pushed, self.captureOnCommitCallbacks(execute=True):
            answer = self.client.post("/signup", {"username": "ada"})
        self.assertEqual(answer.status_code, 201)
        [job] = pushed.jobs("mail", WelcomeCustomer)
        pushed.drain()  # runs it here, as a worker would
        self.assertEqual(self.client.get("/customers/ada").json(), {"username": "ada", "welcomed": True})
        self.assertEqual(job["queue"], "mail")
