from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from .views import signup

urlpatterns = [
    path("signup/", signup),
    path("admin/kiq/dashboard/", include("kiq.contrib.django.dashboard_urls")),
    path("admin/kiq/", include("kiq.contrib.django.urls")),
    path("admin/", admin.site.urls),
]
