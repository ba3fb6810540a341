"""The labels shipway puts on Docker objects, and the names it gives them. PURE.

Labels are how the backend finds its own objects again on a host and tells them apart:
every container, volume and network it makes carries ``org.shipway.app`` and
``org.shipway.slot``; ``org.shipway.kind`` says what it is. A unit's container or volume also
carries the unit's key, digest and body (``org.shipway.unit``: JSON with secret
*placeholders*, never values), so observing a host needs nothing but the host itself.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from shipway.release.artifact import Unit

PREFIX = "org.shipway."
APP = PREFIX + "app"
SLOT = PREFIX + "slot"
KIND = PREFIX + "kind"
KEY = PREFIX + "key"
DIGEST = PREFIX + "digest"
UNIT = PREFIX + "unit"
PROCESS = PREFIX + "process"
RELEASE = PREFIX + "release"
DEPLOYMENT = PREFIX + "deployment"
REPLICA = PREFIX + "replica"
#: the release alias an app container was given at create (:func:`release_alias`)
ALIAS = PREFIX + "alias"
#: salted hash of the environment a container was created with (secret values included
#: only through the hash), to tell a container recreated by hand from the one shipway made
ENV_HASH = PREFIX + "env-hash"
#: per-file salted hashes of what was written into a files volume
CONTENT = PREFIX + "content"
REVISION = PREFIX + "revision"
SEQUENCE = PREFIX + "seq"
RECORD = PREFIX + "record"
LOCK_HOLDER = PREFIX + "lock.holder"
LOCK_HOST = PREFIX + "lock.host"
LOCK_PID = PREFIX + "lock.pid"
LOCK_SINCE = PREFIX + "lock.since"
LOCK_TTL = PREFIX + "lock.ttl"
#: what marks the holder's process beyond host and pid (see backends/liveness.py)
LOCK_BOOT = PREFIX + "lock.boot-id"
LOCK_PIDNS = PREFIX + "lock.pid-ns"
LOCK_START = PREFIX + "lock.start"
#: on a host's shared proxy (and its lock): the port it serves
SHARED_PORT = PREFIX + "proxy.port"
#: on a shared proxy's lock: who holds it (a token of one change)
PROXY_HOLDER = PREFIX + "proxy.holder"

# kinds
APP_CONTAINER = "app"
PROXY = "proxy"
FILES = "files"
RECORD_KIND = "record"
LOCK = "lock"
RELEASE_COMMAND = "release-command"
VOLUME = "volume"  #: a volume of the app's data (never removed but by destroy --volumes)
VOLUME_NAME = PREFIX + "volume"
ONE_OFF = "one-off"
PROXY_LOCK = "proxy-lock"
ACCESSORY = "accessory"  #: an accessory's container (the slot's: no app operation touches it)
ACCESSORY_DATA = "accessory-data"  #: its data volume, holding its credentials as labels
#: the volume kinds that are data: deleted by ``destroy --volumes`` only
DATA_KINDS = (VOLUME, ACCESSORY_DATA)
#: on an accessory's container and volume: its name in the spec
ACCESSORY_NAME = PREFIX + "accessory"
#: on an accessory's data volume: its credentials, made once with it (a volume's labels
#: never change, and of two creators of one volume the first one's are kept)
ACCESSORY_PASSWORD = PREFIX + "accessory.password"
ACCESSORY_PORT = PREFIX + "accessory.port"
ACCESSORY_DATABASE = PREFIX + "accessory.database"

HOLDER_IMAGE = "shipway-holder:1"
HOLDER_LABEL = PREFIX + "holder"


def slot_filter(app: str, slot: str, kind: str | None = None) -> dict[str, Any]:
    """A Docker API ``filters`` value selecting one slot's objects (of one kind)."""
    labels = [f"{APP}={app}", f"{SLOT}={slot}"]
    if kind is not None:
        labels.append(f"{KIND}={kind}")
    return {"label": labels}


def base(app: str, slot: str, kind: str) -> dict[str, str]:
    return {APP: app, SLOT: slot, KIND: kind}


def of_unit(app: str, slot: str, kind: str, unit: Unit) -> dict[str, str]:
    """What a unit's container or volume carries: the slot's labels, and the unit's key,
    digest and body (placeholders only), so observing finds the unit again."""
    return {
        **base(app, slot, kind),
        KEY: unit.key,
        DIGEST: unit.digest,
        UNIT: json.dumps(unit.body, sort_keys=True, separators=(",", ":")),
    }


