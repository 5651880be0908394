"""The key ring and the sealed form, without a worker: the ``encryption_keys`` setting's checks (each error names
the version and the fix, never a key), round trips of every kind of JSON value, and what opening refuses (another
key, a changed, truncated, moved, non-base64, wrong-typed or huge value) without ever showing the value."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import pytest

import kiq
from kiq.cli import main
from kiq.plugins.encryption import DecryptionError, KeyRing
from kiq.plugins.encryption.fields import associated, open_job, redact, seal_job
from kiq.plugins.encryption.keys import parse_key_ring

KEY = base64.b64encode(os.urandom(32)).decode()
OTHER = base64.b64encode(os.urandom(32)).decode()
WHERE = associated("Job", "args[-1]")


def ring(**versions: str) -> KeyRing:
    parsed = parse_key_ring({name.removeprefix("v"): key for name, key in versions.items()})
    assert parsed is not None
    return parsed


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("{not json", "is not JSON (it is not shown)"),
        ("[1, 2]", "expected an object of key version to base64 key"),
        ("{}", "encryption_keys has no key: give at least one"),
        ({"one": KEY}, "a key version must be a whole number from 1 to 2147483647, got 'one'"),
        ({"0": KEY}, "a key version must be a whole number from 1 to 2147483647, got '0'"),
        ({"1": KEY, " 1": OTHER}, "key version 1 is given twice"),
        ({"1": 42}, "the key of version 1 must be base64 text, got a int"),
        ({"2": "not base64!"}, "the key of version 2 is not base64 (it is not shown); make a key with: python -c"),
        ({"3": base64.b64encode(b"k" * 16).decode()}, "the key of version 3 decodes to 16 bytes, not 32 (AES-256)"),
    ],
)
def test_a_bad_setting_is_refused_naming_the_version_and_the_fix_never_the_key(raw: Any, error: str) -> None:
    with pytest.raises(kiq.ConfigError) as refused:
        kiq.Config.load(env={"KIQ_ENCRYPTION_KEYS": raw if isinstance(raw, str) else json.dumps(raw)},
                        plugins=["encryption"])  # fmt: skip
    assert "bad value for setting 'encryption_keys' (from env" in str(refused.value) and error in str(refused.value)
    assert KEY not in str(refused.value) and OTHER not in str(refused.value)


def test_the_setting_takes_json_text_a_table_and_url_safe_base64_and_shows_no_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url_safe = base64.urlsafe_b64encode(base64.b64decode(OTHER)).decode()
    config = kiq.Config.load(plugins=["encryption"], encryption_keys={"1": KEY, 2: url_safe})
    assert config.get("encryption_keys").versions == [1, 2] and config.get("encryption_keys").current == 2
    assert kiq.Config.load(plugins=["encryption"], encryption_keys="").get("encryption_keys") is None
    monkeypatch.setenv("KIQ_PLUGINS", "encryption")
    monkeypatch.setenv("KIQ_ENCRYPTION_KEYS", json.dumps({"1": KEY, "2": OTHER}))
    assert main(["settings"]) == 0 and main(["settings", "--json"]) == 0
    shown = capsys.readouterr().out
    assert "keys of versions 1, 2 (version 2 encrypts; the keys are not shown)" in shown
    assert KEY not in shown and OTHER not in shown


@pytest.mark.parametrize(
    "value",
    ["4242", "", "é\x00\u2028😀", 0, -(2**70), 1.5, None, True, [], {"a": [1, {"b": None}]}, "x" * 20_000_000],
    ids=["text", "empty", "unicode-nul", "zero", "bigint", "float", "null", "bool", "list", "nested", "20MB"],
)
def test_every_json_value_round_trips(value: Any) -> None:
    keys = ring(v1=KEY)
    job = {"class": "Job", "args": [1, value], "encrypt": True}
    seal_job(job, keys, "Job")
    assert job["args"][0] == 1 and job["args"][1].startswith("kiq-enc:1:") and job["args"][1] != value
    assert open_job(job, keys) == ([1, value], None)


def sealed(value: Any = "4242", keys: KeyRing | None = None, where: bytes = WHERE) -> str:
    return (keys or ring(v1=KEY)).seal(json.dumps(value).encode(), where)


def refusal(value: Any, keys: KeyRing | None = None, where: bytes = WHERE) -> str:
    with pytest.raises(DecryptionError) as refused:
        (keys or ring(v1=KEY)).open(value, where, "args[-1]")
    assert "4242" not in str(refused.value)
    return str(refused.value)


def test_opening_refuses_what_it_cannot_trust_without_showing_the_value() -> None:
    good = sealed()
    prefix, body = good.rsplit(":", 1)
    raw = base64.b64decode(body)
    flipped = base64.b64encode(raw[:-1] + bytes([raw[-1] ^ 1])).decode()
    assert "failed authentication with key version 1" in refusal(f"{prefix}:{flipped}")
    assert "failed authentication" in refusal(good, where=associated("Job", "kwargs['card']"))  # moved field
    assert "failed authentication" in refusal(good, where=associated("OtherJob", "args[-1]"))  # moved job
    assert "failed authentication" in refusal(good, keys=ring(v1=OTHER))  # another key of the same version
    assert "key version 1, which this process's encryption_keys lack (versions 2)" in refusal(good, ring(v2=OTHER))
    assert "is truncated: 27 bytes" in refusal(f"{prefix}:{base64.b64encode(raw[:27]).decode()}")
    assert "is not valid base64" in refusal(f"{prefix}:abcde")
    assert "a kiq-enc: value of a wrong form (14 characters)" in refusal("kiq-enc:1:ab\x00=")
    assert "args[-1] is not an encrypted value (4 characters)" in refusal("4242")
    assert "args[-1] is of type int" in refusal(4242)
    assert "is of type dict" in refusal({"card": "4242"})
    assert "not an encrypted value (20000000 characters)" in refusal("4" * 20_000_000)
    assert "a kiq-enc: value of a wrong form" in refusal("kiq-enc:99999999999:" + body)


def test_a_value_sealed_once_is_not_sealed_again_and_the_redaction_hides_the_selected_fields() -> None:
    keys = ring(v1=KEY)
    job: dict[str, Any] = {"class": "Job", "args": [7], "kwargs": {"ssn": "1", "note": "n"}, "encrypt": ["ssn"]}
    seal_job(job, keys, "Job")
    once = dict(job)
    seal_job(job, keys, "Job")  # the poller's push of a due job: the same text
    assert job == once and job["kwargs"]["note"] == "n"
    assert open_job(job, keys) == ([7], {"ssn": "1", "note": "n"})
    shown = dict(job)
    redact(shown)
    assert shown["kwargs"] == {"ssn": "[encrypted]", "note": "n"} and job["kwargs"] is once["kwargs"]
    foreign = {"args": [1, "secret"], "encrypt": "yes"}  # another producer's option: Sidekiq's Web UI rule
    redact(foreign)
    assert foreign["args"] == [1, "[encrypted]"]
