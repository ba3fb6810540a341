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


#: credential-bearing variables as apps name them (and values that are credentials
#: whatever their name), each with a value that must never be plain env
CREDENTIALS = {
    "MONGODB_URI": "mongodb://app:m0ngo-pw@db/app",
    "SQLALCHEMY_DATABASE_URI": "postgresql://app:sqla-pw@db/app",
    "MYSQL_PWD": "mysql-pw-1",
    "GITHUB_PAT": "gh-pat-value-1",
    "STRIPE_SK": "stripe-sk-value",
    "JWT_SIGNING": "jwt-signing-value",
    "SMTP_AUTH": "smtp-auth-value",
    "BASIC_AUTH": "ann:basic-pw",
    "SLACK_WEBHOOK": "https://hooks.example/T0/B0/xyz",
    "AWS_ACCESS_KEY_ID": "access-key-id-1",
    "UPSTREAM": "https://ann:upstream-pw@api.example/v1",
    "PAYMENTS": "sk_live_0123456789abcdef",
    "CI_BOT": "ghp_0123456789abcdefghijABCDEFGHIJ012345",
    "AWS_ID": "AKIAIOSFODNN7EXAMPLE",
}


def test_every_credential_of_an_env_file_becomes_a_secret_by_name_or_value(
    tmp_path: Path,
) -> None:
    lines = [f"{k}={v}" for k, v in CREDENTIALS.items()] + ["GREETING=hello", "DEBUG=1"]
    (tmp_path / ".env").write_text("\n".join(lines) + "\n")
    text = scan(tmp_path).text()
    app = parse(tomllib.loads(text), base_dir=tmp_path)
    assert set(app.secrets) == set(CREDENTIALS)
    assert app.env == {"GREETING": "hello", "DEBUG": "1"}
    assert not [v for v in CREDENTIALS.values() if v in text]


def test_django_startproject_settings_get_migrate_a_volume_and_the_exact_change(
    tmp_path: Path,
) -> None:
    (tmp_path / "manage.py").write_text("#!/usr/bin/env python\n")
    (tmp_path / "requirements.txt").write_text("django==5.2.*\n")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "wsgi.py").write_text("")
    (tmp_path / "site" / "settings.py").write_text(
        "DATABASES = {'default': {'ENGINE': 'django.db.backends.sqlite3',\n"
        "                         'NAME': BASE_DIR / 'db.sqlite3'}}\n"
        "STATIC_ROOT = BASE_DIR / 'static'\n"
    )
    found = scan(tmp_path)
    app = parse(tomllib.loads(found.text()), base_dir=tmp_path)
    # with STATIC_ROOT set, collectstatic too: a string that needs a shell runs under sh -c
    assert app.release_command == (
        "sh", "-c",
        "python3 manage.py migrate --noinput && python3 manage.py collectstatic --noinput",
    )  # fmt: skip
    assert app.volumes["data"].path == "data"
    assert found.changes == [
        "in site/settings.py, change BASE_DIR / 'db.sqlite3' to BASE_DIR / 'data' / 'db.sqlite3'"
    ]


def test_the_web_commands_init_guesses_listen_beyond_loopback(tmp_path: Path) -> None:
    """A guessed server command binds every interface: in a container (docker, kubernetes)
    the proxy and the health check reach it over the container's own address, and a
    command bound to 127.0.0.1 would never answer there."""
    cases = {
        "django": {
            "manage.py": "",
            "requirements.txt": "django\ngunicorn\n",
            "site/wsgi.py": "",
        },
        "flask": {"app.py": "app = Flask(__name__)\n", "requirements.txt": "flask\ngunicorn\n"},
        "fastapi": {"main.py": "app = FastAPI()\n", "requirements.txt": "fastapi\nuvicorn\n"},
    }
    for name, files in cases.items():
        root = tmp_path / name
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        app = parse(tomllib.loads(scan(root).text()), base_dir=root)
        words = " ".join(app.processes["web"].command)
        assert "0.0.0.0" in words and "127.0.0.1" not in words, (name, words)
