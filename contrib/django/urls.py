"""``path("admin/kiq/", include("kiq.contrib.django.urls"))``: the tracking endpoints and status page for staff,
e.g. ``/admin/kiq/tasks/<id>/page``. Put it before ``path("admin/", admin.site.urls)``."""

from __future__ import annotations

from django.urls import re_path

from .views import tracking

app_name = "kiq"
urlpatterns = [re_path(r"^(?P<subpath>.*)$", tracking, name="tracking")]
