"""No table: ``Dashboard`` exists only so that the admin index lists kiq (see ``admin``), as the admin lists apps by
their models. Unmanaged, without permissions of its own: ``migrate`` creates nothing for it."""

from __future__ import annotations

from django.db import models


class Dashboard(models.Model):
    class Meta:
        managed = False
        default_permissions = ()
        verbose_name = "dashboard"
        verbose_name_plural = "dashboard"
