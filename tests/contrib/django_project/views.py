"""The test project's views: a sign-up that pushes its job inside the transaction that creates the user."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest, JsonResponse

from .jobs import CreateUser


def signup(request: HttpRequest) -> JsonResponse:
    username = request.POST["username"]
    with transaction.atomic(durable=True):  # the outermost block in production; inside a TestCase's, in tests
        User.objects.create(username=username)
        # deferred to the commit: the job runs only for a user that exists
        CreateUser.perform_async(f"{username}-welcomed")
        with transaction.atomic():  # a savepoint inside: its push waits for the outermost commit too
            CreateUser.perform_async(f"{username}-nested")
    return JsonResponse({"username": username})
