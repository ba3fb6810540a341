"""The local backend's records (programs, routes, claims, generations, snapshot, env files):
typed, versioned JSON; a file written before versions is read as version 1, a newer one
is refused without being touched."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from shipway.backends.local.dirs import SlotDirs
from shipway.backends.local.generations import (
    live_generation,
    read_claims,
    read_generations,
    write_claims,
    write_generations,
)
from shipway.backends.local.records import (
    EnvFile,
    read_current_snapshot,
    read_programs,
    read_routes,
    write_current_snapshot,
    write_programs,
    write_routes,
)
from shipway.errors import BackendError

#: programs.json as the local backend wrote it before its records were typed (no version)
UNVERSIONED_PROGRAM: dict[str, Any] = {
    "unit": "0123456789abcdef0123",
    "process": "web",
    "deployment_id": "d1",
    "release": "r3",
    "snapshot": "/state/hello/local/releases/r3",
    "snapshot_digest": "sha256:abc",
    "health": {
        "mode": "http",
        "path": "/health",
        "interval": 0.5,
        "timeout": 2.0,
        "attempts": 7,
        "initial_delay": 0.25,
    },
    "instances": [
        {
            "name": "sw.hello.local.web.d1.0",
            "port": 41001,
            "env": "/state/hello/local/run/web.d1.0.env.json",
            "counter": "/state/hello/local/run/web.d1.0.starts",
            "log": "/state/hello/local/logs/web.d1.0.log",
            "starts_before": 2,
        }
    ],
    "created_at": "2026-01-02T03:04:05+00:00",
}
UNVERSIONED_GENERATION_PROGRAM: dict[str, Any] = {
    **UNVERSIONED_PROGRAM,
    "health": {"mode": "uptime", "initial_delay": 1.0},
    "instances": [],
    "generation": "local-20260102-030405",
    "command": ["python3", "app.py"],
    "env_template": "/state/hello/local/run/web.d1.env.json",
    "replicas": 0,
}


@pytest.fixture
def d(tmp_path: Path) -> SlotDirs:
    dirs = SlotDirs(tmp_path, "hello", "local")
    dirs.base.mkdir(parents=True)
    return dirs


def test_an_unversioned_programs_file_reads_as_version_1_and_keeps_its_shape(d: SlotDirs) -> None:
    old = {
        "program/web@d1": UNVERSIONED_PROGRAM,
        "gen/g/program/web@d1": UNVERSIONED_GENERATION_PROGRAM,
    }
    d.programs.write_text(json.dumps({"programs": old}))
    programs = read_programs(d)
    web = programs["program/web@d1"]
    assert (web.process, web.release, web.revision, web.generation) == ("web", "r3", 3, None)
    assert (web.health.mode, web.health.path, web.health.attempts) == ("http", "/health", 7)
    [inst] = web.instances
    assert (inst.port, inst.starts_before, inst.upstream) == (41001, 2, "127.0.0.1:41001")
    assert inst.log == Path("/state/hello/local/logs/web.d1.0.log")
    asleep = programs["gen/g/program/web@d1"]
    assert asleep.instances == () and asleep.command == ("python3", "app.py")
    assert asleep.env_files() == [Path("/state/hello/local/run/web.d1.env.json")]

    write_programs(d, programs)
    doc = json.loads(d.programs.read_text())
    assert doc["version"] == 1
    assert doc["programs"] == old  # the same records, the same shape: older readers still work
    assert stat.S_IMODE(d.programs.stat().st_mode) == 0o600


def test_a_file_of_a_newer_version_is_refused_and_left_as_it_is(d: SlotDirs) -> None:
    raw = json.dumps({"version": 2, "programs": {}, "something": "new"})
    d.programs.write_text(raw)
    with pytest.raises(BackendError, match=r"programs\.json is in format version 2.*upgrade"):
        read_programs(d)
    d.routes.write_text(json.dumps({"version": "two", "routes": {}}))
    with pytest.raises(BackendError, match=r"routes\.json is in format version 'two'"):
        read_routes(d)
    assert d.programs.read_text() == raw


def test_a_record_that_does_not_parse_names_the_file_and_the_entry(d: SlotDirs) -> None:
    broken = {k: v for k, v in UNVERSIONED_PROGRAM.items() if k != "process"}
    d.programs.write_text(json.dumps({"version": 1, "programs": {"program/web@d1": broken}}))
    with pytest.raises(BackendError, match=r"programs\.json: programs\.program/web@d1 cannot be"):
        read_programs(d)


def test_routes_claims_generations_and_the_current_snapshot_round_trip(d: SlotDirs) -> None:
    route = {"unit": "u1", "program": "program/web@d1", "process": "web", "router_port": 8800,
             "since": 12.5}
    d.routes.write_text(json.dumps({"routes": {"hello.localhost": route}}))
    routes = read_routes(d)
    assert routes["hello.localhost"].program == "program/web@d1"
    write_routes(d, routes)
    assert json.loads(d.routes.read_text()) == {"version": 1, "routes": {"hello.localhost": route}}

    claim_a = {"program": "gen/a/program/web@1", "process": "web", "router_port": 8800,
               "since": 10.0}
    claim_b = {**claim_a, "program": "gen/b/program/web@2", "since": 20.0}
    d.claims.write_text(json.dumps({"claims": {"a": {"h": claim_a}, "b": {"h": claim_b}}}))
    claims = read_claims(d)
    assert claims["a"]["h"].unit is None and live_generation(claims) == "b"
    claims["a"].clear()
    write_claims(d, claims)
    assert json.loads(d.claims.read_text()) == {"version": 1, "claims": {"b": {"h": claim_b}}}

    gen = {"unit": "u2", "revision": 4, "dir": "r4", "digest": "sha256:4",
           "created_at": "2026-01-02T03:04:05.000001+00:00"}
    d.generations.write_text(json.dumps({"generations": {"b": gen}}))
    generations = read_generations(d)
    assert (generations["b"].revision, generations["b"].created_at) == (4, gen["created_at"])
    write_generations(d, generations)
    assert json.loads(d.generations.read_text()) == {"version": 1, "generations": {"b": gen}}

    assert read_current_snapshot(d) is None
    current = {"unit": "u3", "revision": 5, "dir": "r5", "digest": "sha256:5"}
    d.current_snapshot.write_text(json.dumps(current))
    snap = read_current_snapshot(d)
    assert snap is not None and (snap.dir, snap.digest) == ("r5", "sha256:5")
    write_current_snapshot(d, snap)
    assert json.loads(d.current_snapshot.read_text()) == {"version": 1, **current}


def test_an_env_file_is_private_and_names_its_secrets(tmp_path: Path) -> None:
    env = EnvFile.of({"PATH": "/bin", "TOKEN": "s3cr3t-value"}, ["TOKEN", "UNUSED"])
    path = tmp_path / "web.d1.0.env.json"
    env.with_port(41001).write(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # the launcher's format (launch.py reads "env" and "secret_names", nothing else)
    assert json.loads(path.read_text()) == {
        "env": {"PATH": "/bin", "TOKEN": "s3cr3t-value", "PORT": "41001"},
        "secret_names": ["TOKEN"],
    }
    back = EnvFile.read(path)
    assert back is not None and back.secret_values() == ["s3cr3t-value"]
    assert EnvFile.read(tmp_path / "missing.env.json") is None
