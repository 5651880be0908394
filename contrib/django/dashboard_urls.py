"""``path("admin/kiq/dashboard/", include("kiq.contrib.django.dashboard_urls"))``: the dashboard (``kiq.contrib.web``)
for staff users. Put it before the tracking endpoints' ``admin/kiq/`` and before ``path("admin/", admin.site.urls)``."""

from __future__ import annotations

from django.urls import re_path

from .views import dashboard

app_name = "kiq_dashboard"
urlpatterns = [re_path(r"^(?P<subpath>.*)$", dashboard, name="dashboard")]
