"""The kiq entry of the admin index, for staff: "Kiq › Dashboard" opens the dashboard where the project mounts it
(``kiq.contrib.django.dashboard_urls``); without that mount, a page saying how to add it."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from .models import Dashboard
from .views import index, is_staff


@admin.register(Dashboard)
class DashboardAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_staff(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_staff(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, str] | None = None) -> HttpResponse:
        # reached only when the dashboard is not mounted at admin/kiq/dashboard/, which comes first
        return index(request)
