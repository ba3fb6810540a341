"""The Docker hosts backend: one step at a time, on one or many Docker engines.

It never decides what to do (the plan does); it does one step on one host, and says what it
did there. What must never happen here:

* a change before the clearance is checked — every mutating method starts with
  ``_guard`` (the clearance covers the target, it is this backend's, the lock is ours);
* a library exception escaping — everything that talks to an engine runs inside
  :func:`edge`, which turns docker/requests/paramiko/OS errors into shipway's;
* traffic moving to a container that did not pass its health gate — containers start
  beside the old ones and the proxy's route (a separate, later unit) is what switches;
* an old container stopped while requests may still be on their way to it — its removal
  waits until ``drain_timeout`` has passed since its host's proxy was switched;
* a secret value in any output — engine messages and logs are redacted with the values
  the containers actually got.
"""

from __future__ import annotations

import contextlib
import json
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

import docker
import docker.errors
import docker.types
import paramiko
import requests
from docker.models.containers import Container
from docker.utils import parse_repository_tag

from shipway.backends.docker import caddy, drift, labels, render
from shipway.backends.docker.connection import HostConnection
from shipway.backends.docker.containers import ContainerSpec, create
from shipway.backends.docker.health import http_probe, tcp_probe
from shipway.backends.docker.hosts import HostAddress, addresses
from shipway.backends.docker.lock import SlotLock
from shipway.backends.docker.store import RecordStore, ensure_holder_image, read_tree, tar_of
from shipway.backends.guarded import Guarded
from shipway.backends.imagemeta import classify, repo_digest, start_command
from shipway.backends.protocol import (
    Backend,
    Failure,
    LockHolder,
    ProcessStatus,
    Reason,
    Reporter,
    ResolvedImage,
)
from shipway.backends.registry import insecure_registries, lookup
from shipway.errors import (
    BackendError,
    CleanupFailed,
    InputError,
    RegistryLookupFailed,
    ShipwayError,
)
from shipway.guard import Clearance
from shipway.plan.model import (
    ApplyObject,
    Observed,
    ObservedUnit,
    Plan,
    Remove,
    UnitState,
    WaitRollout,
)
from shipway.release import history
from shipway.release.artifact import Artifact, Unit, digest_of
from shipway.release.model import Release
from shipway.spec.model import App, Slot, Target
from shipway.spec.secrets import Masker, Secret, placeholder, redact, reveal

T = TypeVar("T")
POLL = 0.15
LOG_TAIL = 20


@contextlib.contextmanager
def edge(what: str) -> Iterator[None]:
    """Translate what the Docker SDK, requests, paramiko and the OS raise into shipway's
    errors (most specific first), each saying where it happened."""
    try:
        yield
    except ShipwayError:
        raise
    except docker.errors.ImageNotFound as exc:
        raise BackendError(f"{what}: image not found: {_explain(exc)}") from exc
    except docker.errors.NotFound as exc:
        raise BackendError(f"{what}: not found: {_explain(exc)}") from exc
    except docker.errors.APIError as exc:
        raise BackendError(f"{what}: the Docker engine refused: {_explain(exc)}") from exc
    except docker.errors.DockerException as exc:
        raise BackendError(f"{what}: {exc}") from exc
    except requests.exceptions.RequestException as exc:
        raise BackendError(f"{what}: the Docker engine did not answer: {exc}") from exc
    except paramiko.SSHException as exc:
        raise BackendError(f"{what}: SSH failed: {exc}") from exc
    except OSError as exc:
        raise BackendError(f"{what}: {exc}") from exc


def _explain(exc: docker.errors.APIError) -> str:
    text = exc.explanation if isinstance(exc.explanation, str) else str(exc)
    return text.strip() or str(exc)


def _state(status: str) -> UnitState:
    if status in ("running", "restarting"):
        return "running"
    if status == "created":
        return "created"
    return "stopped"


