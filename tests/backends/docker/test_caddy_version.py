"""The Caddy version a proxy image declares, read from its inspection (PURE)."""

from __future__ import annotations

from typing import Any

import pytest

from shipway.backends.docker import caddy_version


def attrs(env: list[str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"Config": {"Env": env, "Labels": labels}}


@pytest.mark.parametrize(
    ("inspection", "old"),
    [
        (attrs(["PATH=/usr/bin", "CADDY_VERSION=v2.6.2"]), "v2.6.2"),
        (attrs(["CADDY_VERSION=v2.7.6"]), "v2.7.6"),
        (attrs(["CADDY_VERSION=v2.8.0"]), None),
        (attrs(["CADDY_VERSION=v2.11.9"]), None),
        (attrs(["CADDY_VERSION=v3.0.0"]), None),
        # the official image's label, where the environment does not say it
        (attrs(labels={"org.opencontainers.image.title": "Caddy",
                       "org.opencontainers.image.version": "v2.6.4"}), "v2.6.4"),
        # another image's version label is not Caddy's
        (attrs(labels={"org.opencontainers.image.version": "v1.0"}), None),
        (attrs(), None),  # says nothing: taken as it is
        (attrs(["CADDY_VERSION=latest"]), None),  # not a version number
        ({}, None),
    ],
)  # fmt: skip
def test_too_old_reads_the_version_the_image_declares(
    inspection: dict[str, Any], old: str | None
) -> None:
    assert caddy_version.too_old(inspection) == old


def test_the_refusal_names_the_image_the_version_and_the_fix() -> None:
    said = caddy_version.refusal("example/proxy:1", "v2.6.2")
    assert "example/proxy:1 holds Caddy v2.6.2" in said
    assert "needs Caddy 2.8 or later" in said
    assert 'proxy_image = "caddy:2"' in said
