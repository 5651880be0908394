"""The test project's URLs without the dashboard: the admin's kiq links say how to mount it."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/kiq/", include("kiq.contrib.django.urls")),
    path("admin/", admin.site.urls),
]
