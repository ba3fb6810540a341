"""The drain after a switch ends when no connection to the old container is left, not at
the end of ``drain_timeout``: a request in flight at the switch is answered where it
started, and the old container is stopped as soon as it is."""

from __future__ import annotations

import http.client
import threading
import time

from shipway.backends.docker.drain import READ, open_connections, read_connections, whole
from shipway.backends.docker.execs import exec_output
from shipway.engine import Rolled
from tests.backends.docker.conftest import Deployment, Lines, listed
from tests.backends.local.conftest import eventually
from tests.testenv.docker import DockerHost, http_get

WINDOW = 45  # drain_timeout: far longer than the request in flight takes


def _sleeping(deployment: Deployment, host: DockerHost, container_id: str) -> bool:
    client = deployment.local(host)
    try:
        processes = client.containers.get(container_id).top()["Processes"] or []
    finally:
        client.close()
    return any("sleep" in " ".join(p) for p in processes)


def test_the_drain_waits_for_the_request_in_flight_and_no_longer(
    deployment: Deployment,
) -> None:
    env = deployment.env
    hosts = (env.a, env.b)
    deployment.write(drain=f"{WINDOW}s")
    assert isinstance(deployment.deploy(), Rolled)
    old = {h.name: deployment.containers(h, kind="app")[0].id for h in hosts}
    answers: dict[str, tuple[int, str]] = {}

    def slow(host: DockerHost) -> None:
        # 8 s: still in flight when the drain first looks, even on a loaded machine
        answers[host.name] = http_get(deployment.url(host, "/cgi-bin/slow?8"), timeout=40)

    threads = [threading.Thread(target=slow, args=(h,)) for h in hosts]

    def in_flight() -> None:  # just before the switch: a request on each old container
        for t in threads:
            t.start()
        for h in hosts:
            eventually(lambda h=h: _sleeping(deployment, h, old[h.name]), what="in flight")

    lines = Lines()
    # the walk's own line of the switch ("[5/6] update route/…"), printed just before the
    # switches' wave: not the plan's ("  5. update route/…"), printed before the new
    # containers are even made, so that under load the request could end before the switch
    lines.hooks.append(("] update route", in_flight))
    started = time.monotonic()
    outcome = deployment.deploy(lines, image=env.images.v2)
    took = time.monotonic() - started
    for t in threads:
        t.join(timeout=30)
    assert isinstance(outcome, Rolled), outcome.line()
    text = "\n".join(lines.lines)
    # answered by the old containers, not cut off by their stop
    assert answers == {h.name: (200, "slow v1\n") for h in hosts}, text
    assert text.count("1 connection open") == 2, text
    assert text.count("no connection left") == 2, text
    assert took < WINDOW - 5  # the window was not waited out
    for h in hosts:  # the old ones are gone
        assert [c.id for c in deployment.containers(h, kind="app")] != [old[h.name]]
        assert deployment.get(h) == (200, "v2\n")


KEEP_ALIVE_SERVER = """
import http.server, os, signal, sys
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps its connections alive
    def do_GET(self):
        body = (os.environ["VERSION"] + "\\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
"""


def test_an_app_that_keeps_connections_alive_is_drained_without_the_whole_window(
    deployment: Deployment,
) -> None:
    """An upstream speaking HTTP/1.1 keeps the proxy's connections to it open between
    requests, and a reload leaves the old config's idle ones open: the proxy closes them
    after 1 s unused, so the drain still ends long before ``drain_timeout``, and a client on
    one kept-alive connection has no request fail across the switch (it sends again, once,
    a request the reload's closing of its idle connection left unread)."""
    env = deployment.env

    def write(version: str) -> None:
        deployment.write(
            hosts=[env.a],
            image=env.images.python,
            drain=f"{WINDOW}s",
            processes="""
[processes.web]
command = "python3 /server.py"
port = 8080
[processes.web.healthcheck]
path = "/"
interval = "100ms"
attempts = 80
""",
            extra=f"""
[env]
VERSION = "{version}"
[files]
"server.py" = \'\'\'{KEEP_ALIVE_SERVER}\'\'\'
""",
        )

    write("v1")
    assert isinstance(deployment.deploy(), Rolled)
    seen: list[str] = []
    errors: list[str] = []
    resent: list[str] = []
    stop = threading.Event()

    def get(conn: http.client.HTTPConnection) -> None:
        conn.request("GET", "/")
        seen.append(conn.getresponse().read().decode().strip())

    def client() -> None:  # one connection, kept alive (opened again when the proxy closes it)
        conn = http.client.HTTPConnection(env.a.address, deployment.port, timeout=10)
        while not stop.is_set():
            try:
                try:
                    get(conn)
                except http.client.RemoteDisconnected as exc:
                    # The proxy's reload closes its idle client connections (a graceful
                    # shutdown of the old config's server), and a request sent on one as it
                    # closes is never read: HTTP/1.1 lets a client send it again on a new
                    # connection (RFC 9112, 9.3.1), as browsers, curl and Go's client do.
                    # Once; any other error, or a second one, is a failed request.
                    resent.append(repr(exc))
                    conn.close()
                    get(conn)
            except (OSError, http.client.HTTPException) as exc:
                errors.append(repr(exc))
                conn.close()
            stop.wait(0.01)
        conn.close()

    thread = threading.Thread(target=client)
    thread.start()
    try:
        eventually(lambda: len(seen) > 20, what="requests on the kept-alive connection")
        write("v2")
        lines = Lines()
        started = time.monotonic()
        outcome = deployment.deploy(lines)
        took = time.monotonic() - started
        eventually(lambda: seen[-1:] == ["v2"], what="the new release answering")
    finally:
        stop.set()
        thread.join(timeout=15)
    assert isinstance(outcome, Rolled), outcome.line()
    assert errors == []
    assert len(resent) <= 1, resent  # the reload closes the idle connection once, if at all
    assert took < WINDOW - 5, "\n".join(lines.lines)  # the window was not waited out
    assert "v1" in seen and deployment.containers(env.a, kind="app")[0].status == "running"
    assert len(deployment.containers(env.a, kind="app")) == 1  # the old one is gone


