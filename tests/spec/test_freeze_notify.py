"""``freeze`` windows and ``[[notify]]`` receivers in the spec (spec/freeze.py,
spec/notify.py): what they parse to, and every mistake reported with its key and a fix."""

from __future__ import annotations

import pytest

from shipway.errors import SpecInvalid
from tests.conftest import app_from_toml

BASE = """
[app]
name = "shop"
image = "reg/shop:1"
[processes.web]
command = "serve"
port = 8000
[secrets]
HOOK_KEY = { from_env = "HOOK_KEY" }
SLACK_URL = { from_env = "SLACK_URL" }
"""


def test_receivers_are_the_app_s_then_the_slot_s_own() -> None:
    app = app_from_toml(
        BASE
        + """
[[notify]]
url = "https://hooks.example/shipway"
secret = "HOOK_KEY"
[slots.test1]
[slots.prod]
role = "production"
freeze = [{ start = "sat 00:00", end = "mon 00:00", reason = "weekend" }]
[[slots.prod.notify]]
url_secret = "SLACK_URL"
form = "slack"
events = ["failures", "started"]
"""
    )
    test1, prod = app.slots.get("test1"), app.slots.get("prod")
    assert [r.url for r in test1.notify] == ["https://hooks.example/shipway"]
    assert test1.notify[0].events == (
        "rolled", "unchanged", "done", "rolled-back", "rollback-failed", "no-anchor", "error",
        "failed", "recovered",
    )  # fmt: skip
    assert [r.form for r in prod.notify] == ["json", "slack"]
    assert prod.notify[1].events == (
        "rolled-back",
        "rollback-failed",
        "no-anchor",
        "error",
        "failed",
        "started",
    )
    assert prod.notify[1].shown() == "the URL in secret SLACK_URL"
    assert [w.every for w in prod.freeze] == ["week"] and test1.freeze == ()
    # neither is part of what a release records: adding them changes no release
    assert "freeze" not in str(app.snapshot(prod)) and "notify" not in str(app.snapshot(prod))


F = "[slots.p]\nfreeze = "
N = '[[notify]]\nurl = "https://h.example"\n'
WEEKEND = 'start = "fri 18:00", end = "mon 08:00", reason = "w"'


@pytest.mark.parametrize(
    ("extra", "path", "words"),
    [
        (F + f'[{{ {WEEKEND}, timezone = "Mars/Olympus" }}]', "slots.p.freeze.0.timezone", "zone"),
        (F + '[{ start = "friday-ish", end = "mon 08:00", reason = "w" }]', "slots.p", "neither"),
        (F + '[{ start = "fri 18:00", end = "08:00", reason = "w" }]', "slots.p", "names a day"),
        (
            F + '[{ start = "2026-12-24", end = "2026-12-01", reason = "w" }]',
            "slots.p",
            "not after",
        ),
        (F + '[{ start = "22:00", end = "06:00" }]', "slots.p.freeze.0.reason", "required"),
        (F + '"weekends"', "slots.p.freeze", "must be a list"),
        (N + 'secret = "NOPE"', "notify.0.secret", "not in [secrets]"),
        ('[[notify]]\nurl = "ftp://h.example"', "notify.0.url", "not an http(s) URL"),
        (N + 'url_secret = "SLACK_URL"', "notify.0", "exactly one of url"),
        (N + 'events = ["deployed"]', "notify.0.events", "is not an event"),
        (N + 'form = "teams"', "notify.0.form", "teams"),
        (N + 'token = "x"', "notify.0.token", ""),
    ],
)
def test_every_mistake_names_its_key(extra: str, path: str, words: str) -> None:
    with pytest.raises(SpecInvalid) as err:
        app_from_toml(BASE + extra)
    assert err.value.exit_code == 2
    found = [p for p in err.value.problems if p.path.startswith(path)]
    assert found, [p.to_json() for p in err.value.problems]
    assert any(words in f"{p.message} {p.hint}" for p in found), [p.to_json() for p in found]
