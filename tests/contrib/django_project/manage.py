"""The test project's ``manage.py`` (run from the repository root, with it on ``PYTHONPATH``)."""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.contrib.django_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
