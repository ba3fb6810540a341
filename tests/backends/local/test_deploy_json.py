"""``deploy -o json`` says where the app is served, as the text output's "serving" lines do."""

from __future__ import annotations

import json

from tests.backends.local.conftest import Slot


def test_deploy_json_names_the_urls_it_serves(slot: Slot) -> None:
    r = slot.run("deploy", "local", "-o", "json")
    assert r.code == 0, r.text
    doc = json.loads(r.out)
    assert doc["outcome"] == "rolled"
    assert doc["urls"] == {"web": [f"http://hello.localhost:{slot.port}"]}, doc
    # and again when nothing changed
    again = json.loads(slot.run("deploy", "local", "-o", "json").out)
    assert again["outcome"] == "unchanged" and again["urls"] == doc["urls"]
