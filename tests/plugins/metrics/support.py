"""Helpers for the metrics port tests: a free port, GETs that report a refused or timed-out answer as a status,
and ``/metrics`` parsed with ``prometheus_client.parser`` into ``{(sample name, labels): value}``."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
NO_ANSWER = 0  # the "status" of a GET that got no answer (refused, timed out)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(port: int, path: str, timeout: float = 5.0, accept: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return NO_ANSWER, str(exc)


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(port: int) -> Samples:
    status, body = get(port, "/metrics")
    assert status == 200, (status, body)
    return parse(body)


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 when the scrape has no such sample (a counter nothing counted yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)
