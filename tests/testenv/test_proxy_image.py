"""The test proxy image: Caddy built from the Go module proxy at the version docker-testenv
names, tagged and labelled with it, with the weighted load balancing canaries will need
(Caddy 2.7+; Debian's 2.6.2, the image before, lacks it)."""

from __future__ import annotations

import docker

from tests.testenv.docker import DockerEnv

#: the Caddy version docker-testenv builds the test proxy from (its image's tag and label)
CADDY = "v2.11.9"


def _caddy_version(client: docker.DockerClient, image: str) -> str:
    out = client.containers.run(image, ["caddy", "version"], remove=True)
    return bytes(out).decode().strip()


def test_the_test_proxy_is_a_current_caddy_with_weighted_balancing(
    docker_env: DockerEnv,
) -> None:
    image = docker_env.images.proxy
    assert image.endswith(f":caddy-{CADDY}")
    client = docker_env.local_client(docker_env.a)
    try:
        client.images.pull(image)
        labels = client.images.get(image).labels
        assert labels.get("org.shipway.testenv.caddy") == CADDY
        assert _caddy_version(client, image).split()[0] == CADDY
        modules = client.containers.run(image, ["caddy", "list-modules"], remove=True)
        assert b"http.reverse_proxy.selection_policies.weighted_round_robin" in modules
    finally:
        client.close()
