"""What ``shipway init`` proposes from an app.json, a Dockerfile and a package.json: the
text validates as written, guesses are flagged, and no env file value is ever in it."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from shipway.spec import parse
from shipway.spec.scaffold import scan

APP_JSON = {
    "name": "Shop Front",
    "env": {
        "LOG_LEVEL": {"value": "info"},
        "SECRET_KEY": {"generator": "secret"},
        "STRIPE_TOKEN": {"required": True},
    },
    "formation": {"web": {"quantity": 3}},
    "scripts": {"postdeploy": "python3 seed.py"},
}


def test_app_json_dockerfile_and_package_json(tmp_path: Path) -> None:
    (tmp_path / "app.json").write_text(json.dumps(APP_JSON))
    (tmp_path / "Dockerfile").write_text("FROM node:22\nEXPOSE 5000\nCMD npm start\n")
    (tmp_path / "package.json").write_text(json.dumps({"scripts": {"start": "node app.js"}}))
    (tmp_path / ".env").write_text("DATABASE_URL=postgres://u:pw-9zz@db/x\nPLAIN=1\n")
    found = scan(tmp_path)
    text = found.text()
    app = parse(tomllib.loads(text), base_dir=tmp_path)
    assert app.name == "shop-front"  # app.json's name, as a DNS label
    web = app.processes["web"]
    assert web.command == ("npm", "start") and web.port == 5000 and web.replicas == 3
    assert app.env["LOG_LEVEL"] == "info" and app.env["PLAIN"] == "1"
    assert set(app.secrets) == {"DATABASE_URL"}  # a credential from .env: a secret
    assert '# SECRET_KEY = { from_env = "SECRET_KEY" }' in text  # app.json's: set it first
    assert '# STRIPE_TOKEN = { from_env = "STRIPE_TOKEN" }' in text
    assert '# image = "registry.example/shop-front:1"' in text  # for docker/kubernetes slots
    assert '# build = "npm ci"' in text
    assert "a guess — package.json's start script" in text
    assert "postdeploy" in text and "pw-9zz" not in text
    assert found.found == ["Dockerfile (EXPOSE 5000)", "package.json", "app.json",
                           ".env (2 variables)"]  # fmt: skip


def test_a_procfile_type_shipway_cannot_name_is_written_out_and_noted(tmp_path: Path) -> None:
    (tmp_path / "Procfile").write_text("web: python3 app.py\ncelery_beat: celery beat\n")
    text = scan(tmp_path).text()
    app = parse(tomllib.loads(text), base_dir=tmp_path)
    assert list(app.processes) == ["web"] and "\nprocfile =" not in text
    assert "# note: the Procfile's 'celery_beat' type is left out" in text
