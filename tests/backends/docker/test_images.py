"""Old images do not pile up on the hosts: after a successful deploy, the app's images that
no release within ``history_limit`` needs are removed from every host of the slot (and
what was freed is said); the rollback target's image stays; another app's image is never
touched. ``destroy`` removes the slot's images but one another slot of the app still
runs. Images of the app's own repository, built here (distinct ids: one label apiece),
pushed to the test registry, and pulled by host B by digest."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

import docker
import docker.errors
import pytest

from shipway import api
from shipway.backends.imagebuild import INPUTS_LABEL
from shipway.engine import Rolled
from tests.backends.docker.conftest import SLOT, Deployment, Lines
from tests.testenv.docker import DockerHost


def build_push(d: Deployment, repository: str, tag: str, built: bool = False) -> None:
    """An image of its own id; ``built``: carrying shipway's build label, as one shipway
    built (``shipway build`` of a source never deployed)."""
    client = d.local(d.env.a)
    try:
        dockerfile = f"FROM {d.env.images.v1}\nLABEL org.example.test-image={repository}:{tag}\n"
        client.images.build(
            fileobj=io.BytesIO(dockerfile.encode()),
            tag=f"{repository}:{tag}",
            labels={INPUTS_LABEL: f"sha256:{tag}"} if built else None,
            rm=True,  # the SDK keeps each step's container otherwise: about 20 a run, for good
            forcerm=True,
        )
        for chunk in client.api.push(repository, tag=tag, stream=True, decode=True):
            assert "error" not in chunk, chunk
    finally:
        client.close()


def ids_of(d: Deployment, host: DockerHost, repository: str) -> set[str]:
    """Ids of the images of ``repository`` on ``host`` (by tag or by digest)."""
    client = d.local(host)
    try:
        return {
            str(i["Id"])
            for i in client.api.images()
            if any(
                r.startswith((f"{repository}:", f"{repository}@"))
                for r in (i.get("RepoTags") or []) + (i.get("RepoDigests") or [])
            )
        }
    finally:
        client.close()


def image_id(d: Deployment, ref: str) -> str:
    client = d.local(d.env.a)
    try:
        return str(client.images.get(ref).id)
    finally:
        client.close()


@pytest.fixture
def repos(deployment: Deployment) -> Iterator[tuple[str, str]]:
    d = deployment
    mine, other = f"{d.env.image_prefix}/{d.name}", f"{d.env.image_prefix}/{d.name}-other"
    for tag in ("v1", "v2", "v3"):
        build_push(d, mine, tag)
    build_push(d, other, "v1")
    yield mine, other
    for host in (d.env.a, d.env.b):
        client = d.local(host)
        try:
            for repository in (mine, other):
                for image_id_ in ids_of(d, host, repository):
                    with contextlib.suppress(docker.errors.APIError):
                        client.images.remove(image_id_, force=True)
        finally:
            client.close()


def test_a_deploy_prunes_what_no_rollback_needs_and_destroy_the_rest(
    deployment: Deployment, repos: tuple[str, str]
) -> None:
    d = deployment
    mine, other = repos
    env = d.env
    v1, v2, v3 = (image_id(d, f"{mine}:{t}") for t in ("v1", "v2", "v3"))
    theirs = image_id(d, f"{other}:v1")
    for tag in ("v1", "v2"):
        d.write(image=f"{mine}:{tag}", slot_extra="history_limit = 2")
        assert isinstance(d.deploy(), Rolled)
    assert {v1, v2} <= ids_of(d, env.b, mine)  # within the limit: nothing pruned
    # on host A: an image shipway built for the app but no release ran, and one of the
    # app's repository shipway did not build (tagged by hand): only the first is its own
    build_push(d, mine, "stale", built=True)
    build_push(d, mine, "by-hand")
    stale, by_hand = image_id(d, f"{mine}:stale"), image_id(d, f"{mine}:by-hand")
    lines = Lines()
    d.write(image=f"{mine}:v3", slot_extra="history_limit = 2")
    outcome = d.deploy(lines)
    assert isinstance(outcome, Rolled) and not outcome.warnings, outcome.warnings
    # r1 is past history_limit: its image goes from both hosts; r2's (the rollback
    # target) stays; another app's image, in use by nothing, is not touched
    for host in (env.a, env.b):
        assert v1 not in ids_of(d, host, mine), host.name
        assert {v2, v3} <= ids_of(d, host, mine), host.name
    assert theirs in ids_of(d, env.a, other)
    assert stale not in ids_of(d, env.a, mine) and by_hand in ids_of(d, env.a, mine)
    said = [line for line in lines.lines if "removed" in line and "history_limit (2)" in line]
    assert any(s.startswith("host docker-a: removed 2 images (up to") for s in said), said
    assert any(s.startswith(f"host {env.b.address}: removed 1 image (up to") for s in said), said
    # the rollback within the limit still finds its image where it was
    assert isinstance(api.rollback(d.app(), SLOT, reporter=Lines(), timeout=120), Rolled)

    # another slot of the app runs v3 on host A: destroy keeps that one there only
    other_slot = f"""
[slots.second]
backend = "docker"
hosts = ["{env.a.url}"]
proxy_image = "{env.images.proxy}"
proxy_port = {d.another_port()}
drain_timeout = "1s"
"""
    d.write(image=f"{mine}:v3", extra=other_slot, slot_extra="history_limit = 2")
    second = api.deploy(d.app(), "second", reporter=Lines(), timeout=120)
    assert isinstance(second, Rolled), second.line()
    lines = Lines()
    gone = api.destroy(d.app(), SLOT, confirm=SLOT, reporter=lines)
    assert ids_of(d, env.a, mine) == {v3, by_hand}  # the second slot's; one no slot ran
    assert ids_of(d, env.b, mine) == set()
    assert theirs in ids_of(d, env.a, other)
    assert any(item.kind == "image" for item in gone)
    assert any("no other slot uses" in line for line in lines.lines), lines.lines


def test_a_repository_another_app_uses_on_a_host_is_not_pruned_there(
    deployment: Deployment, repos: tuple[str, str]
) -> None:
    """A container shipway did not make runs one of the app's images on host A: the
    repository is shared there, so nothing of it is pruned on A; on B it is the app's."""
    d = deployment
    mine, _ = repos
    env = d.env
    v1 = image_id(d, f"{mine}:v1")
    client = d.local(env.a)
    try:
        client.containers.create(f"{mine}:v3", name=f"{d.name}-not-shipways", command=["true"])
        for tag in ("v1", "v2", "v3"):
            d.write(image=f"{mine}:{tag}", slot_extra="history_limit = 2")
            assert isinstance(d.deploy(), Rolled)
        assert v1 in ids_of(d, env.a, mine)
        assert v1 not in ids_of(d, env.b, mine)
    finally:
        with contextlib.suppress(docker.errors.APIError):
            client.containers.get(f"{d.name}-not-shipways").remove(force=True)
        client.close()
