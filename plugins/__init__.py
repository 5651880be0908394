"""Plugins shipped with kiq; each lives in its own folder and is enabled by name in the ``plugins`` setting."""
