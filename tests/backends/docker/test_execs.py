"""An exec's output is read from its first byte: on the real engines (host A's socket, host
B over SSH), and when the engine's output comes in the same read as the answer's head —
which docker-py's own ``exec_start`` skips (its issue 3332), and which a loaded host or an
SSH channel gives now and then: a drain that read no table counted no connection and stopped
a container mid-request."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container
from docker.utils.socket import STDERR, STDOUT

from shipway.backends.docker.drain import read_connections
from shipway.backends.docker.execs import exec_frames, exec_output, run_in
from tests.testenv.docker import DockerEnv

BIG = 300_000  # many frames, more than any one read


@pytest.mark.parametrize("host", ["a", "b"])
def test_stdout_and_stderr_come_whole_and_apart_from_the_real_engine(
    host: str,
    docker_env: DockerEnv,
    docker_a: docker.DockerClient,
    docker_b: docker.DockerClient,
    docker_reap: list[Container],
) -> None:
    client = docker_a if host == "a" else docker_b
    c = client.containers.run(docker_env.images.v1, ["sleep", "600"], detach=True)
    docker_reap.append(c)
    script = f"printf first; printf oops >&2; head -c {BIG} /dev/zero | tr '\\0' x; echo"
    made = client.api.exec_create(str(c.id), ["sh", "-c", script], stdout=True, stderr=True)
    out, err = bytearray(), bytearray()
    for stream, data in exec_frames(client.api, made["Id"], patient=True):
        (out if stream == STDOUT else err).extend(data)
        assert stream in (STDOUT, STDERR)
    assert bytes(out) == b"first" + b"x" * BIG + b"\n"
    assert bytes(err) == b"oops"
    made = client.api.exec_create(str(c.id), ["cat", "/proc/sys/kernel/ostype"], stdout=True)
    assert exec_output(client.api, made["Id"]) == b"Linux\n"
    code, both = run_in(c, ["sh", "-c", "echo $SAID; echo err >&2; exit 3"], {"SAID": "out"})
    assert code == 3
    assert sorted(both.splitlines()) == [b"err", b"out"]


TABLE = (
    b"Linux\n"
    b"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
    b"   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0\n"
    b"   1: 030013AC:1F90 020013AC:CE4A 01 00000000:00000000 00:00000000 00000000     0\n"
    b"  sl  local_address                         remote_address                        st\n"
    b"Linux\n"
)


def _frame(stream: int, data: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(data).to_bytes(4, "big") + data


def _answer(head: bytes, body: bytes = b"") -> bytes:
    return head + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body


@pytest.fixture
def engine_sending_output_with_the_head(tmp_path: Path) -> Iterator[str]:
    """An Engine API socket whose exec start answer and the whole output (a connection
    table, in two frames) go out in one write, as they arrive together from a loaded host:
    the part of the engine's protocol the real ones give only by chance."""
    path = tmp_path / "engine.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(8)

    def serve(conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as requests:
            while True:
                line = requests.readline()
                if not line:
                    return
                length = 0
                while (header := requests.readline()) not in (b"\r\n", b""):
                    if header.lower().startswith(b"content-length:"):
                        length = int(header.split(b":")[1])
                requests.read(length)
                if b"/exec/" in line and b"/start" in line:
                    conn.sendall(
                        b"HTTP/1.1 101 UPGRADED\r\n"
                        b"Content-Type: application/vnd.docker.raw-stream\r\n"
                        b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
                        + _frame(STDOUT, TABLE[:100])
                        + _frame(STDOUT, TABLE[100:])
                    )
                    return  # the exec ended: the engine closes the connection
                if b"/exec" in line:
                    body = b'{"Id": "e1"}'
                    conn.sendall(_answer(b"HTTP/1.1 201 Created", body))
                else:
                    conn.sendall(_answer(b"HTTP/1.1 404 Not Found", b'{"message": "no"}'))

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"unix://{path}"
    finally:
        server.close()


def test_output_that_came_with_the_answers_head_is_read(
    engine_sending_output_with_the_head: str,
) -> None:
    client = docker.DockerClient(base_url=engine_sending_output_with_the_head, version="1.41")
    try:
        made = client.api.exec_create("c1", ["cat"], stdout=True)
        assert exec_output(client.api, made["Id"]) == TABLE
        container = Container(attrs={"Id": "c1"}, client=client)
        assert read_connections(container, 8080) == 1  # the one established, not "none"
    finally:
        client.close()
