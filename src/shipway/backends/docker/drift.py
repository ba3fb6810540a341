"""Does what runs on a host still match what shipway made? PURE.

A container shipway made carries its unit's body in a label; these functions compare that
body with the container's actual configuration (Docker's inspect) and the actual content
of a files volume with the hashes recorded when it was written. Each difference is a
reason, in words, that never include a value (environment values may be secrets).

Drift of the container's own configuration (image, command, environment, labels), of its
host configuration (mounts, network, restart policy, resources, published ports) or of the
files it mounts all lead to the same repair: the unit is re-applied (``update``), which
replaces the container.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from shipway.backends.docker import labels
from shipway.release.artifact import digest_of

#: the key prefix of a container labelled as the slot's but carrying no unit key:
#: ``unknown/<container name>@<host>`` (nothing declares it, so a repair removes it)
UNKNOWN = "unknown/"


def unknown_key(name: str, host: str) -> str:
    return f"{UNKNOWN}{name}@{host}"


def drifted(digest: str, reasons: Iterable[str]) -> str:
    """The observed digest of a unit that differs from its body: never equal to any
    desired digest, and stable for the same reasons (so a saved plan stays comparable)."""
    why = hashlib.sha256("\n".join(sorted(reasons)).encode()).hexdigest()[:8]
    return f"{digest}~drift-{why}"


def body_of(tags: Mapping[str, str]) -> tuple[dict[str, Any] | None, list[str]]:
    """The unit body a Docker object carries, and reasons when its labels were changed."""
    raw = tags.get(labels.UNIT)
    if raw is None:
        return None, ["it carries no unit body label"]
    try:
        body = json.loads(raw)
    except ValueError:
        return None, ["its unit body label is not JSON"]
    if not isinstance(body, dict):
        return None, ["its unit body label is not an object"]
    if digest_of(body) != tags.get(labels.DIGEST):
        return body, ["its labels were changed (the body no longer matches its digest)"]
    return body, []


def env_hash(name: str, env: Mapping[str, str]) -> str:
    return labels.salted(name, json.dumps(dict(sorted(env.items())), separators=(",", ":")))


def env_of(attrs: Mapping[str, Any]) -> dict[str, str]:
    """The environment a container runs with (revealed secrets included: never shown)."""
    out: dict[str, str] = {}
    for entry in (attrs.get("Config") or {}).get("Env") or []:
        key, _, value = str(entry).partition("=")
        out[key] = value
    return out


def _norm(value: Any) -> Any:
    return value or None


def container(attrs: Mapping[str, Any], body: Mapping[str, Any]) -> list[str]:
    """How an app (or proxy) container differs from its unit body."""
    config = attrs.get("Config") or {}
    host = attrs.get("HostConfig") or {}
    tags = config.get("Labels") or {}
    reasons: list[str] = []
    if config.get("Image") != body.get("image"):
        reasons.append(f"image is {config.get('Image')!r}, want {body.get('image')!r}")
    if body.get("entrypoint") is not None and _norm(config.get("Entrypoint")) != _norm(
        body["entrypoint"]
    ):
        reasons.append("entrypoint differs")
    if body.get("args") is not None and _norm(config.get("Cmd")) != _norm(body["args"]):
        reasons.append("command differs")
    actual_env = env_of(attrs)
    wanted = body.get("env") or {}
    for key in sorted(wanted):
        if key not in actual_env:
            reasons.append(f"environment variable {key} is missing")
        elif "${secrets." not in str(wanted[key]) and actual_env[key] != wanted[key]:
            reasons.append(f"environment variable {key} differs")
    recreated = wanted and tags.get(labels.ENV_HASH) != env_hash(
        str(body.get("name")), {k: actual_env.get(k, "") for k in wanted}
    )
    if recreated and not any(r.startswith("environment") for r in reasons):
        reasons.append("environment differs from what shipway set (a secret value?)")
    for key, value in (body.get("labels") or {}).items():
        if tags.get(key) != value:
            reasons.append(f"label {key} differs")
    if config.get("StopTimeout") not in (None, body.get("stop_timeout")):
        reasons.append("stop timeout differs")
    reasons += [f"host config: {r}" for r in _host_config(attrs, host, body)]
    return reasons


def _host_config(
    attrs: Mapping[str, Any], host: Mapping[str, Any], body: Mapping[str, Any]
) -> list[str]:
    reasons: list[str] = []
    restart = (host.get("RestartPolicy") or {}).get("Name") or "no"
    if restart != body.get("restart", "no"):
        reasons.append(f"restart policy is {restart!r}, want {body.get('restart')!r}")
    resources = body.get("resources") or {}
    for field, key in (
        ("memory", "Memory"),
        ("memory_reservation", "MemoryReservation"),
        ("nano_cpus", "NanoCpus"),
        ("cpu_shares", "CpuShares"),
    ):
        if (host.get(key) or 0) != (resources.get(field) or 0):
            reasons.append(f"{key} is {host.get(key) or 0}, want {resources.get(field) or 0}")
    networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
    network = body.get("network")
    if network and network not in networks:
        reasons.append(f"not connected to network {network}")
    elif network:
        aliases = networks[network].get("Aliases") or []
        missing = [a for a in body.get("aliases") or [] if a not in aliases]
        if missing:
            reasons.append(f"network aliases {missing} missing")
    mounts = {m.get("Destination"): m for m in attrs.get("Mounts") or []}
    volume = body.get("volume")
    if body.get("kind") == "proxy" and volume:
        m = mounts.get(body.get("config_dir", "/etc/shipway"))
        if m is None or m.get("Name") != volume:
            reasons.append(f"the proxy's config volume {volume} is not mounted")
    for item in body.get("mounts") or []:
        m = mounts.get(item["target"])
        source = str(m.get("Source", "")) if m else ""
        if (
            m is None
            or f"/{volume}/" not in source
            or not source.endswith("/" + item["file"])
            or m.get("RW")
        ):
            reasons.append(f"file {item['target']} is not mounted read-only from {volume}")
    for item in body.get("data") or []:
        m = mounts.get(item["target"])
        if m is None or m.get("Name") != item["volume"] or not m.get("RW"):
            reasons.append(f"volume {item['volume']} is not mounted at {item['target']}")
    if body.get("kind") == "proxy":
        bindings = (host.get("PortBindings") or {}).get(f"{body.get('listen', 80)}/tcp") or []
        ports = {str(b.get("HostPort")) for b in bindings}
        if str(body.get("port")) not in ports:
            reasons.append(f"port {body.get('port')} is not published")
    return reasons


def files(
    actual: Mapping[str, tuple[bytes, int]],
    body: Mapping[str, Any],
    recorded: Mapping[str, str],
    salt: str,
) -> list[str]:
    """How a files volume's content differs from what was written (``recorded``: per-file
    salted hashes of the revealed content, kept in a label when it was written)."""
    reasons: list[str] = []
    for item in body.get("files") or []:
        path = item["path"]
        if path not in actual:
            reasons.append(f"file {path} is missing")
            continue
        data, mode = actual[path]
        if labels.salted(salt, data.decode(errors="surrogateescape")) != recorded.get(path):
            reasons.append(f"file {path}: content differs from what was written")
        if mode != int(item["mode"], 8):
            reasons.append(f"file {path}: mode {mode:04o}, want {item['mode']}")
    return reasons