def test_connections_are_read_from_the_container_or_not_at_all(
    deployment: Deployment,
) -> None:
    """The web image (busybox) has ``cat``: its table is read, and a request in flight
    counts. The proxy's image (Caddy FROM scratch) has none: nothing can be read, and the
    drain falls back to its whole window."""
    env = deployment.env
    deployment.write(hosts=[env.a])
    assert isinstance(deployment.deploy(), Rolled)
    client = env.client(env.a)
    try:
        (web,) = listed(
            client,
            label=[f"org.shipway.app={deployment.name}", "org.shipway.kind=app"],
            status="running",
        )
        proxy = client.containers.get(f"shipway-proxy-{deployment.port}")  # the host's shared
        assert read_connections(web, 8080) == 0
        # the engine's output of the read begins and ends with its end mark; cut before the
        # end, or its start lost, it is not whole (and is read again rather than counted as
        # no connection)
        made = client.api.exec_create(str(web.id), READ, stdout=True, stderr=False)
        output = exec_output(client.api, made["Id"]).decode()
        assert whole(output), output
        assert not whole(output[: output.index("local_address") + 20])
        assert not whole(output[output.index("local_address") - 8 :])
        done = threading.Event()

        def slow() -> None:
            http_get(deployment.url(env.a, "/cgi-bin/slow?2"), timeout=30)
            done.set()

        threading.Thread(target=slow).start()
        eventually(lambda: read_connections(web, 8080) == 1, what="the request counted")
        assert done.wait(30)
        eventually(lambda: read_connections(web, 8080) == 0, what="its connection closed")
        assert read_connections(proxy, 80) is None
    finally:
        client.close()


def test_the_table_counts_open_connections_to_the_port_only() -> None:
    table = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1
   1: 0200120A:1F90 0300120A:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 2
   2: 0200120A:1F90 0300120A:A1B4 06 00000000:00000000 03:00000000 00000000     0        0 0
   3: 0200120A:1F90 0300120A:A1B6 08 00000000:00000000 00:00000000 00000000     0        0 3
   4: 0200120A:D431 0300120A:0050 01 00000000:00000000 00:00000000 00000000     0        0 4
cat: can't open '/proc/net/tcp6': No such file or directory
"""
    # listening (0A) and TIME_WAIT (06) do not count; ESTABLISHED and CLOSE_WAIT do; a
    # connection from another local port (0xD431) is not one to 8080
    assert open_connections(table, 8080) == 2
    assert open_connections(table, 9090) == 0
    assert open_connections("OCI runtime exec failed: cat: not found", 8080) is None


def test_an_old_container_that_exited_before_its_drain_is_not_waited_for(
    deployment: Deployment,
) -> None:
    """Listed running by the observation, gone by the drain (it crashed meanwhile): the
    drain's look finds it not running, so no connection to it is left; the window (30 s)
    is not waited out, and the deploy rolls."""
    env = deployment.env
    deployment.write(hosts=[env.a], drain=f"{WINDOW}s")
    assert isinstance(deployment.deploy(), Rolled)
    (old,) = deployment.containers(env.a, kind="app")

    def crash() -> None:
        client = deployment.local(env.a)
        try:
            client.containers.get(old.id).kill()
        finally:
            client.close()

    lines = Lines()
    lines.on("update route", crash)
    started = time.monotonic()
    outcome = deployment.deploy(lines, image=env.images.v2)
    took = time.monotonic() - started
    assert isinstance(outcome, Rolled), lines.text()
    assert took < WINDOW - 5, (took, lines.text())
    assert "draining" not in lines.text(), lines.text()
    assert [c.id for c in deployment.containers(env.a, kind="app")] != [old.id]
    assert deployment.get(env.a) == (200, "v2\n")
