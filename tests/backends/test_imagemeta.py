"""Image classification and start commands, on the test images' real inspect data
(``images/*.json``: the Docker Engine's image inspect of the images ``docker-testenv``
builds, kept as files so these tests need no engine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shipway.backends.imagemeta import (
    StartCommand,
    classify,
    cnb_process_types,
    repo_digest,
    repository_of,
    start_command,
)
from shipway.release.model import ImageMeta

IMAGES = Path(__file__).parent / "images"


def inspect(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((IMAGES / f"{name}.json").read_text())
    return data


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("dockerfile-web-v1", ImageMeta("dockerfile", "/app", 8080)),
        ("herokuish-v1", ImageMeta("herokuish", "/app", 5000)),
        ("pack-cnb-v1", ImageMeta("pack", "/workspace", 8080)),
    ],
)
def test_classify_real_images(name: str, expected: ImageMeta) -> None:
    assert classify(inspect(name)) == expected


def test_the_fixtures_agree_with_what_the_test_environment_built_them_as() -> None:
    for path in IMAGES.glob("*.json"):
        attrs = json.loads(path.read_text())
        kind = attrs["Config"]["Labels"]["org.shipway.testenv.kind"]
        assert classify(attrs).source_type == kind, path.name


def test_herokuish_needs_the_herokuish_user_not_just_a_start_script() -> None:
    attrs = inspect("herokuish-v1")
    attrs["Config"]["Env"] = [e for e in attrs["Config"]["Env"] if not e.startswith("USER=")]
    assert classify(attrs).source_type == "dockerfile"


def test_any_buildpacks_label_makes_a_pack_image() -> None:
    attrs = inspect("dockerfile-web-v1")
    attrs["Config"]["Labels"] = {"io.buildpacks.lifecycle.metadata": "{}"}
    assert classify(attrs) == ImageMeta("pack", "/workspace", 8080)


def test_the_exposed_port_is_the_lowest_tcp_one_and_none_without_expose() -> None:
    attrs = inspect("dockerfile-web-v1")
    attrs["Config"]["ExposedPorts"] = {"9000/udp": {}, "8000/tcp": {}, "8443/tcp": {}}
    assert classify(attrs).exposed_port == 8000
    del attrs["Config"]["ExposedPorts"]
    assert classify(attrs).exposed_port is None


def test_an_image_without_workdir_or_config_is_a_dockerfile_image_without_working_dir() -> None:
    assert classify({"Config": {"WorkingDir": ""}}) == ImageMeta("dockerfile", None)
    assert classify({}) == ImageMeta("dockerfile", None)


def test_cnb_process_types_from_build_metadata() -> None:
    assert cnb_process_types(inspect("pack-cnb-v1")) == ("web", "worker")
    assert cnb_process_types(inspect("dockerfile-web-v1")) == ()


@pytest.mark.parametrize(
    ("meta", "process", "command", "expected"),
    [
        (ImageMeta("herokuish", "/app"), "web", None, StartCommand(("/start",), ("web",))),
        (
            ImageMeta("herokuish", "/app"),
            "worker",
            ("rake", "jobs:work"),
            StartCommand(("/exec",), ("rake", "jobs:work")),
        ),
        (ImageMeta("pack", "/workspace"), "web", None, StartCommand(("/cnb/process/web",), ())),
        (
            ImageMeta("pack", "/workspace"),
            "web",
            ("bin/serve", "-p", "1"),
            StartCommand(("/cnb/lifecycle/launcher",), ("bin/serve", "-p", "1")),
        ),
        (ImageMeta("dockerfile", "/app"), "web", ("serve",), StartCommand(None, ("serve",))),
        (ImageMeta("dockerfile", "/app"), "web", None, StartCommand(None, None)),
        (None, "web", None, StartCommand(None, None)),
    ],
)
def test_start_command_by_image_type(
    meta: ImageMeta | None,
    process: str,
    command: tuple[str, ...] | None,
    expected: StartCommand,
) -> None:
    assert start_command(meta, process, command) == expected


def test_repo_digest_matches_the_repository_not_the_tag() -> None:
    attrs = inspect("dockerfile-web-v1")
    (entry,) = attrs["RepoDigests"]
    repo, digest = entry.split("@")
    assert repo_digest(attrs, f"{repo}:v1") == digest
    assert repo_digest(attrs, f"{repo}:other-tag") == digest
    assert repo_digest(attrs, f"{repo}@{digest}") == digest
    assert repo_digest(attrs, "elsewhere/web:v1") is None
    assert repo_digest({"RepoDigests": []}, f"{repo}:v1") is None


@pytest.mark.parametrize(
    ("ref", "repo"),
    [
        ("10.231.0.1:15000/shipway-test/web:v1", "10.231.0.1:15000/shipway-test/web"),
        ("10.231.0.1:15000/shipway-test/web", "10.231.0.1:15000/shipway-test/web"),
        ("app@sha256:abc", "app"),
        ("caddy:2", "caddy"),
    ],
)
def test_repository_of(ref: str, repo: str) -> None:
    assert repository_of(ref) == repo
