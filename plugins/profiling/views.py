"""A stored profile read back as people see it: pyinstrument's call tree as text, and its interactive HTML page
(call tree, timeline and flame graph views) made self-contained."""

from __future__ import annotations

import gzip
import json
import re

from pyinstrument.renderers import ConsoleRenderer, HTMLRenderer
from pyinstrument.session import Session

# the one load from the network pyinstrument's page makes: a stylesheet of web fonts from a CDN, added by its script.
# Replaced by an empty stylesheet, the page shows in the browser's own fonts and loads nothing
WEB_FONTS = re.compile(r"https://fonts\.googleapis\.com/css\?[^\"'`]*")


def session_of(stored: bytes) -> Session:
    """pyinstrument's session from its stored form (gzip of its JSON)."""
    session: Session = Session.from_json(json.loads(gzip.decompress(stored)))
    return session


def call_tree(session: Session) -> str:
    """The call tree as text, as ``pyinstrument`` prints it (library frames grouped, the slowest path first)."""
    return ConsoleRenderer(unicode=True, color=False, show_all=False).render(session)


def flame_page(session: Session) -> str:
    """pyinstrument's interactive page for ``session``: one HTML file of inline script and style, loading nothing."""
    return WEB_FONTS.sub("data:text/css,", HTMLRenderer().render(session))
