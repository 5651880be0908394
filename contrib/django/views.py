"""The tracking endpoints (``kiq.contrib.tracking_http``) as a Django view, for staff users only.

Anonymous visitors are sent to the admin's login page when the project has the admin, and answered 403 when it has
not; signed-in users who are not active staff get 403. Staff may read every task, so ``/jobs/<jid>`` also says
which task a job belongs to.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse

from kiq.contrib.tracking_http import Resource, TrackingEndpoints


def tracking(request: HttpRequest, subpath: str = "") -> HttpResponse:
    if not is_staff(request):
        return _refuse(request)
    answer = endpoints.handle(request.method or "GET", "/" + subpath, request.META.get("QUERY_STRING", ""), request)
    response = HttpResponse(answer.body, status=answer.status)
    for name, value in answer.all_headers():
        response[name] = value
    return response


def is_staff(request: HttpRequest, resource: Resource | None = None) -> bool:
    """Whether the request's user is active staff (also the endpoints' ``authorize`` hook: staff read everything)."""
    user: Any = getattr(request, "user", None)  # None without Django's AuthenticationMiddleware: refused
    return bool(user is not None and user.is_active and user.is_staff)


endpoints: TrackingEndpoints[HttpRequest] = TrackingEndpoints(authorize=is_staff)


def _refuse(request: HttpRequest) -> HttpResponse:
    user: Any = getattr(request, "user", None)
    if user is not None and not user.is_authenticated:
        try:
            return redirect_to_login(request.get_full_path(), reverse("admin:login"))
        except NoReverseMatch:  # no admin site in this project
            pass
    return HttpResponse(b'{"error":"staff only"}', status=403, content_type="application/json")
