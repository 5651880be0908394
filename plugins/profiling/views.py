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
# The dashboard serves the page sandboxed, in an origin of its own, where reading localStorage (which pyinstrument's
# script does for its view options) throws: an in-memory stand-in, defined first, keeps the page working
STORAGE_STAND_IN = (
    "<script>try{window.localStorage}catch(e){const m=new Map();const s={getItem:k=>m.has(k)?m.get(k):null,"
    "setItem:(k,v)=>{m.set(k,String(v))},removeItem:k=>{m.delete(k)},clear:()=>m.clear(),"
    "key:i=>[...m.keys()][i]??null,get length(){return m.size}};"
    'Object.defineProperty(window,"localStorage",{value:s});Object.defineProperty(window,"sessionStorage",{value:s})}'
    "</script>"
)


def session_of(stored: bytes) -> Session:
    """pyinstrument's session from its stored form (gzip of its JSON)."""
    session: Session = Session.from_json(json.loads(gzip.decompress(stored)))
    return session


def call_tree(session: Session) -> str:
    """The call tree as text, as ``pyinstrument`` prints it (library frames grouped, the slowest path first)."""
    return ConsoleRenderer(unicode=True, color=False, show_all=False).render(session)


def flame_page(session: Session) -> str:
    """pyinstrument's interactive page for ``session`` (its call tree and timeline views): one HTML file of inline
    script and style that loads nothing and runs in a sandbox."""
    page = WEB_FONTS.sub("data:text/css,", HTMLRenderer().render(session))
    return page.replace("<script>", STORAGE_STAND_IN + "<script>", 1)
