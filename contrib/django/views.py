"""The tracking endpoints (``kiq.contrib.tracking_http``) and the dashboard (``kiq.contrib.web``) as Django views,
for staff users only.

Anonymous visitors are sent to the admin's login page when the project has the admin, and answered 403 when it has
not; signed-in users who are not active staff get 403. Staff may read every task, so ``/jobs/<jid>`` also says
which task a job belongs to.
"""

from __future__ import annotations

import functools
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import NoReverseMatch, reverse
from django.views.decorators.csrf import csrf_exempt

from kiq.contrib.http import Answer, Request
from kiq.contrib.tracking_http import Resource, TrackingEndpoints
from kiq.contrib.web import Dashboard

from .config import config


def tracking(request: HttpRequest, subpath: str = "") -> HttpResponse:
    if not is_staff(request):
        return _refuse(request)
    if subpath.strip("/") in ADMIN_LINKS:
        return index(request)
    answer = endpoints.handle(request.method or "GET", "/" + subpath, request.META.get("QUERY_STRING", ""), request)
    return _response(answer)


@csrf_exempt  # the dashboard's forms carry its own CSRF token (a SameSite=Strict cookie, checked on every POST)
def dashboard(request: HttpRequest, subpath: str = "") -> HttpResponse:
    if not is_staff(request):
        return _refuse(request)
    root = request.path[: len(request.path) - len(subpath)].rstrip("/")
    headers = {name.lower(): value for name, value in request.headers.items()}
    query = request.META.get("QUERY_STRING", "")
    answer = _dashboard()(Request(request.method or "GET", "/" + subpath, query, headers, request.body, root, request))
    return _response(answer)


# the admin's links to kiq (its app, its Dashboard entry), which lead here when the dashboard is mounted elsewhere
ADMIN_LINKS = ("", "dashboard")


def index(request: HttpRequest) -> HttpResponse:
    """kiq's page of the admin, for staff: the dashboard when the project mounts it, else how to mount it."""
    if not is_staff(request):
        return _refuse(request)
    try:
        return redirect(reverse("kiq_dashboard:dashboard", kwargs={"subpath": ""}))
    except NoReverseMatch:
        return HttpResponse(NO_DASHBOARD, content_type="text/html; charset=utf-8")


NO_DASHBOARD = b"""<!doctype html><title>kiq</title><h1>kiq</h1>
<p>The dashboard is not mounted. Add it to your URLconf, before the admin:
<pre>path("admin/kiq/dashboard/", include("kiq.contrib.django.dashboard_urls")),</pre>
<p>A tracked task's progress page is <code>admin/kiq/tasks/&lt;task id&gt;/page</code>.
"""


@functools.cache
def _dashboard() -> Dashboard:
    return Dashboard(config())


def _response(answer: Answer) -> HttpResponse:
    response = HttpResponse(answer.body, status=answer.status)
    for name, value in answer.all_headers():
        if name.lower() == "set-cookie":  # Django sends cookies from .cookies (and its test client reads them there)
            response.cookies.load(value)
        else:
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
