from __future__ import annotations

from django.urls import path

from .views import customer, signup

urlpatterns = [path("signup", signup), path("customers/<str:username>", customer)]