_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")


def _safe(text: str) -> str:
    return _UNSAFE.sub("-", text)


def prefix(app: str, slot: str) -> str:
    return f"shipway-{app}-{slot}"


def network(app: str, slot: str) -> str:
    return prefix(app, slot)


def container(app: str, slot: str, process: str, replica: int, deployment_id: str) -> str:
    """An app container: unique per process, replica and deployment id, so a new release's
    containers start beside the old ones and the proxy can name exactly which to use."""
    return _safe(f"{app}-{slot}-{process}-{replica}-{deployment_id}")


def release_alias(app: str, slot: str, process: str, deployment_id: str) -> str:
    """The network alias every container of one process and deployment id has on its slot's
    network (given at create): the one DNS name the shared proxy resolves to all of that
    release's replicas of the process, which a switch names in the route's upstream file
    (:mod:`.caddy`). Hashed: short (a DNS label), and unique across the slots' networks a
    shared proxy joins."""
    digest = hashlib.sha256(f"{app}/{slot}/{process}/{deployment_id}".encode()).hexdigest()
    return f"shipway-up-{digest[:20]}"


def proxy(app: str, slot: str) -> str:
    return prefix(app, slot) + "-proxy"


def proxy_volume(app: str, slot: str) -> str:
    return prefix(app, slot) + "-proxy"


def shared_proxy(port: int) -> str:
    """A host's shared proxy on ``port`` (its container and its config volume): one per
    host and port, used by every app and slot that serves there; it belongs to none."""
    return f"shipway-proxy-{port}"


def shared_proxy_lock(port: int) -> str:
    """The container whose existence is the lock on a shared proxy's routes."""
    return f"shipway-proxy-{port}-lock"


#: the network the shared proxies sit on (each also joins the network of every slot it
#: routes to); it belongs to no app
PROXY_NETWORK = "shipway-proxy"
#: the network whose name sorts before every other a shared proxy is on (``shipway``, before
#: ``shipway-proxy`` and every slot's ``shipway-<app>-<slot>``). The engine publishes a
#: container's ports through its *gateway* network, the one whose name sorts first among
#: those of equal priority: a proxy on this network keeps it as its gateway whatever slot
#: network it joins or leaves. Else a slot network sorting before ``shipway-proxy`` (app
#: ``blog``) became the gateway when the proxy joined it, and the engine moved the published
#: ports over: for tens of milliseconds every app's connections to the port were reset or
#: refused.
GATEWAY_NETWORK = "shipway"


def owner(app: str, slot: str) -> str:
    """Whose routes they are, in a shared proxy's files."""
    return f"{app}/{slot}"


def files_volume(app: str, slot: str, content_digest: str) -> str:
    """Content-addressed: a new set of files is a new volume, so old containers keep
    theirs until they are removed."""
    return f"{prefix(app, slot)}-files-{content_digest[:12]}"


def data_volume(app: str, slot: str, name: str) -> str:
    """A volume of the app's data: one per app, slot and volume on each host that runs a
    process mounting it, the same name on every host and in every release."""
    return f"{prefix(app, slot)}-data-{name}"


def accessory(app: str, slot: str, name: str) -> str:
    """An accessory's container: one per app, slot and accessory."""
    return f"{prefix(app, slot)}-acc-{name}"


def accessory_volume(app: str, slot: str, name: str) -> str:
    """An accessory's data: kept across every release and every container of it."""
    return f"{prefix(app, slot)}-acc-{name}-data"


def record(app: str, slot: str, revision: int, sequence: int) -> str:
    return f"{prefix(app, slot)}-r{revision}-{sequence}"


def lock(app: str, slot: str) -> str:
    return f"{prefix(app, slot)}-lock"


def release_command(app: str, slot: str, revision: int) -> str:
    return f"{prefix(app, slot)}-release-r{revision}"


def one_off(app: str, slot: str, process: str, token: str) -> str:
    """A one-off command's container (``shipway run``): one per run, ``token`` tells them
    apart."""
    return _safe(f"{prefix(app, slot)}-run-{process}-{token}")


def salted(salt: str, text: str) -> str:
    """A hash to compare values by, keyed to one object so it says nothing elsewhere."""
    return hashlib.sha256(f"shipway\0{salt}\0{text}".encode()).hexdigest()
