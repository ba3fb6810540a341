"""What the Docker backend reads from its hosts. Nothing here mutates anything.

Observing reads every host at once, each once: one list of the containers labelled as this
slot's, then only what drift needs (the app containers and the proxy inspected, the files
volumes and the proxy's routes read), each compared with the unit body it carries (drift,
in words that never hold a value). Logs are masked with the secret values each container
actually got.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import docker.errors
import requests
from docker.models.containers import Container

from shipway.backends.docker import (
    admin,
    caddy,
    caddy_canary,
    container_logs,
    drift,
    https_pool,
    labels,
    render,
)
from shipway.backends.docker.connection import HostConnection
from shipway.backends.docker.edge import edge
from shipway.backends.docker.records import read_tree, read_tree_of
from shipway.backends.docker.state import name_of, tags_of
from shipway.backends.docker.volumes import DockerVolumes
from shipway.backends.imagemeta import classify, repo_digest
from shipway.backends.protocol import ProcessStatus, ResolvedImage
from shipway.backends.registry import insecure_registries, lookup
from shipway.errors import BackendError, InputError, RegistryLookupFailed
from shipway.plan.model import ApplyObject, Observed, ObservedUnit, Plan, UnitState
from shipway.release import history
from shipway.release.artifact import Artifact, Unit, digest_of
from shipway.release.model import Release
from shipway.spec.model import App, Target


def _unit_state(status: str) -> UnitState:
    """A container's Docker status, as the plan compares states."""
    if status in ("running", "restarting"):
        return "running"
    if status == "created":
        return "created"
    return "stopped"


