"""A shared proxy's files read from its volume on this machine (the test hosts' engines keep
their volumes here): the same files as the Engine API's archive gives, and only while the
volume's config names that very proxy — else (another machine's volume, another proxy's
files at that path) read through the Engine API."""

from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import Any

import pytest

from shipway.backends.docker import admin, caddy, proxy_files
from shipway.backends.docker.records import archive_tree, put_tree, read_tree_of
from shipway.engine import Rolled
from tests.backends.docker.conftest import Deployment
from tests.backends.docker.test_shared_proxy import get

ROUTE = '[[routes]]\nhost = "{host}"\nprocess = "web"\n'


def _proxy(deployment: Deployment) -> Any:
    env = deployment.env
    deployment.write(hosts=[env.a], extra=ROUTE.format(host=f"files-{deployment.name}.test"))
    assert isinstance(deployment.deploy(), Rolled)
    (proxy,) = deployment.containers(env.a, kind="proxy")
    return proxy


def _impostor(proxy: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory here taken for the proxy's config volume, whose config names another
    proxy."""
    impostor = tmp_path / "_data"
    impostor.mkdir()
    config = {"apps": {"http": {"servers": {"shipway": {"@id": admin.identity("0" * 64)}}}}}
    (impostor / caddy.CONFIG_FILE).write_bytes(caddy.dumps(config))
    monkeypatch.setitem(proxy_files._MOUNTS, str(proxy.id), (caddy.CONFIG_DIR, str(impostor)))
    return impostor


def test_the_files_read_here_are_the_archives_files(deployment: Deployment) -> None:
    proxy = _proxy(deployment)
    client = deployment.local(deployment.env.a)
    try:
        whole = proxy_files.local_tree(client, str(proxy.id), caddy.CONFIG_DIR)
        assert whole is not None  # the test host's engine keeps its volumes on this machine
        assert whole == archive_tree(client, str(proxy.id), caddy.CONFIG_DIR)
        assert caddy.PARTS_FILE in whole and "pool-0.host" in whole
        path = f"{caddy.CONFIG_DIR}/{caddy.PARTS_FILE}"
        # by name too, one file, and a file that is not there
        one = proxy_files.local_tree(client, str(proxy.name), path)
        assert one == archive_tree(client, str(proxy.id), path) == {
            caddy.PARTS_FILE: whole[caddy.PARTS_FILE]
        }
        assert proxy_files.local_tree(client, str(proxy.id), f"{caddy.CONFIG_DIR}/nope") == {}
        # a path outside the config volume is not read here
        assert proxy_files.local_tree(client, str(proxy.id), "/etc") is None
    finally:
        client.close()


def test_a_volume_here_whose_config_names_another_proxy_is_not_read(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As when the engine is another machine's and this one has a proxy whose volume has the
    same path: its files are another proxy's, and the archive is read instead."""
    proxy = _proxy(deployment)
    impostor = _impostor(proxy, tmp_path, monkeypatch)
    (impostor / caddy.PARTS_FILE).write_text(json.dumps({"someone/else": {}}))
    full = str(proxy.id)
    client = deployment.local(deployment.env.a)
    try:
        path = f"{caddy.CONFIG_DIR}/{caddy.PARTS_FILE}"
        assert proxy_files.local_tree(client, full, path) is None
        read = read_tree_of(client, full, path)
        assert read == archive_tree(client, full, path)
        assert f"{deployment.name}/" in read[caddy.PARTS_FILE][0].decode()
    finally:
        client.close()


def test_a_volume_that_is_not_on_this_machine_is_read_through_the_engine(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = _proxy(deployment)
    client = deployment.local(deployment.env.a)
    inspect = client.api.inspect_container
    inspected: list[str] = []

    def elsewhere(container: str) -> dict[str, Any]:
        inspected.append(container)
        attrs: dict[str, Any] = inspect(container)
        for mount in attrs["Mounts"]:
            mount["Source"] = "/nowhere/on/this/machine/_data"
        return attrs

    monkeypatch.setattr(client.api, "inspect_container", elsewhere)
    monkeypatch.setattr(proxy_files, "_MOUNTS", {})
    monkeypatch.setattr(proxy_files, "_ELSEWHERE", weakref.WeakSet())
    try:
        path = f"{caddy.CONFIG_DIR}/{caddy.PARTS_FILE}"
        assert proxy_files.local_tree(client, str(proxy.id), path) is None
        # that engine's volumes are not looked for here again, by id or by name
        assert proxy_files.local_tree(client, str(proxy.name), path) is None
        assert inspected == [str(proxy.id)]
        assert read_tree_of(client, str(proxy.id), path) == archive_tree(
            client, str(proxy.id), path
        )
    finally:
        client.close()


def test_files_written_here_are_what_the_engine_then_reads(deployment: Deployment) -> None:
    """Written into the volume here (no archive through the Engine API), replaced whole,
    with their modes, and read back through the engine the same; the proxy keeps serving."""
    proxy = _proxy(deployment)
    env = deployment.env
    client = deployment.local(env.a)
    try:
        put: list[str] = []
        proxy.put_archive = lambda path, data: put.append(path)  # type: ignore[method-assign]
        files = {"written.txt": (b"one\n", 0o644), "secret.key": (b"two\n", 0o600)}
        put_tree(proxy, caddy.CONFIG_DIR, files)
        put_tree(proxy, caddy.CONFIG_DIR, {"written.txt": (b"three\n", 0o640)})
        assert put == []  # nothing went through the engine
        read = archive_tree(client, str(proxy.id), caddy.CONFIG_DIR)
        assert read["written.txt"] == (b"three\n", 0o640)
        assert read["secret.key"] == (b"two\n", 0o600)
        assert not [name for name in read if name.startswith(".")]  # nothing left beside
        # the route still answers: the config and its files are what they were
        assert get(deployment, env.a, f"files-{deployment.name}.test")[0] == 200
    finally:
        client.close()


def test_a_volume_whose_config_names_another_proxy_is_written_through_the_engine(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = _proxy(deployment)
    impostor = _impostor(proxy, tmp_path, monkeypatch)
    client = deployment.local(deployment.env.a)
    try:
        put_tree(proxy, caddy.CONFIG_DIR, {"written.txt": (b"through the engine\n", 0o644)})
        assert not (impostor / "written.txt").exists()
        read = archive_tree(client, str(proxy.id), f"{caddy.CONFIG_DIR}/written.txt")
        assert read == {"written.txt": (b"through the engine\n", 0o644)}
    finally:
        client.close()


def test_a_write_that_fails_here_leaves_nothing_beside_and_goes_through_the_engine(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = _proxy(deployment)
    client = deployment.local(deployment.env.a)

    def full_disk(source: object, target: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(proxy_files.os, "replace", full_disk)
    try:
        put_tree(proxy, caddy.CONFIG_DIR, {"written.txt": (b"through the engine\n", 0o644)})
        monkeypatch.undo()
        read = archive_tree(client, str(proxy.id), caddy.CONFIG_DIR)
        assert read["written.txt"] == (b"through the engine\n", 0o644)
        assert not [name for name in read if name.startswith(".")], sorted(read)
    finally:
        client.close()
