"""A minimal Django project with kiq installed, for tests/contrib/test_django*.py: its settings read the
databases and the Redis the tests give (see ``settings``)."""