class DockerBackend(Guarded):
    name = "docker"

    def __init__(self, app: App, slot: Slot, environ: Mapping[str, str] | None = None) -> None:
        self.app, self.slot = app, slot
        self.settings = render.Settings.of(slot)
        self.host_addresses: list[HostAddress] = addresses(slot.hosts)
        if not self.host_addresses:
            raise InputError(f"slot {slot.name!r} lists no docker hosts")
        self.connections = {
            h.name: HostConnection(
                h, known_hosts=slot.known_hosts, base_dir=app.source_dir, environ=environ
            )
            for h in self.host_addresses
        }
        self.primary = self.host_addresses[0].name
        #: host -> time.monotonic() of its proxy's last route switch (drain starts there)
        self._switched_at: dict[str, float] = {}
        #: unit key -> why it differs from its body (from the last observe)
        self.drift: dict[str, list[str]] = {}
        #: host -> what this operation did there, in order (the per-host report)
        self.journal: dict[str, list[str]] = {}
        #: something failed during the current operation (the report is printed at its end)
        self._trouble = False
        #: the slot's lock while this backend holds it (every mutation checks it first)
        self._slot_lock: SlotLock | None = None
        #: the primary host's insecure registries (asked once, when the registry is read)
        self._insecure: tuple[str, ...] | None = None

    # -- plumbing ----------------------------------------------------------------------

    def _conn(self, host: str | None) -> HostConnection:
        if host is None or host not in self.connections:
            raise BackendError(
                f"host {host!r} is not one of slot {self.slot.name!r}'s hosts "
                f"({', '.join(self.connections)})"
            )
        return self.connections[host]

    def _client(self, host: str | None) -> docker.DockerClient:
        conn = self._conn(host)
        with edge(f"host {conn.name}"):
            return conn.client()

    def _note(self, host: str | None, text: str) -> None:
        self.journal.setdefault(host or "?", []).append(text)

    def host_report(self) -> list[str]:
        """What this operation did on each host, in order (the per-host report)."""
        out = []
        for h in self.host_addresses:
            done = self.journal.get(h.name)
            out.append(f"host {h.name}: " + ("; ".join(done) if done else "nothing done"))
        return out

    def _still_ours(self, target: Target) -> None:
        """Refuse to mutate once the lock this backend holds is lost or was not renewed
        within its TTL (someone may have broken it and started an operation of their own).

        Docker keeps its own wording of the refusal (the slot, the lock's host, what to do
        next; docs/docker.md and the tests quote it), so :class:`SlotLock` raises it rather
        than ``_lock_problem`` giving a reason for the generic one."""
        if self._slot_lock is not None:
            self._slot_lock.check()

    def _each_host(self, work: Callable[[HostConnection], T]) -> dict[str, T]:
        """Run ``work`` on every host at once; the first error (in host order) is raised."""
        with ThreadPoolExecutor(max_workers=len(self.host_addresses)) as pool:
            futures = {
                h.name: pool.submit(work, self.connections[h.name]) for h in self.host_addresses
            }
            return {name: f.result() for name, f in futures.items()}

    def _labelled(self, client: docker.DockerClient, kind: str | None = None) -> list[Container]:
        found: list[Container] = client.containers.list(
            all=True, filters=labels.slot_filter(self.app.name, self.slot.name, kind)
        )
        return found

    def _by_key(self, client: docker.DockerClient, key: str) -> Container | None:
        filters = labels.slot_filter(self.app.name, self.slot.name)
        filters["label"].append(f"{labels.KEY}={key}")
        found: list[Container] = client.containers.list(all=True, filters=filters)
        return found[0] if found else None

    def _get(self, client: docker.DockerClient, name: str) -> Container | None:
        try:
            return client.containers.get(name)
        except docker.errors.NotFound:
            return None

    # -- pure ----------------------------------------------------------------------------

    def render(self, app: App, slot: Slot, release: Release) -> Artifact:
        return render.render(app, slot, release)

    # -- reading -------------------------------------------------------------------------

    def resolve_image(self, target: Target, app: App, ref: str | None) -> ResolvedImage:
        """The image to run, by digest: the registry's digest for the reference when a
        host's engine can ask it (no pull), else a host's local one; metadata from the
        first host that has exactly that image (None when none has: the engine then falls
        back to the records)."""
        self._serves(target)
        chosen = ref or app.image
        if not chosen:
            raise InputError(
                'no image to deploy: set image = "..." under [app] in the spec, or pass --image REF'
            )
        registry: str | None = chosen.split("@", 1)[1] if "@" in chosen else None
        if registry is None:
            client = self._client(self.primary)
            try:
                registry = str(client.images.get_registry_data(chosen).id)
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                registry = None  # no registry reachable for it: a local-only image
        for host in self.host_addresses:
            client = self._client(host.name)
            with edge(f"host {host.name}: inspect image {chosen}"):
                try:
                    attrs = client.images.get(chosen).attrs
                except docker.errors.ImageNotFound:
                    continue
            local = repo_digest(attrs, chosen)
            if registry is None or local == registry:
                return ResolvedImage(chosen, registry or local, classify(attrs))
        # no host has it (a new host, or a reaped image): the registry it names tells
        try:
            found = lookup(chosen, insecure=self._insecure_registries())
        except RegistryLookupFailed as exc:
            return ResolvedImage(chosen, registry, None, unknown_because=str(exc))
        return ResolvedImage(chosen, registry or found.digest, classify(found.attrs))

    def _insecure_registries(self) -> tuple[str, ...]:
        """The registries the primary host's engine reaches over plain HTTP (its
        ``insecure-registries``): shipway reads them the way that engine would pull."""
        if self._insecure is None:
            try:
                with edge(f"host {self.primary}: engine info"):
                    info = self._client(self.primary).info()
            except BackendError:
                info = {}
            self._insecure = insecure_registries(info)
        return self._insecure

    def observe(self, target: Target) -> Observed:
        self._serves(target)
        found = self._each_host(self._observe_host)
        units: list[ObservedUnit] = []
        self.drift = {}
        for name in (h.name for h in self.host_addresses):
            for unit, reasons in found[name]:
                units.append(unit)
                if reasons:
                    self.drift[unit.key] = reasons
        return Observed.of(units)

    def _observe_host(self, conn: HostConnection) -> list[tuple[ObservedUnit, list[str]]]:
        host = conn.name
        out: list[tuple[ObservedUnit, list[str]]] = []
        with edge(f"host {host}: observe"):
            containers = self._labelled(conn.client())
            files_reasons: dict[str, list[str]] = {}
            for c in containers:
                if c.labels.get(labels.KIND) != labels.FILES:
                    continue
                body, reasons = drift.body_of(c.labels)
                if body is not None:
                    content = json.loads(c.labels.get(labels.CONTENT) or "{}")
                    actual = read_tree(c, "/files")
                    reasons += drift.files(actual, body, content, str(body.get("volume")))
                    files_reasons[str(body.get("volume"))] = reasons
                out.append(self._observed(c, "files", 0, reasons, host, state="present"))
            for c in containers:
                kind = c.labels.get(labels.KIND)
                if kind not in (labels.APP_CONTAINER, labels.PROXY):
                    continue
                body, reasons = drift.body_of(c.labels)
                if body is not None:
                    reasons += drift.container(c.attrs, body)
                    volume = body.get("volume")
                    if kind == labels.APP_CONTAINER and volume:
                        if volume not in files_reasons:
                            reasons.append(f"its files volume {volume} is gone")
                        elif files_reasons[volume]:
                            reasons.append(f"the files it mounts changed ({volume})")
                phase = 1 if kind == labels.APP_CONTAINER else 0
                unit_kind = "container" if kind == labels.APP_CONTAINER else "proxy"
                out.append(self._observed(c, unit_kind, phase, reasons, host))
                if kind == labels.PROXY:
                    out += self._observe_routes(c, body or {}, host)
        return out

    def _observed(
        self,
        c: Container,
        kind: str,
        phase: int,
        reasons: list[str],
        host: str,
        state: UnitState | None = None,
    ) -> tuple[ObservedUnit, list[str]]:
        digest = c.labels.get(labels.DIGEST) or ""
        unit = ObservedUnit(
            key=c.labels.get(labels.KEY) or f"unknown/{c.name}@{host}",
            kind=kind,
            digest=drift.drifted(digest, reasons) if reasons else digest,
            state=state or _state(c.status),
            process=c.labels.get(labels.PROCESS),
            host=host,
            phase=phase,
        )
        return unit, reasons

    def _observe_routes(
        self, proxy: Container, body: Mapping[str, Any], host: str
    ) -> list[tuple[ObservedUnit, list[str]]]:
        tree = read_tree(proxy, caddy.CONFIG_DIR)
        routes = self._parse_routes(tree)
        config = tree.get(caddy.CONFIG_FILE, (b"", 0))[0]
        stale = bool(routes) and config != caddy.dumps(caddy.compose(routes, body))
        out = []
        for key, fragment in sorted(routes.items()):
            reasons = []
            digest = str(fragment.get("digest", ""))
            if digest_of(fragment.get("body")) != digest:
                reasons.append("its entry in the proxy's routes.json was changed")
            if stale:
                reasons.append("the proxy's caddy.json no longer matches its routes")
            body_process = (fragment.get("body") or {}).get("process")
            unit = ObservedUnit(
                key=key,
                kind="route",
                digest=drift.drifted(digest, reasons) if reasons else digest,
                state="present",
                process=str(body_process) if body_process else None,
                host=host,
                phase=2,
            )
            out.append((unit, reasons))
        return out

    @staticmethod
    def _parse_routes(tree: Mapping[str, tuple[bytes, int]]) -> dict[str, dict[str, Any]]:
        raw = tree.get(caddy.ROUTES_FILE)
        if raw is None:
            return {}
        try:
            data = json.loads(raw[0])
        except ValueError:
            return {}
        return (
            {str(k): v for k, v in data.items() if isinstance(v, dict)}
            if isinstance(data, dict)
            else {}
        )

    def read_records(self, target: Target) -> list[Release]:
        self._serves(target)
        client = self._client(self.primary)
        with edge(f"host {self.primary}: read release records"):
            return RecordStore(client, self.app.name, self.slot.name).read()

    def status(self, target: Target) -> list[ProcessStatus]:
        self._serves(target)
        deployed = history.deployed(self.read_records(target))
        if deployed is None:
            return []
        wanted: dict[str, list[Unit]] = {}
        for unit in deployed.artifact:
            if unit.kind == "container" and unit.process:
                wanted.setdefault(unit.process, []).append(unit)
        observed = self.observe(target)
        out = []
        for process, units in wanted.items():
            per_host: dict[str, list[int]] = {}
            for unit in units:
                counts = per_host.setdefault(unit.host or "?", [0, 0])
                counts[1] += 1
                seen = observed.units.get(unit.key)
                if seen is not None and seen.state == "running" and seen.digest == unit.digest:
                    counts[0] += 1
            out.append(
                ProcessStatus(
                    process=process,
                    desired=sum(c[1] for c in per_host.values()),
                    ready=sum(c[0] for c in per_host.values()),
                    generation=None,
                    detail={"hosts": {h: f"{c[0]}/{c[1]}" for h, c in per_host.items()}},
                )
            )
        return out

    def diff(self, target: Target, plan: Plan) -> list[str]:
        """Per host: what the plan does there, why drifted units are replaced, and which
        changes cannot be zero-downtime."""
        self._serves(target)
        self.observe(target)
        release = plan.release
        artifact = release.artifact if release else Artifact()
        lines = ["per host:"]
        for host in self.host_addresses:
            steps = [s for s in plan.steps if getattr(s, "host", None) == host.name]
            counts: dict[str, int] = {}
            for s in steps:
                word = s.action if isinstance(s, ApplyObject) else s.name
                counts[word] = counts.get(word, 0) + 1
            summary = ", ".join(f"{n} {w}" for w, n in sorted(counts.items())) or "no change"
            lines.append(f"  {host.name} ({host.url}): {summary}")
            for s in steps:
                if isinstance(s, ApplyObject) and s.action == "update" and s.unit in self.drift:
                    for why in self.drift[s.unit]:
                        lines.append(f"    {s.unit} drifted: {why}")
            lines += [f"    {n}" for n in self._downtime_notes(steps, artifact, host.name)]
        return lines

    def _downtime_notes(self, steps: Sequence[Any], artifact: Artifact, host: str) -> list[str]:
        notes = []
        routed = {u.process for u in artifact if u.kind == "route" and u.host == host}
        for s in steps:
            if not isinstance(s, ApplyObject):
                continue
            if s.kind == "proxy" and s.action == "update" and routed:
                notes.append(
                    f"NOT zero-downtime: the proxy on {host} is recreated; port "
                    f"{self.settings.proxy_port} refuses connections until it is up"
                )
            if s.kind == "container" and s.action == "update":
                unit = artifact.get(s.unit) if s.unit in artifact.keys() else None  # noqa: SIM118
                if unit is not None and unit.process in routed:
                    notes.append(
                        f"NOT zero-downtime for {s.unit}: it is replaced in place (same "
                        f"release); the proxy retries its requests for up to "
                        f"{render.UPSTREAM_TRY:g}s, unless the process has other replicas"
                    )
        for u in artifact:
            if (
                u.host == host
                and u.kind == "container"
                and u.body.get("port")
                and u.process not in routed
                and any(isinstance(s, ApplyObject) and s.unit == u.key for s in steps)
            ):
                notes.append(
                    f"note: process {u.process} has a port but no route: it is reached "
                    "directly (network alias), so its clients are not switched gracefully"
                )
                break
        return notes

    def logs(self, target: Target, process: str | None, follow: bool, lines: int) -> Iterator[str]:
        self._serves(target)
        picked: list[tuple[str, Container]] = []
        for host in self.host_addresses:
            client = self._client(host.name)
            with edge(f"host {host.name}: list containers"):
                for c in self._labelled(client, labels.APP_CONTAINER):
                    wanted = process is None or c.labels.get(labels.PROCESS) == process
                    if wanted and (c.status in ("running", "restarting") or not follow):
                        picked.append((host.name, c))
        if not follow:
            return iter(self._log_lines(picked, lines))
        return self._follow(picked, lines)

    def _prefix(self, host: str, c: Container) -> str:
        return (
            f"[{c.labels.get(labels.PROCESS)}.{c.labels.get(labels.REPLICA)}"
            f" r{c.labels.get(labels.RELEASE)}@{host}]"
        )

    def _log_lines(self, picked: list[tuple[str, Container]], lines: int) -> list[str]:
        out = []
        for host, c in picked:
            with edge(f"host {host}: logs of {c.name}"):
                text = _logs(c, lines)
            mask = self._redactor(c)
            out += [f"{self._prefix(host, c)} {mask(line)}" for line in text.splitlines()]
        return out

    def _follow(self, picked: list[tuple[str, Container]], lines: int) -> Iterator[str]:
        q: queue.Queue[str | None] = queue.Queue()

        def pump(host: str, c: Container) -> None:
            mask, prefix = self._redactor(c), self._prefix(host, c)
            try:
                buffer = b""
                for chunk in c.logs(stream=True, follow=True, tail=lines):
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        q.put(f"{prefix} {mask(line.decode(errors='replace'))}")
            except Exception as exc:  # a stream that breaks ends this container's lines
                q.put(f"{prefix} (log stream ended: {type(exc).__name__})")
            finally:
                q.put(None)

        for host, c in picked:
            threading.Thread(target=pump, args=(host, c), daemon=True).start()
        remaining = len(picked)
        while remaining:
            item = q.get()
            if item is None:
                remaining -= 1
            else:
                yield item

    @staticmethod
    def _redactor(c: Container) -> Masker:
        """Masks the secret values this container actually got (found through the
        placeholders in its unit body)."""
        body, _ = drift.body_of(c.labels)
        env = drift._env_of(c.attrs)
        return Masker(
            env[k]
            for k, v in ((body or {}).get("env") or {}).items()
            if "${secrets." in str(v) and k in env
        )

    def live_digest(self, target: Target, release: Release) -> str | None:
        self._serves(target)
        keys = {u.key: u for u in release.artifact if u.kind == "container"}
        for host in self.host_addresses:
            client = self._client(host.name)
            with edge(f"host {host.name}: inspect"):
                for c in self._labelled(client, labels.APP_CONTAINER):
                    if c.labels.get(labels.KEY) not in keys or c.status != "running":
                        continue
                    attrs = c.image.attrs if c.image is not None else {}
                    digests = [d.split("@", 1)[1] for d in attrs.get("RepoDigests") or []]
                    if release.digest in digests:
                        return release.digest
                    return digests[0] if digests else None
        return None

    # -- the lock and the records --------------------------------------------------------

    @contextlib.contextmanager
    def lock(
        self, clearance: Clearance, target: Target, holder: LockHolder, reporter: Reporter
    ) -> Iterator[None]:
        self._guard(clearance, target)
        conn = self._conn(self.primary)
        with edge(f"host {self.primary}: lock"):
            slot_lock = SlotLock(
                conn.client(), conn.new_client(), self.app.name, self.slot.name, self.primary
            )
            held = slot_lock.held(holder, reporter)
            held.__enter__()
        self.journal, self._trouble = {}, False
        self._slot_lock = slot_lock
        try:
            yield
        except BaseException:
            self._slot_lock = None
            self._trouble = True
            self._final_report(reporter)
            if not self._unlock(held, sys.exc_info(), holder, reporter):
                raise
        else:
            self._slot_lock = None
            self._final_report(reporter)
            self._unlock(held, (None, None, None), holder, reporter)

    def _unlock(
        self,
        held: contextlib.AbstractContextManager[None],
        exc_info: tuple[Any, Any, Any],
        holder: LockHolder,
        reporter: Reporter,
    ) -> bool:
        """Release the lock; a failure to do so is a warning (the lock expires by its TTL),
        never what the operation ends with. True when ``held`` suppressed the exception."""
        try:
            with edge(f"host {self.primary}: unlock"):
                return bool(held.__exit__(*exc_info))
        except BackendError as exc:
            name = labels.lock(self.app.name, self.slot.name)
            reporter.line(
                f"warning: releasing the lock of slot {self.slot.name!r} failed ({exc}); it "
                f"expires by itself at the latest {holder.ttl:g}s after its last renewal, or "
                f"clear it now by removing the container {name} on host {self.primary} "
                f"(docker rm -f {name})"
            )
            return False

    def _final_report(self, reporter: Reporter) -> None:
        """After an operation in which something failed (and whatever undo followed):
        what happened on each host, in order."""
        if self._trouble:
            reporter.line("what happened on each host:")
            for line in self.host_report():
                reporter.line(f"  {line}")

    def write_records(
        self, clearance: Clearance, target: Target, records: Sequence[Release]
    ) -> None:
        self._guard(clearance, target)
        client = self._client(self.primary)
        with edge(f"host {self.primary}: write release records"):
            RecordStore(client, self.app.name, self.slot.name).write(records)

    def delete_records(
        self, clearance: Clearance, target: Target, revisions: Sequence[int]
    ) -> None:
        self._guard(clearance, target)
        client = self._client(self.primary)
        with edge(f"host {self.primary}: delete release records"):
            RecordStore(client, self.app.name, self.slot.name).delete(revisions)

    # -- applying units ------------------------------------------------------------------

    def apply(
        self,
        clearance: Clearance,
        target: Target,
        unit: Unit,
        action: str,
        secrets: Mapping[str, Secret],
        reporter: Reporter,
    ) -> None:
        self._guard(clearance, target)
        conn = self._conn(unit.host)
        client = self._client(unit.host)
        appliers = {
            "files": self._apply_files,
            "proxy": self._apply_proxy,
            "container": self._apply_container,
            "route": self._apply_route,
        }
        if unit.kind not in appliers:
            raise BackendError(f"the docker backend cannot apply a {unit.kind!r} unit")
        try:
            with edge(f"host {conn.name}: {action} {unit.key}"):
                done = appliers[unit.kind](client, unit, action, secrets)
        except BackendError as exc:
            self._trouble = True
            self._note(unit.host, f"{action} {unit.key} FAILED")
            for line in self.host_report():
                reporter.line(f"  {line}")
            raise BackendError(redact(str(exc), secrets)) from exc
        self._note(unit.host, done)

    def _ensure_network(self, client: docker.DockerClient, name: str) -> None:
        if client.networks.list(names=[name]):
            return
        try:
            client.networks.create(
                name,
                driver="bridge",
                labels=labels.base(self.app.name, self.slot.name, "network"),
                check_duplicate=True,
            )
        except docker.errors.APIError as exc:
            if exc.status_code != 409:
                raise

    def _ensure_image(self, client: docker.DockerClient, ref: str) -> None:
        try:
            client.images.get(ref)
            return
        except docker.errors.ImageNotFound:
            pass
        repo, tag = parse_repository_tag(ref)
        for chunk in client.api.pull(repo, tag=tag or "latest", stream=True, decode=True):
            if isinstance(chunk, dict) and "error" in chunk:
                raise BackendError(f"cannot pull image {ref}: {chunk['error']}")
        client.images.get(ref)  # raises ImageNotFound when the pull made nothing

    def _unit_labels(self, kind: str, unit: Unit) -> dict[str, str]:
        return {
            **labels.base(self.app.name, self.slot.name, kind),
            labels.KEY: unit.key,
            labels.DIGEST: unit.digest,
            labels.UNIT: json.dumps(unit.body, sort_keys=True, separators=(",", ":")),
        }

    def _apply_files(
        self,
        client: docker.DockerClient,
        unit: Unit,
        action: str,
        secrets: Mapping[str, Secret],
    ) -> str:
        body = unit.body
        volume = str(body["volume"])
        files = {
            str(f["path"]): (str(reveal(f["content"], secrets)), int(f["mode"], 8))
            for f in body["files"]
        }
        content = {p: labels.salted(volume, text) for p, (text, _) in files.items()}
        ensure_holder_image(client)
        holder = self._get(client, volume)
        if holder is not None and (
            holder.labels.get(labels.DIGEST) != unit.digest
            or json.loads(holder.labels.get(labels.CONTENT) or "{}") != content
        ):
            holder.remove(force=True)
            holder = None
        if holder is None:
            client.volumes.create(
                volume, labels=labels.base(self.app.name, self.slot.name, labels.FILES)
            )
            holder = client.containers.create(
                labels.HOLDER_IMAGE,
                name=volume,
                labels={
                    **self._unit_labels(labels.FILES, unit),
                    labels.CONTENT: json.dumps(content, sort_keys=True),
                },
                volumes={volume: {"bind": "/files", "mode": "rw"}},
            )
        holder.put_archive(
            "/files", tar_of({p: (text.encode(), mode) for p, (text, mode) in files.items()})
        )
        verb = "wrote" if action == "update" else "created"
        return f"{verb} {len(files)} config files in volume {volume}"

    @staticmethod
    def _file_mounts(
        client: docker.DockerClient, body: Mapping[str, Any]
    ) -> list[docker.types.Mount]:
        """Each config file of the unit's files volume, bind-mounted read-only where the
        process expects it (the volume's own directory on the host is the source)."""
        if not body.get("volume") or not body.get("mounts"):
            return []
        source = client.volumes.get(str(body["volume"])).attrs["Mountpoint"]
        return [
            docker.types.Mount(
                target=str(m["target"]),
                source=f"{source}/{m['file']}",
                type="bind",
                read_only=True,
            )
            for m in body["mounts"]
        ]

    def _remove_container(self, c: Container, timeout: int) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            if c.status in ("running", "restarting", "paused"):
                c.stop(timeout=timeout)
        with contextlib.suppress(docker.errors.NotFound):
            c.remove(force=True)

    def _apply_container(
        self,
        client: docker.DockerClient,
        unit: Unit,
        action: str,
        secrets: Mapping[str, Secret],
    ) -> str:
        body = unit.body
        name = str(body["name"])
        existing = self._get(client, name)
        if action == "start" and existing is not None:
            if existing.status == "paused":
                existing.unpause()
            else:
                existing.start()
            return f"started {name}"
        # what the new one needs first: an image that cannot be had leaves the old running
        self._ensure_network(client, str(body["network"]))
        self._ensure_image(client, str(body["image"]))
        if existing is not None:
            self._remove_container(existing, int(body.get("stop_timeout", 10)))
        env = {k: str(v) for k, v in reveal(body["env"], secrets).items()}
        resources = body.get("resources") or {}
        container = create(
            client,
            ContainerSpec(
                image=str(body["image"]),
                name=name,
                env=env,
                labels={
                    **self._unit_labels(labels.APP_CONTAINER, unit),
                    **body.get("labels", {}),
                    labels.ENV_HASH: drift.env_hash(name, env),
                },
                entrypoint=body.get("entrypoint"),
                command=body.get("args"),
                network=str(body["network"]),
                aliases=list(body.get("aliases") or []),
                mounts=self._file_mounts(client, body),
                restart=str(body.get("restart", "no")),
                stop_timeout=int(body.get("stop_timeout", 10)),
                memory=resources.get("memory"),
                memory_reservation=resources.get("memory_reservation"),
                nano_cpus=resources.get("nano_cpus"),
                cpu_shares=resources.get("cpu_shares"),
            ),
        )
        try:
            container.start()
        except docker.errors.APIError as exc:
            raise BackendError(
                f"created container {name} but it did not start: {_explain(exc)} (it is kept, "
                "state 'created', so the next run starts it instead of creating it twice)"
            ) from exc
        verb = "replaced" if action == "update" else "started"
        return f"{verb} {name} ({container.short_id})"

    def _apply_proxy(
        self, client: docker.DockerClient, unit: Unit, action: str, secrets: Mapping[str, Secret]
    ) -> str:
        body = unit.body
        name = str(body["name"])
        existing = self._get(client, name)
        if action == "start" and existing is not None:
            existing.start()
            return f"started proxy {name}"
        self._ensure_network(client, str(body["network"]))
        self._ensure_image(client, str(body["image"]))  # before the old proxy goes
        if existing is not None:
            self._remove_container(existing, 10)
        volume = str(body["volume"])
        with contextlib.suppress(docker.errors.APIError):
            client.volumes.create(
                volume, labels=labels.base(self.app.name, self.slot.name, labels.PROXY)
            )
        config_dir = str(body.get("config_dir", caddy.CONFIG_DIR))
        container = create(
            client,
            ContainerSpec(
                image=str(body["image"]),
                name=name,
                command=["caddy", "run", "--config", f"{config_dir}/{caddy.CONFIG_FILE}"],
                env={"XDG_CONFIG_HOME": "/config", "XDG_DATA_HOME": "/data"},
                labels=self._unit_labels(labels.PROXY, unit),
                restart=str(body.get("restart", "unless-stopped")),
                mounts=[docker.types.Mount(target=config_dir, source=volume, type="volume")],
                ports={int(body["listen"]): int(body["port"])},
                network=str(body["network"]),
                stop_timeout=int(body.get("stop_timeout", 10)),
                sysctls=_listener_migration(client),
            ),
        )
        # the config it starts with: the routes already in its volume (a proxy recreated
        # keeps serving them), else none
        routes = self._parse_routes(read_tree(container, config_dir))
        container.put_archive(config_dir, self._config_tar(routes, body))
        try:
            container.start()
        except docker.errors.APIError as exc:
            raise BackendError(
                f"the proxy {name} did not start: {_explain(exc)} (hint: is port "
                f"{body['port']} free on the host? set proxy_port in the slot)"
            ) from exc
        verb = "replaced" if action == "update" else "started"
        return f"{verb} proxy {name} on port {body['port']}"

    @staticmethod
    def _config_tar(routes: Mapping[str, Any], proxy_body: Mapping[str, Any]) -> bytes:
        return tar_of(
            {
                caddy.ROUTES_FILE: (caddy.dumps(dict(routes)), 0o644),
                caddy.CONFIG_FILE: (caddy.dumps(caddy.compose(routes, proxy_body)), 0o644),
            }
        )

    def _proxy_for(
        self, client: docker.DockerClient, name: str
    ) -> tuple[Container, dict[str, Any]]:
        proxy = self._get(client, name)
        if proxy is None:
            raise BackendError(f"the proxy container {name} is missing")
        body, _ = drift.body_of(proxy.labels)
        if proxy.status != "running":
            raise BackendError(f"the proxy container {name} is {proxy.status}, not running")
        return proxy, dict(body or {})

    def _reconfigure(
        self,
        proxy: Container,
        proxy_body: Mapping[str, Any],
        change: Callable[[dict[str, Any]], None],
    ) -> None:
        """Change the proxy's routes and reload it gracefully; put the previous files back
        if the reload fails, so what is written is always what runs."""
        config_dir = str(proxy_body.get("config_dir", caddy.CONFIG_DIR))
        tree = read_tree(proxy, config_dir)
        routes = self._parse_routes(tree)
        change(routes)
        proxy.put_archive(config_dir, self._config_tar(routes, proxy_body))
        result = proxy.exec_run(
            ["caddy", "reload", "--config", f"{config_dir}/{caddy.CONFIG_FILE}", "--force"]
        )
        if result.exit_code != 0:
            previous = {
                k: v for k, v in tree.items() if k in (caddy.ROUTES_FILE, caddy.CONFIG_FILE)
            }
            if previous:
                proxy.put_archive(config_dir, tar_of(previous))
            raw = result.output if isinstance(result.output, bytes) else b""
            output = raw.decode(errors="replace").strip().splitlines()
            raise BackendError(
                f"the proxy {proxy.name} refused its new configuration (exit {result.exit_code}): "
                + (output[-1][:300] if output else "no output")
            )

    def _apply_route(
        self, client: docker.DockerClient, unit: Unit, action: str, secrets: Mapping[str, Secret]
    ) -> str:
        proxy, proxy_body = self._proxy_for(client, str(unit.body["proxy"]))

        def put(routes: dict[str, Any]) -> None:
            routes[unit.key] = {"key": unit.key, "digest": unit.digest, "body": dict(unit.body)}

        self._reconfigure(proxy, proxy_body, put)
        self._switched_at[unit.host or ""] = time.monotonic()
        targets = ", ".join(str(u).split(":")[0] for u in unit.body["upstreams"])
        where = ", ".join(unit.body.get("hosts") or []) or "all requests"
        return f"switched {where} to {targets}"

    # -- removing ------------------------------------------------------------------------

    def remove(
        self, clearance: Clearance, target: Target, step: Remove, reporter: Reporter
    ) -> None:
        self._guard(clearance, target)
        conn = self._conn(step.host)
        try:
            with edge(f"host {conn.name}: remove {step.unit}"):
                done = self._remove(conn.client(), step, reporter)
        except BackendError as exc:
            self._trouble = True
            self._note(step.host, f"remove {step.unit} FAILED")
            raise CleanupFailed(
                str(exc),
                f"on host {conn.name}, remove the Docker objects labelled "
                f"{labels.KEY}={step.unit} (e.g. docker ps -a --filter "
                f"label={labels.KEY}={step.unit})",
            ) from exc
        self._note(step.host, done)

    def _remove(self, client: docker.DockerClient, step: Remove, reporter: Reporter) -> str:
        if step.kind == "route":
            proxy = next(iter(self._labelled(client, labels.PROXY)), None)
            if proxy is None or proxy.status != "running":
                return f"{step.unit} already gone (no running proxy)"
            body, _ = drift.body_of(proxy.labels)
            self._reconfigure(proxy, body or {}, lambda routes: routes.pop(step.unit, None))
            self._switched_at[step.host or ""] = time.monotonic()
            return f"dropped route {step.unit}"
        c = self._by_key(client, step.unit)
        if c is None:
            return f"{step.unit} already gone"
        body, _ = drift.body_of(c.labels)
        body = body or {}
        if step.kind == "container":
            switched = self._switched_at.get(step.host or "")
            if body.get("port") and switched is not None and c.status == "running":
                wait = switched + self.settings.drain - time.monotonic()
                if wait > 0:
                    reporter.line(
                        f"draining {c.name} on {step.host}: {wait:.1f}s left of "
                        f"{self.settings.drain:g}s since the switch"
                    )
                    time.sleep(wait)  # the drain window itself, not a stand-in for a condition
            self._remove_container(c, int(body.get("stop_timeout", 10)))
            return f"stopped and removed {c.name}"
        if step.kind == "proxy":
            self._remove_container(c, 10)
            with contextlib.suppress(docker.errors.NotFound):
                client.volumes.get(str(body.get("volume"))).remove()
            return f"removed proxy {c.name}"
        if step.kind == "files":
            c.remove(force=True)
            with contextlib.suppress(docker.errors.NotFound):
                client.volumes.get(str(body.get("volume"))).remove()
            return f"removed files volume {body.get('volume')}"
        c.remove(force=True)
        return f"removed {c.name}"

    # -- waiting -------------------------------------------------------------------------

    def wait(
        self,
        target: Target,
        step: WaitRollout,
        artifact: Artifact,
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        self._serves(target)
        conn = self._conn(step.host)
        units = [artifact.get(k) for k in step.units]
        gates = [_Gate(unit) for unit in units]
        with edge(f"host {conn.name}: wait for {step.process}"):
            client = conn.client()
            while True:
                for gate in gates:
                    if not gate.ready:
                        failure = gate.check(client, conn, step.process)
                        if failure is not None:
                            return self._failed(step, failure, reporter)
                ready = sum(g.ready for g in gates)
                reporter.progress(step.process, {"ready": ready, "desired": len(gates)}, conn.name)
                if ready == len(gates):
                    self._note(step.host, f"{step.process}: {ready} ready")
                    return None
                if time.monotonic() >= deadline:
                    return self._failed(
                        step,
                        Failure(
                            reason=Reason.TIMEOUT,
                            message=f"{ready}/{len(gates)} ready on {conn.name} when the "
                            "deploy timeout ran out",
                            process=step.process,
                            details=tuple(f"{g.unit.key}: {g.last}" for g in gates if not g.ready),
                        ),
                        reporter,
                    )
                time.sleep(POLL)

    def _failed(self, step: WaitRollout, failure: Failure, reporter: Reporter) -> Failure:
        self._trouble = True
        self._note(step.host, f"{step.process}: {failure.reason}")
        report = tuple(self.host_report())
        return Failure(
            reason=failure.reason,
            message=f"on {step.host}: {failure.message}",
            process=failure.process,
            exit_code=failure.exit_code,
            details=(*failure.details, "what happened on each host:", *report),
        )

    # -- the release command -------------------------------------------------------------

    def run_release_command(
        self,
        clearance: Clearance,
        target: Target,
        release: Release,
        command: Sequence[str],
        secrets: Mapping[str, Secret],
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        self._guard(clearance, target)
        containers = [u for u in release.artifact if u.kind == "container"]
        host = next((u.host for u in containers), None) or self.primary
        conn = self._conn(host)
        sample = next((u for u in containers if u.host == host), None)
        body: dict[str, Any] = dict(sample.body) if sample else {}
        env = dict(body.get("env") or {})
        env.pop("PORT", None)
        if not body:
            env = {**self.app.env, **{n: placeholder(n) for n in self.app.secrets}}
        start = start_command(release.image_meta, "release", tuple(command))
        name = labels.release_command(self.app.name, self.slot.name, release.revision)
        image = release.image_ref() or str(body.get("image") or self.app.image)
        with edge(f"host {host}: release command"):
            client = conn.client()
            old = self._get(client, name)
            if old is not None:
                old.remove(force=True)
            network = labels.network(self.app.name, self.slot.name)
            self._ensure_network(client, network)
            self._ensure_image(client, image)
            revealed = {k: str(v) for k, v in reveal(env, secrets).items()}
            c = create(
                client,
                ContainerSpec(
                    image=image,
                    name=name,
                    env=revealed,
                    labels={
                        **labels.base(self.app.name, self.slot.name, labels.RELEASE_COMMAND),
                        labels.RELEASE: str(release.revision),
                    },
                    entrypoint=start.entrypoint,
                    command=start.args or (),
                    network=network,
                    mounts=self._file_mounts(client, body),
                ),
            )
            try:
                c.start()
                left = max(deadline - time.monotonic(), 1.0)
                try:
                    result = c.wait(timeout=left)
                except requests.exceptions.RequestException:
                    c.kill()
                    self._trouble = True
                    self._note(host, "release command timed out")
                    return Failure(
                        reason=Reason.RELEASE_COMMAND_TIMEOUT,
                        message=f"the release command did not finish on {host} in time",
                    )
                code = int(result.get("StatusCode", -1))
                tail = _logs(c, LOG_TAIL).splitlines()
            finally:
                with contextlib.suppress(docker.errors.DockerException):
                    c.remove(force=True)
        shown = tuple(redact(line, secrets) for line in tail)
        if code != 0:
            self._trouble = True
            self._note(host, f"release command failed (exit {code})")
            return Failure(
                reason=Reason.RELEASE_COMMAND_FAILED,
                message=f"{' '.join(command)} exited with {code} on {host}",
                exit_code=code,
                details=shown,
            )
        self._note(host, "release command ok")
        for line in shown:
            reporter.line(f"  release command: {line}")
        return None

    # -- stopping ------------------------------------------------------------------------

    def stop(self, clearance: Clearance, target: Target, reporter: Reporter) -> None:
        """Remove what runs (containers, proxies, files volumes); the records and the lock
        stay, so the deployed release is still the anchor."""
        self._guard(clearance, target)

        def stop_host(conn: HostConnection) -> list[str]:
            done: list[str] = []
            with edge(f"host {conn.name}: stop"):
                client = conn.client()
                kinds = (labels.PROXY, labels.APP_CONTAINER, labels.FILES, labels.RELEASE_COMMAND)
                for c in self._labelled(client):
                    if c.labels.get(labels.KIND) in kinds:
                        self._remove_container(c, 10)
                        done.append(str(c.name))
                for v in client.volumes.list(
                    filters=labels.slot_filter(self.app.name, self.slot.name)
                ):
                    with contextlib.suppress(docker.errors.APIError):
                        v.remove()
                for n in client.networks.list(
                    names=[labels.network(self.app.name, self.slot.name)]
                ):
                    with contextlib.suppress(docker.errors.APIError):
                        n.remove()
            return done

        for host, done in self._each_host(stop_host).items():
            reporter.line(f"host {host}: removed {len(done)} containers")

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()


def _listener_migration(client: docker.DockerClient) -> dict[str, str]:
    """``net.ipv4.tcp_migrate_req=1`` in the proxy's network namespace when the host's
    kernel has it (Linux 5.14+). Caddy opens a new SO_REUSEPORT socket on every reload and
    closes the old one; without migration, the connections still waiting in the old
    socket's accept queue are reset — a handful per reload under load. With it, the kernel
    hands them to the new socket."""
    release = str(client.info().get("KernelVersion") or "")
    parts = release.split(".")
    try:
        major, minor = int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return {}
    return {"net.ipv4.tcp_migrate_req": "1"} if (major, minor) >= (5, 14) else {}


def _logs(c: Container, tail: int) -> str:
    data = c.logs(tail=tail)
    return data.decode(errors="replace") if isinstance(data, bytes) else ""


class _Gate:
    """The health gate of one unit (a container or the proxy) on one host."""

    def __init__(self, unit: Unit) -> None:
        self.unit = unit
        body = unit.body
        if unit.kind == "proxy":
            self.health: dict[str, Any] = dict(render.TCP_CHECK)
            self.port: int | None = int(body.get("listen", 80))
        else:
            self.health = dict(body.get("health") or {"mode": "uptime", "initial_delay": 1.0})
            self.port = body.get("port")
        self.name = str(body["name"])
        self.network = str(body["network"])
        self.ready = False
        self.last = "not checked yet"
        self.failed_attempts = 0
        self.next_probe = 0.0

    def check(
        self, client: docker.DockerClient, conn: HostConnection, process: str
    ) -> Failure | None:
        try:
            c: Container = client.containers.get(self.name)
        except docker.errors.NotFound:
            return Failure(Reason.NOT_FOUND, f"container {self.name} is gone", process)
        state = c.attrs.get("State") or {}
        status = str(state.get("Status"))
        if (
            status in ("exited", "dead")
            or int(c.attrs.get("RestartCount") or 0) > 0
            or state.get("Restarting")
        ):
            reason = (
                Reason.OOM_KILLED if state.get("OOMKilled") else Reason.CRASHED
            )
            return Failure(
                reason=reason,
                message=f"container {self.name} {status} (restarts: "
                f"{c.attrs.get('RestartCount') or 0})",
                process=process,
                exit_code=_last_exit_code(client, c, state),
                details=tuple(_tail(c)),
            )
        if status != "running":
            self.last = f"container is {status}"
            return None
        started = _started(state)
        now = datetime.now(UTC)
        up_for = (now - started).total_seconds() if started else 0.0
        mode = self.health.get("mode")
        delay = float(self.health.get("initial_delay") or 0.0)
        if mode == "uptime" or self.port is None:
            self.last = f"up for {up_for:.1f}s"
            self.ready = up_for >= max(delay, render.MIN_UPTIME)
            return None
        if up_for < delay or time.monotonic() < self.next_probe:
            return None
        networks = (c.attrs.get("NetworkSettings") or {}).get("Networks") or {}
        ip = (networks.get(self.network) or {}).get("IPAddress")
        if not ip:
            self.last = f"no address on network {self.network} yet"
            return None
        timeout = float(self.health.get("timeout") or 1.0)
        if mode == "http":
            ok, why = http_probe(conn.dial, ip, int(self.port), str(self.health["path"]), timeout)
        else:
            ok, why = tcp_probe(conn.dial, ip, int(self.port), timeout)
        self.last = why
        if ok:
            self.ready = True
            return None
        self.failed_attempts += 1
        self.next_probe = time.monotonic() + float(self.health.get("interval") or 1.0)
        if self.failed_attempts >= int(self.health.get("attempts") or 30):
            return Failure(
                reason=Reason.HEALTHCHECK_FAILED,
                message=f"{self.name}: {why} ({self.failed_attempts} attempts)",
                process=process,
                details=tuple(_tail(c)),
            )
        return None


def _started(state: Mapping[str, Any]) -> datetime | None:
    raw = str(state.get("StartedAt") or "")
    if not raw or raw.startswith("0001-"):
        return None
    # Docker gives nanoseconds: 2024-01-01T00:00:00.123456789Z
    head, _, frac = raw.rstrip("Z").partition(".")
    try:
        base = datetime.fromisoformat(head).replace(tzinfo=UTC)
    except ValueError:
        return None
    micros = int((frac + "000000")[:6]) if frac.isdigit() else 0
    return base.replace(microsecond=micros)


def _last_exit_code(
    client: docker.DockerClient, c: Container, state: Mapping[str, Any]
) -> int | None:
    """The code its last run exited with. A container the engine already started again
    shows ``ExitCode`` 0 (its current run's): the engine's last ``die`` event of it keeps
    the code."""
    code = state.get("ExitCode")
    if state.get("Status") in ("exited", "dead") or not int(c.attrs.get("RestartCount") or 0):
        return int(code) if code is not None else None
    created = _started({"StartedAt": c.attrs.get("Created")})
    since = int(created.timestamp()) - 1 if created else None
    found: int | None = None
    try:
        events = client.events(
            since=since,
            until=int(time.time()) + 1,
            filters={"container": c.id, "event": "die"},
            decode=True,
        )
        try:
            for event in events:
                exit_code = ((event.get("Actor") or {}).get("Attributes") or {}).get("exitCode")
                if exit_code is not None and str(exit_code).lstrip("-").isdigit():
                    found = int(exit_code)
        finally:
            events.close()
    except docker.errors.DockerException:
        pass
    return found if found is not None else (int(code) if code is not None else None)


def _tail(c: Container) -> list[str]:
    mask = DockerBackend._redactor(c)
    try:
        text = _logs(c, LOG_TAIL)
    except docker.errors.DockerException:
        return ["(no logs)"]
    return [f"log: {mask(line)}" for line in text.splitlines()[-LOG_TAIL:]]


_: type[Backend] = DockerBackend  # mypy checks it keeps the protocol (no generations)
