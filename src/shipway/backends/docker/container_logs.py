"""What a container printed, masked with the secret values that container actually got.

A container's environment holds revealed secrets; its unit body (a label) holds only their
placeholders. The masker is built from the values of exactly the variables whose body
value names a secret, so no log line, failure detail or release-command output shows one.
"""

from __future__ import annotations

import docker.errors
from docker.models.containers import Container

from shipway.backends.docker import drift
from shipway.spec.secrets import Masker

#: how many lines of a container's log a failure shows
LOG_TAIL = 20


def masker(c: Container) -> Masker:
    """Masks the secret values this container actually got (found through the
    placeholders in its unit body)."""
    body, _ = drift.body_of(c.labels)
    env = drift.env_of(c.attrs)
    return Masker(
        env[k]
        for k, v in ((body or {}).get("env") or {}).items()
        if "${secrets." in str(v) and k in env
    )


def text(c: Container, tail: int) -> str:
    """The last ``tail`` lines of its log, unmasked (the caller masks)."""
    data = c.logs(tail=tail)
    return data.decode(errors="replace") if isinstance(data, bytes) else ""


def failure_tail(c: Container) -> list[str]:
    """Its last lines, masked, as a failure's details (``log: …``)."""
    mask = masker(c)
    try:
        lines = text(c, LOG_TAIL)
    except docker.errors.DockerException:
        return ["(no logs)"]
    return [f"log: {mask(line)}" for line in lines.splitlines()[-LOG_TAIL:]]