class DockerReads(DockerVolumes):
    """resolve_image, observe, read_records, status, diff, logs, live_digest."""

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
        self._per_slot = {}
        found = self._each_host(self._observe_host)
        units: list[ObservedUnit] = []
        self.drift = {}
        for name in (h.name for h in self.host_addresses):
            for unit, reasons in found[name]:
                units.append(unit)
                if reasons:
                    self.drift[unit.key] = reasons
        return Observed.of(units)

    def _observe_host(
        self, conn: HostConnection, whole: bool = True
    ) -> list[tuple[ObservedUnit, list[str]]]:
        """Every unit of the slot on one host; not ``whole``: its app containers only (and
        the files they mount, which their drift depends on), as ``status`` counts them —
        without the proxy's files, its inspection or the volumes' list."""
        host = conn.name
        out: list[tuple[ObservedUnit, list[str]]] = []
        with edge(f"host {host}: observe"), ThreadPoolExecutor(max_workers=1) as early:
            client = conn.client()
            # the shared proxy's files (the longest read) by its name, beside the list calls
            proxy_name = labels.shared_proxy(self.settings.proxy_port)
            proxy_files = (
                early.submit(read_tree_of, client, proxy_name, caddy.CONFIG_DIR) if whole else None
            )
            if whole:
                out += [(unit, []) for unit in self._observe_volumes(client, host)]
            containers = self._labelled(client, sparse=True)
            for c in containers:
                key = tags_of(c).get(labels.KEY)
                if key:
                    self._listed[(host, key)] = c
            files_reasons: dict[str, list[str]] = {}
            for c in containers:
                if tags_of(c).get(labels.KIND) != labels.FILES:
                    continue
                body, reasons = drift.body_of(tags_of(c))
                if body is not None:
                    content = json.loads(tags_of(c).get(labels.CONTENT) or "{}")
                    actual = read_tree(c, "/files")
                    reasons += drift.files(actual, body, content, str(body.get("volume")))
                    files_reasons[str(body.get("volume"))] = reasons
                out.append(self._observed(c, "files", 0, reasons, host, state="present"))
            kinds = (labels.APP_CONTAINER, labels.PROXY) if whole else (labels.APP_CONTAINER,)
            for c in containers:
                kind = tags_of(c).get(labels.KIND)
                if kind not in kinds:
                    continue
                c = client.containers.get(str(c.id))  # its whole configuration, for drift
                body, reasons = drift.body_of(tags_of(c))
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
                if kind == labels.PROXY:  # this slot's own, of before the shared proxy
                    self._per_slot[host] = name_of(c)  # the shared proxy is not yet its
                    tree = read_tree(c, caddy.CONFIG_DIR)
                    routes = caddy.parse_routes(tree)
                    out += self._observe_routes(routes, tree, body or {}, str(c.id), host)
                out.append(self._observed(c, unit_kind, phase, reasons, host))
            if proxy_files is not None:
                out += self._observe_shared(client, proxy_name, proxy_files.result(), host)
        return out

    def _uses(self, tree: Mapping[str, tuple[bytes, int]]) -> bool:
        """Whether this slot uses the shared proxy whose files these are."""
        return labels.owner(self.app.name, self.slot.name) in caddy.parse_parts(tree)

    def _observe_shared(
        self,
        client: docker.DockerClient,
        name: str,
        tree: dict[str, tuple[bytes, int]],
        host: str,
    ) -> list[tuple[ObservedUnit, list[str]]]:
        """The shared proxy on this slot's port, and this slot's routes in it — once this
        slot uses it (before, it is not this slot's to update or remove)."""
        if not self._uses(tree) or host in self._per_slot:
            return []
        try:
            proxy = client.containers.get(name)
        except docker.errors.NotFound:
            return []
        body, reasons = drift.body_of(tags_of(proxy))
        if body is not None:
            reasons += drift.container(proxy.attrs, body)
        out = [self._observed(proxy, "proxy", 0, reasons, host, digest=self._as_plain(body))]
        parts = caddy.parse_parts(tree)
        mine = parts.get(labels.owner(self.app.name, self.slot.name), {})
        return out + self._observe_routes(
            mine, tree, body or {}, str(proxy.id), host, caddy.flatten(parts)
        )

    def _as_plain(self, body: Mapping[str, Any] | None) -> str | None:
        """A shared proxy that serves HTTPS is as good as the plain one a slot without
        HTTPS routes asks for: the digest of that one (None: its own)."""
        if not body or not body.get("tls_port") or any(r.tls for r in self.app.routes):
            return None
        plain = {k: v for k, v in body.items() if k not in ("tls_port", "data_volume")}
        return Unit(render.proxy_key(""), "proxy", plain).digest

    def _observed(
        self,
        c: Container,
        kind: str,
        phase: int,
        reasons: list[str],
        host: str,
        state: UnitState | None = None,
        digest: str | None = None,
    ) -> tuple[ObservedUnit, list[str]]:
        digest = digest or tags_of(c).get(labels.DIGEST) or ""
        unit = ObservedUnit(
            key=tags_of(c).get(labels.KEY) or drift.unknown_key(name_of(c), host),
            kind=kind,
            digest=drift.drifted(digest, reasons) if reasons else digest,
            state=state or _unit_state(c.status),
            process=tags_of(c).get(labels.PROCESS),
            host=host,
            phase=phase,
        )
        return unit, reasons

    def _observe_routes(
        self,
        routes: Mapping[str, Any],
        tree: Mapping[str, tuple[bytes, int]],
        body: Mapping[str, Any],
        proxy_id: str,
        host: str,
        served: Mapping[str, Any] | None = None,
    ) -> list[tuple[ObservedUnit, list[str]]]:
        """A proxy's route units of this slot (``routes``), from its files (``tree``);
        ``served``: every route the config is composed from (a shared proxy's: every
        slot's), else ``routes``."""
        # a shared proxy's pool (none in a proxy configured before it, or per slot)
        pool = caddy.pool_of(tree) if served is not None and caddy.POOL_FILE in tree else None
        held = pool.secure if pool is not None else None  # its HTTPS names' entries
        served = routes if served is None else served
        config = tree.get(caddy.CONFIG_FILE, (b"", 0))[0]
        identity, tokens = admin.identity(proxy_id), caddy.tokens_of(tree)
        # up to date: composed for this proxy, or as before a canary could split its
        # entries, before its pool or its admin socket (until a reload); composed only as
        # far as needed
        stale = bool(routes) and all(
            config != caddy.dumps(caddy.compose(served, body, *how))
            for how in (
                (identity, tokens, pool),
                (identity, tokens, pool, False),
                (identity, tokens),
                (None,),
            )
        )
        stamp = tree.get(caddy.LOADED_FILE)
        unloaded = bool(routes) and stamp is not None and stamp[0] != caddy.loaded(config)
        owner = labels.owner(self.app.name, self.slot.name)
        out = []
        for key, fragment in sorted(routes.items()):
            reasons = []
            digest = str(fragment.get("digest", ""))
            if digest_of(fragment.get("body")) != digest:
                reasons.append("its entry in the proxy's files was changed")
            if stale:
                reasons.append("the proxy's caddy.json no longer matches its routes")
            if unloaded:
                reasons.append("the proxy has not loaded its caddy.json")
            group = fragment.get("group")
            body = fragment.get("body") or {}
            if pool is not None and caddy.pooled(fragment):
                written = caddy.pool_aliases(f"{owner} {key}", fragment, tree)
                # an entry per plain host name, or the catch-all entry (one) without any
                if len(written) != (len(caddy.plain_names(body)) or 1) or set(written) != {group}:
                    reasons.append("its pool entries name other containers than its entry")
            if held and (written := https_pool.aliases(f"{owner} {key}", held, tree)):
                names = https_pool.names_of(body.get("tls") or {})
                if len(written) != len(names) or set(written) != {group}:
                    reasons.append("its secure entries name other containers than its entry")
            if group and caddy.in_config(f"{owner} {key}", fragment, pool):
                upstream = tree.get(caddy.upstream_file(f"{owner} {key}"), (b"", 0))[0]
                if upstream.decode(errors="replace").strip() != group:
                    reasons.append("its upstream file names other containers than its entry")
            reasons += caddy_canary.drift_of(fragment)
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

    def read_records(self, target: Target) -> list[Release]:
        self._serves(target)
        with self._records("read") as store:
            return store.read()

    def status(self, target: Target) -> list[ProcessStatus]:
        self._serves(target)
        deployed = history.deployed(self.read_records(target))
        if deployed is None:
            return []
        wanted: dict[str, list[Unit]] = {}
        for unit in deployed.artifact:
            if unit.kind == "container" and unit.process:
                wanted.setdefault(unit.process, []).append(unit)
        # the app containers alone: the routes, the proxy and the volumes are not counted
        found = self._each_host(lambda conn: self._observe_host(conn, whole=False))
        seen_units = {u.key: u for h in self.host_addresses for u, _ in found[h.name]}
        out = []
        for process, units in wanted.items():
            per_host: dict[str, list[int]] = {}
            for unit in units:
                counts = per_host.setdefault(unit.host or "?", [0, 0])
                counts[1] += 1
                seen = seen_units.get(unit.key)
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
            port = self.settings.proxy_port
            if s.kind == "proxy" and s.action == "update" and host in self._per_slot:
                notes.append(
                    f"move proxy: per-slot proxy {self._per_slot[host]} → shared proxy "
                    f"{labels.shared_proxy(port)} (its routes moved over; NOT zero-downtime: "
                    f"port {port} refuses connections while the shared proxy starts)"
                )
            elif s.kind == "proxy" and s.action == "update" and routed:
                notes.append(
                    f"NOT zero-downtime: the shared proxy on {host} is recreated (every "
                    f"slot's routes on it); port {port} refuses connections until it is up"
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
                text = container_logs.text(c, lines)
            mask = container_logs.masker(c)
            out += [f"{self._prefix(host, c)} {mask(line)}" for line in text.splitlines()]
        return out

    def _follow(self, picked: list[tuple[str, Container]], lines: int) -> Iterator[str]:
        q: queue.Queue[str | None] = queue.Queue()

        def pump(host: str, c: Container) -> None:
            mask, prefix = container_logs.masker(c), self._prefix(host, c)
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
