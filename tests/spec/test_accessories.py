"""``[accessories.NAME]`` and ``from_accessory`` secrets: parsed, validated, refused with
their key and the fix (exit 2), snapshotted and read back."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from shipway.errors import SecretUnavailable, SpecInvalid
from shipway.spec.parse import from_snapshot
from shipway.spec.secrets import resolve_all
from tests import cliproc
from tests.conftest import app_from_toml

BASE = '[app]\nname = "shop"\n[processes.web]\ncommand = "x"\nport = 8000\n'
DB = '[accessories.db]\nkind = "postgres"\nversion = "15"\n'
LINK = '[secrets]\nDATABASE_URL = { from_accessory = "db" }\n'


def problems(text: str) -> str:
    with pytest.raises(SpecInvalid) as err:
        app_from_toml(text)
    assert err.value.exit_code == 2
    return str(err.value)


def test_a_postgres_and_a_redis_accessory_with_their_links() -> None:
    app = app_from_toml(
        BASE
        + DB
        + '[accessories.cache]\nkind = "redis"\nversion = 7\n'
        + LINK
        + 'REDIS_URL = { from_accessory = "cache" }\n'
    )
    db, cache = app.accessories["db"], app.accessories["cache"]
    assert (db.kind, db.version, cache.kind, cache.version) == ("postgres", "15", "redis", "7")
    assert app.secrets["DATABASE_URL"].from_accessory == "db"
    # the link is the target's to give: resolving the spec's references skips it
    assert resolve_all(app.secrets, {}) == {}
    with pytest.raises(SecretUnavailable, match="accessory db"):
        app.secrets["DATABASE_URL"].resolve({})


def test_the_snapshot_reads_back_to_the_same_accessories() -> None:
    app = app_from_toml(BASE + DB + LINK)
    again = from_snapshot(app.snapshot(app.slots.get("local")), Path("."))
    assert again.accessories == app.accessories
    assert again.secrets["DATABASE_URL"].from_accessory == "db"
    assert app.accessories["db"].digest() == again.accessories["db"].digest()


def test_a_spec_without_accessories_snapshots_as_before() -> None:
    app = app_from_toml(BASE)
    assert "accessories" not in app.snapshot()


@pytest.mark.parametrize(
    ("extra", "path", "words"),
    [
        ('[accessories.db]\nkind = "mysql"\nversion = "8"\n', "accessories.db.kind", "mysql"),
        ('[accessories.db]\nkind = "postgres"\n', "accessories.db.version", "is required"),
        ('[accessories.db]\nkind = "postgres"\nversion = "9"\n', "accessories.db.version", "12"),
        ('[accessories.db]\nkind = "postgres"\nversion = "15.4"\n', "accessories.db.version",
         "major version"),
        ('[accessories.db]\nkind = "redis"\nversion = "7"\nsize = "1Gi"\n',
         "accessories.db.size", "kubernetes slots only"),
        ('[accessories.db]\nkind = "redis"\nversion = "7"\nhost = "ssh://a"\n',
         "accessories.db.host", "docker slots only"),
        ('[accessories.db]\nkind = "redis"\nversion = "7"\nport = 6379\n',
         "accessories.db.port", "chosen by shipway"),
        ('[accessories.db]\nversion = "7"\n', "accessories.db", "needs a kind"),
        ('[accessories.DB]\nkind = "redis"\nversion = "7"\n', "accessories.DB", "not a valid"),
        ('[accessories.db]\nkind = "redis"\nversion = "7"\nimage = "redis:7"\n',
         "accessories.db.image", "not allowed with kind"),
        ('[accessories.db]\nkind = "redis"\nversion = "7"\n[secrets]\n'
         'DATABASE_URL = { from_accessory = "dbx" }\n',
         "secrets.DATABASE_URL.from_accessory", "declare [accessories.dbx]"),
        ('[accessories.db]\ncommand = "memcached -p 11211"\n', "accessories.db.port",
         "is required"),
    ],
)  # fmt: skip
def test_bad_accessories_are_refused_with_their_key_and_fix(
    extra: str, path: str, words: str
) -> None:
    text = problems(BASE + extra)
    assert path in text
    assert words in text


def test_local_docker_and_kubernetes_slots_run_accessories() -> None:
    app = app_from_toml(
        '[app]\nname = "shop"\nimage = "i"\n[processes.web]\ncommand = "x"\nport = 8000\n'
        + DB
        + LINK
        + '[slots.test]\nbackend = "local"\n'
        + '[slots.prod]\nbackend = "docker"\nhosts = ["unix:///var/run/docker.sock"]\n'
        + '[slots.k]\nbackend = "kubernetes"\n'
    )
    assert set(app.accessories) == {"db"} and set(app.slots.names()) == {"test", "prod", "k"}


def test_a_command_accessory_parses_but_runs_on_no_backend_yet() -> None:
    text = problems(
        BASE + '[accessories.mc]\ncommand = "memcached -p 11211"\nport = 11211\n'
        'health_command = "true"\n'
    )
    assert "slots.local.backend" in text
    assert "runs on no backend yet" in text


def test_validate_exits_2_naming_the_file_key_and_fix(tmp_path: Path) -> None:
    (tmp_path / "shipway.toml").write_text(BASE + '[accessories.db]\nkind = "postgres"\n')
    done = cliproc.run(
        [sys.executable, "-m", "shipway", "-f", str(tmp_path / "shipway.toml"), "validate"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    out = done.stdout + done.stderr
    assert "shipway.toml" in out and "accessories.db.version" in out
    assert 'version = "17"' in out


DOCKER = (
    '[app]\nname = "shop"\nimage = "i"\n[processes.web]\ncommand = "x"\nport = 8000\n'
    + DB
    + LINK
    + '[slots.prod]\nbackend = "docker"\n'
)


def test_a_docker_hosts_address_is_an_ip_kept_in_the_snapshot() -> None:
    app = app_from_toml(
        DOCKER + 'hosts = [{ url = "unix:///var/run/docker.sock", address = "10.0.0.5" }, '
        '"ssh://deploy@web1"]\n'
    )
    slot = app.slots.get("prod")
    assert [h.address for h in slot.hosts] == ["10.0.0.5", None]
    again = from_snapshot(app.snapshot(slot), Path("."))
    assert [h.address for h in again.slots.get("prod").hosts] == ["10.0.0.5", None]
    text = problems(DOCKER + 'hosts = [{ url = "ssh://deploy@db1", address = "db1" }]\n')
    assert "slots.prod.hosts[0].address" in text and "is not an IP address" in text
