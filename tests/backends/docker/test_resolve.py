"""Which image runs, and what kind it is: inspected on the hosts (B over SSH), by the
registry's digest; an image no host has is never silently taken for a dockerfile image."""

from __future__ import annotations

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
    assert resolved.meta == ImageMeta("herokuish", "/app")


def test_an_image_no_host_has_needs_records_or_a_declared_type(deployment: Deployment) -> None:
    env = deployment.env
    missing = f"{env.image_prefix}/never-pushed:v9"
    deployment.write(hosts=[env.a], image=missing)
    with pytest.raises(ImageMetadataMissing, match="cannot tell what kind of image"):
        api.plan(deployment.app(), SLOT)
    text = deployment.spec_file.read_text().replace(
        f'image = "{missing}"', f'image = "{missing}"\nimage_type = "pack"'
    )
    deployment.spec_file.write_text(text)
    plan = api.plan(deployment.app(), SLOT)
    assert plan.release is not None and plan.release.image_meta == ImageMeta("pack")
