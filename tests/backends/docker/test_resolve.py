"""Which image runs, and what kind it is: inspected on the hosts (B over SSH), by the
registry's digest; an image no host has is never silently taken for a dockerfile image."""

from __future__ import annotations

import uuid

import docker.errors
import pytest

from shipway import api
from shipway.errors import ImageMetadataMissing
from shipway.release.model import ImageMeta
from tests.backends.docker.conftest import SLOT, Deployment


def test_resolve_inspects_the_image_on_a_host_by_its_registry_digest(
    deployment: Deployment,
) -> None:
    env = deployment.env
    app = deployment.write(hosts=[env.b], image=env.images.herokuish)
    client = deployment.local(env.b)
    try:
        pulled = client.images.pull(env.images.herokuish)
        digest = pulled.attrs["RepoDigests"][0].split("@")[1]
    finally:
        client.close()
    resolved = deployment.backend().resolve_image(app.slots.target(SLOT), app, None)
    assert resolved.ref == env.images.herokuish
    assert resolved.digest == digest
    assert resolved.meta == ImageMeta("herokuish", "/app", 5000)


def test_an_image_no_host_has_needs_records_or_a_declared_type(deployment: Deployment) -> None:
    env = deployment.env
    missing = f"{env.image_prefix}/never-pushed:v9"
    deployment.write(hosts=[env.a], image=missing)
    with pytest.raises(ImageMetadataMissing, match="cannot tell what kind of image") as refused:
        api.plan(deployment.app(), SLOT)
    assert "MANIFEST_UNKNOWN" in str(refused.value)  # the registry's own answer
    text = deployment.spec_file.read_text().replace(
        f'image = "{missing}"', f'image = "{missing}"\nimage_type = "pack"'
    )
    deployment.spec_file.write_text(text)
    plan = api.plan(deployment.app(), SLOT)
    assert plan.release is not None and plan.release.image_meta == ImageMeta("pack")


def test_an_image_no_host_ever_pulled_is_read_from_its_registry(deployment: Deployment) -> None:
    """A new host's first deploy: the image is only in the registry. Its kind and digest
    come from the registry's manifest and config, and nothing is pulled to learn them."""
    env = deployment.env
    fresh = f"{env.image_prefix}/herokuish:fresh-{uuid.uuid4().hex[:8]}"
    a = deployment.local(env.a)
    try:
        a.images.get(env.images.herokuish).tag(fresh)
        pushed = a.images.push(fresh)
        assert "error" not in pushed.lower(), pushed
        digest = a.images.get_registry_data(fresh).id
        a.images.remove(fresh)  # no engine has it under this name now
    finally:
        a.close()
    app = deployment.write(hosts=[env.b], image=fresh)
    plan = api.plan(app, SLOT)
    assert plan.release is not None
    assert plan.release.image_meta == ImageMeta("herokuish", "/app", 5000)
    assert plan.release.digest == digest
    b = deployment.local(env.b)
    try:
        with pytest.raises(docker.errors.ImageNotFound):
            b.images.get(fresh)  # learning its kind pulled nothing
    finally:
        b.close()
