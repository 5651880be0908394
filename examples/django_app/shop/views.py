"""``POST /signup`` creates a customer and pushes their welcome job; ``GET /customers/<name>`` shows it ran."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from .jobs import WelcomeCustomer


@csrf_exempt  # an API endpoint for the walk-through's curl; a form view keeps Django's CSRF check
@require_POST
def signup(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():
        user = User.objects.create(username=request.POST["username"])
        WelcomeCustomer.perform_async(user.pk)  # pushed when the transaction commits, never if it rolls back
    return JsonResponse({"username": user.username, "welcomed": False}, status=201)


@require_GET
def customer(request: HttpRequest, username: str) -> JsonResponse:
    user = get_object_or_404(User, username=username)
    return JsonResponse({"username": user.username, "welcomed": user.first_name == "welcomed"})
