"""The Python values that stand for Ruby ones ActiveJob passes and Python has no type for: a ``Symbol`` and a
``GlobalID``."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, unquote, urlencode

from .errors import ActiveJobError


class Symbol(str):
    """A Ruby Symbol: a str (``Symbol("draft") == "draft"``) that goes back to Ruby as a Symbol. ActiveJob's
    symbols arrive as these, hash keys included, so a value received from Rails is sent back unchanged."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Symbol({str(self)!r})"


@dataclass(frozen=True)
class GlobalID:
    """A Rails GlobalID (``gid://app/Model/id?params``): which record a job argument names. kiq cannot load a Rails
    model; the job resolves it itself, e.g. ``User.get(gid.model_id)`` when ``gid.model_name == "User"``."""

    app: str
    model_name: str
    model_id: str
    params: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, uri: str) -> GlobalID:
        """``gid://app/Model/id`` (``Admin::User`` model names, ``1/2`` composite ids, ``?key=value`` params)."""
        rest = uri.removeprefix("gid://") if isinstance(uri, str) else ""
        path, _, query = rest.partition("?")
        app, _, model = path.partition("/")
        model_name, _, model_id = model.partition("/")
        if not (rest != uri and app and model_name and model_id):
            raise ActiveJobError(f"not a GlobalID URI: {uri!r}; expected gid://app/Model/id")
        return cls(app, unquote(model_name), unquote(model_id), dict(parse_qsl(query)))

    @property
    def uri(self) -> str:
        query = f"?{urlencode(self.params)}" if self.params else ""
        return f"gid://{self.app}/{quote(self.model_name, safe=':')}/{quote(self.model_id, safe='/')}{query}"

    def __str__(self) -> str:
        return self.uri
