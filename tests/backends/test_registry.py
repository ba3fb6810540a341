"""Image metadata read from the registry a reference names, without pulling: against the
test environment's real registry (Debian's docker-registry), with the images
``docker-testenv`` pushed there."""

from __future__ import annotations

import socket
import time
import uuid

import pytest

from shipway.backends.imagemeta import ImageRef, classify, same_repository
from shipway.backends.registry import insecure_registries, lookup
from shipway.errors import RegistryLookupFailed
from shipway.release.model import ImageMeta
from tests.testenv.docker import DockerEnv


@pytest.mark.parametrize(
    ("ref", "registry", "repository", "reference"),
    [
        ("nginx", "docker.io", "library/nginx", "latest"),
        ("nginx:1.27", "docker.io", "library/nginx", "1.27"),
        ("docker.io/nginx", "docker.io", "library/nginx", "latest"),
        ("index.docker.io/library/nginx:1", "docker.io", "library/nginx", "1"),
        ("team/app:2", "docker.io", "team/app", "2"),
        ("reg.example:5000/team/app:3", "reg.example:5000", "team/app", "3"),
        ("localhost/app", "localhost", "app", "latest"),
        ("reg.example/a/b/c@sha256:" + "0" * 64, "reg.example", "a/b/c", "sha256:" + "0" * 64),
    ],
)
def test_references_are_normalised_as_docker_does(
    ref: str, registry: str, repository: str, reference: str
) -> None:
    parsed = ImageRef.parse(ref)
    assert (parsed.registry, parsed.repository, parsed.reference) == (
        registry,
        repository,
        reference,
    )


def test_docker_hub_implicit_library_names_one_repository() -> None:
    assert same_repository("nginx", "docker.io/library/nginx")
    assert same_repository("nginx:1", "index.docker.io/library/nginx")
    assert not same_repository("nginx", "team/nginx")
    with pytest.raises(ValueError):
        ImageRef.parse("Not/Valid")


def test_insecure_registries_come_from_the_engines_info() -> None:
    info = {
        "RegistryConfig": {
            "IndexConfigs": {
                "docker.io": {"Secure": True},
                "10.231.0.1:15000": {"Secure": False},
            },
            "InsecureRegistryCIDRs": ["127.0.0.0/8"],
        }
    }
    assert insecure_registries(info) == ("10.231.0.1:15000", "cidr:127.0.0.0/8")


@pytest.mark.docker
def test_the_registry_tells_digest_and_kind_of_images_no_engine_pulled(
    docker_env: DockerEnv,
) -> None:
    a = docker_env.local_client(docker_env.a)
    try:
        for ref, kind in (
            (docker_env.images.v1, ImageMeta("dockerfile", "/app", 8080)),
            (docker_env.images.herokuish, ImageMeta("herokuish", "/app", 5000)),
            (docker_env.images.cnb, ImageMeta("pack", "/workspace", 8080)),
        ):
            found = lookup(ref, insecure=[docker_env.registry])
            pushed = [d.split("@", 1)[1] for d in a.images.get(ref).attrs["RepoDigests"]]
            assert found.digest in pushed, (ref, found.digest, pushed)
            assert classify(found.attrs) == kind
            # pinned by digest, the same config
            pinned = f"{ref.rsplit(':', 1)[0]}@{found.digest}"
            again = lookup(pinned, insecure=[docker_env.registry])
            assert again.digest == found.digest and classify(again.attrs) == kind
    finally:
        a.close()


@pytest.mark.docker
def test_a_missing_tag_is_a_clear_failure(docker_env: DockerEnv) -> None:
    ref = f"{docker_env.image_prefix}/web:never-pushed-{uuid.uuid4().hex[:8]}"
    with pytest.raises(RegistryLookupFailed, match=r"HTTP 404.*MANIFEST_UNKNOWN"):
        lookup(ref, insecure=[docker_env.registry])


@pytest.mark.docker
def test_a_plain_http_registry_is_read_only_when_the_engine_calls_it_insecure(
    docker_env: DockerEnv,
) -> None:
    a = docker_env.local_client(docker_env.a)
    try:
        insecure = insecure_registries(a.info())
    finally:
        a.close()
    assert docker_env.registry in insecure  # the test engines list it
    with pytest.raises(RegistryLookupFailed, match="did not answer"):
        lookup(docker_env.images.v1, insecure=[])  # HTTPS only: the plain registry fails


def test_an_unreachable_registry_fails_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    started = time.monotonic()
    with pytest.raises(RegistryLookupFailed, match="did not answer"):
        lookup(f"127.0.0.1:{port}/team/app:1", timeout=2)
    assert time.monotonic() - started < 10  # no retry loop with sleeps


def test_docker_hub_references_compare_by_their_normalised_repository() -> None:
    from shipway.backends.imagemeta import repo_digest

    attrs = {"RepoDigests": ["nginx@sha256:" + "a" * 64]}
    assert repo_digest(attrs, "docker.io/library/nginx:1.27") == "sha256:" + "a" * 64
    assert repo_digest(attrs, "nginx") == "sha256:" + "a" * 64
    assert repo_digest(attrs, "team/nginx") is None

