"""An ``exec``'s output, read whole.

docker-py reads an exec's output from the raw socket under the response (its
``_get_raw_response_socket``), past the buffered reader ``http.client`` read the response's
head with. Output the engine sent close behind the head (a quick command on a loaded host,
or the two coming in one read of an SSH channel) is in that buffer, not the socket, and is
lost: the start of a ``cat``'s output, or of a backup's dump (docker-py issue 3332, open).
Here the frames are read through that same buffered reader, so nothing that came with the
head is skipped.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import docker
from docker.models.containers import Container
from docker.utils.socket import STDOUT

#: a frame's head: the stream, three zero bytes, the payload's length (big-endian)
HEAD = 8


def frames(reader: Any) -> Iterator[tuple[int, bytes]]:
    """(stream, payload) of each frame ``reader`` (a file object whose ``read(n)`` returns
    ``n`` bytes, fewer only at the end) holds, until its end."""
    while True:
        head = reader.read(HEAD)
        if len(head) < HEAD:
            return
        size = int.from_bytes(head[4:], "big")
        payload = reader.read(size) if size else b""
        if len(payload) < size:
            return  # the connection ended mid-frame: what came is all there is
        yield head[0], payload


def exec_frames(
    api: docker.APIClient, exec_id: str, *, patient: bool = False
) -> Iterator[tuple[int, bytes]]:
    """Start the exec ``exec_id`` (made without a TTY) and yield its output's frames, from
    the first byte. Raises ``docker.errors.APIError`` as ``exec_start`` does. ``patient``: no
    read times out (a dump may say nothing for minutes); else the client's timeout holds."""
    inner: Any = api  # its private parts exec_start itself calls, which the stubs leave out
    response = inner._post_json(  # what exec_start sends
        inner._url("/exec/{0}/start", exec_id),
        headers={"Connection": "Upgrade", "Upgrade": "tcp"},
        data={"Tty": False, "Detach": False},
        stream=True,
    )
    try:
        raw = inner._get_raw_response_socket(response)  # raises for an error status; reads nothing
        if patient:
            inner._disable_socket_timeout(raw)
        yield from frames(response.raw._fp.fp)  # the buffered reader that read the head
    finally:
        response.close()


def exec_output(api: docker.APIClient, exec_id: str) -> bytes:
    """The exec's standard output, whole (its standard error left out)."""
    return b"".join(data for stream, data in exec_frames(api, exec_id) if stream == STDOUT)


def run_in(
    container: Container, command: Sequence[str], environment: Mapping[str, str] | None = None
) -> tuple[int, bytes]:
    """(exit code, standard output and error as they came) of ``command`` run in the
    container to its end: ``exec_run``'s answer, its output whole."""
    assert container.client is not None
    api = container.client.api
    made = api.exec_create(
        str(container.id), list(command), stdout=True, stderr=True,
        environment=dict(environment) if environment else None,
    )  # fmt: skip
    output = b"".join(data for _, data in exec_frames(api, made["Id"], patient=True))
    return exit_code(api, made["Id"]), output


def exit_code(api: docker.APIClient, exec_id: str, within: float = 5.0) -> int:
    """The ended exec's exit code. Its output ends as its process does; the engine may
    record the exit a moment later (-1 if it has not within ``within`` seconds)."""
    deadline = time.monotonic() + within
    while True:
        found = api.exec_inspect(exec_id)
        if found.get("ExitCode") is not None and not found.get("Running"):
            return int(found["ExitCode"])
        if time.monotonic() >= deadline:
            return -1
        time.sleep(0.02)
