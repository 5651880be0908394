from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/kiq/dashboard/", include("kiq.contrib.django.dashboard_urls")),
    path("admin/kiq/", include("kiq.contrib.django.urls")),
    path("admin/", admin.site.urls),
]
