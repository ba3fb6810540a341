"""Deploy, serve, redeploy, rollback, history — through the real CLI, real processes and
real HTTP on loopback."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.backends.local.conftest import Slot, eventually


def test_deploy_serves_prints_the_url_and_records_the_release(slot: Slot) -> None:
    r = slot.deploy()
    assert f"serving http://hello.localhost:{slot.port}/" in r.out
    assert "rolled hello/local from nothing to r1" in r.out
    assert slot.get("/") == (200, "hello from r1\n")
    assert slot.get("/up") == (200, "ok\n")
    # the snapshot is a copy of the source, one directory per revision
    snap = slot.state / "hello" / "local" / "releases" / "r1"
    assert (snap / "app.py").read_text() == (slot.app_dir / "app.py").read_text()
    [rec] = slot.history()
    assert (rec["revision"], rec["status"]) == (1, "deployed")
    assert rec["image"].startswith(f"local:{slot.app_dir}@sha256:")
    # processes run from the snapshot, with PORT set, and keep running after the CLI exits
    procs = slot.processes()
    assert set(procs) == {"web", "worker"}
    web = procs["web"]
    assert web["state"] == "running" and web["health"] == "ok"
    assert web["url"] == f"http://hello.localhost:{slot.port}"
    assert os.readlink(f"/proc/{web['pid']}/cwd") == str(snap)
    environ = Path(f"/proc/{web['pid']}/environ").read_bytes().split(b"\0")
    assert f"PORT={web['port']}".encode() in environ
    assert b"SHIPWAY_RELEASE=r1" in environ


def test_redeploy_rollback_and_history(slot: Slot) -> None:
    slot.deploy()
    first = slot.processes()["web"]
    slot.edit_spec('GREETING = "hello"', 'GREETING = "howdy"')
    r = slot.deploy()
    assert "rolled hello/local from r1 to r2" in r.out
    assert slot.get("/") == (200, "howdy from r2\n")
    second = slot.processes()["web"]
    # a fresh port and a fresh process; the old one is gone
    assert second["port"] != first["port"]
    assert second["pid"] != first["pid"]
    eventually(lambda: not os.path.exists(f"/proc/{first['pid']}"), what="old web to stop")
    assert len(slot.programs()) == 2

    r = slot.run("rollback", "local")
    assert r.code == 0, r.text
    assert "rolled hello/local from r2 to r3" in r.out
    # r3 re-runs exactly what r1 ran (its stored artifact): r1's greeting and release name
    assert slot.get("/") == (200, "hello from r1\n")
    assert [(h["revision"], h["status"]) for h in slot.history()] == [
        (1, "superseded"),
        (2, "superseded"),
        (3, "deployed"),
    ]
    assert slot.history()[2]["description"] == "rollback to r1"

    r = slot.run("rollback", "local", "2")
    assert r.code == 0, r.text
    assert slot.get("/") == (200, "howdy from r2\n")
    assert slot.run("rollback", "local", "9").code == 2


def test_secrets_reach_processes_and_config_files_but_never_output(slot: Slot) -> None:
    token = "s3cr3t-value-0123"
    (slot.app_dir / "printer.py").write_text(
        "import os, time\n"
        "print('token is', os.environ['API_TOKEN'], flush=True)\n"
        "time.sleep(3600)\n"
    )
    slot.spec.write_text(
        slot.spec.read_text()
        + '\n[processes.printer]\ncommand = "python3 printer.py"\n'
        + '\n[secrets]\nAPI_TOKEN = { from_env = "HELLO_TOKEN" }\n'
        + '\n[files]\n"conf/app.ini" = "token = ${secrets.API_TOKEN}"\n'
        + '"conf/plain.ini" = "mode = demo"\n'
    )
    slot.env["HELLO_TOKEN"] = token
    outputs = [slot.run("plan", "local").text, slot.deploy().text]
    snap = slot.state / "hello" / "local" / "releases" / "r1"
    secret_file = snap / "conf" / "app.ini"
    assert secret_file.read_text() == f"token = {token}"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((snap / "conf" / "plain.ini").stat().st_mode) == 0o644
    logs = eventually(
        lambda: (r := slot.run("logs", "local", "printer")).code == 0 and "token is" in r.out
        and r.text,
        what="the printer's log line",
    )
    assert "token is ***" in logs
    for args in (("status", "local"), ("history", "local"), ("history", "local", "-o", "json"),
                 ("status", "local", "-o", "json"), ("logs", "local", "-o", "json")):
        outputs.append(slot.run(*args).text)
    outputs.append(logs)
    for text in outputs:
        assert token not in text
    # and the state dir's records hold no value either
    assert token.encode() not in (slot.state / "hello" / "local" / "records.json.gz").read_bytes()


def test_stop_stops_everything_and_deploy_brings_it_back(slot: Slot) -> None:
    slot.deploy()
    pids = [p["pid"] for p in slot.processes().values()]
    r = slot.run("stop", "local")
    assert r.code == 0, r.text
    for pid in pids:
        eventually(lambda pid=pid: not os.path.exists(f"/proc/{pid}"), what=f"pid {pid} to stop")
    assert not slot.supervisor().running()
    assert slot.history()[0]["status"] == "deployed"  # the record stays
    slot.deploy()
    assert slot.get("/") == (200, "hello from r2\n")


def test_replicas_run_as_instances_on_their_own_ports_behind_the_router(slot: Slot) -> None:
    slot.edit_spec("port = 8000", "port = 8000\nreplicas = 2")
    slot.deploy()
    procs = slot.processes()
    assert {"web.1", "web.2", "worker"} == set(procs)
    assert procs["web.1"]["port"] != procs["web.2"]["port"]
    assert procs["web.1"]["pid"] != procs["web.2"]["pid"]
    for _ in range(6):
        assert slot.get("/") == (200, "hello from r1\n")
    logs = slot.run("logs", "local", "web").out
    assert 'web.1@r1 | 127.0.0.1 "GET / HTTP/1.1" 200' in logs
    assert 'web.2@r1 | 127.0.0.1 "GET / HTTP/1.1" 200' in logs


def test_a_secret_named_in_a_command_stays_out_of_its_command_line(slot: Slot) -> None:
    token = "s3cr3t-argv-4567"
    spec = slot.spec.read_text()
    spec = spec.replace(
        'command = "python3 app.py"',
        "command = ['python3', 'app.py', '--token', '$API_TOKEN', '${API_TOKEN}', '$GREETING']",
    )
    # a shell still sees the secret: it reads it from its environment
    spec = spec.replace(
        'command = "python3 worker.py"',
        "command = ['sh', '-c', 'case \"$API_TOKEN\" in s3cr3t-*) exec python3 worker.py;; "
        "esac; exit 3']",
    )
    spec = spec.replace(
        'name = "hello"',
        'name = "hello"\n'
        "release_command = ['python3', '-c', 'import sys; print(\"argv\", sys.argv[1:])', "
        "'$API_TOKEN']",
    )
    slot.spec.write_text(spec + '\n[secrets]\nAPI_TOKEN = { from_env = "HELLO_TOKEN" }\n')
    slot.env["HELLO_TOKEN"] = token
    slot.deploy()
    procs = slot.processes()
    for process in ("web", "worker"):
        pid = procs[process]["pid"]
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert not any(token.encode() in word for word in argv), (process, argv)
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"API_TOKEN={token}".encode() in environ, process
    web = Path(f"/proc/{procs['web']['pid']}/cmdline").read_bytes().split(b"\0")
    assert web[-4:] == [b"$API_TOKEN", b"${API_TOKEN}", b"hello", b""]  # other names expand
    assert procs["worker"]["state"] == "running"  # its shell matched the value
    log = slot.state / "hello" / "local" / "logs" / "_release-r1.log"
    assert "argv ['$API_TOKEN']" in log.read_text()
