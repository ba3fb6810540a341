"""The steps of a rolling plan on the Docker hosts, one at a time, and the records' writes.

Each mutation starts with the one preamble (:meth:`~shipway.backends.guarded.Guarded._guard`)
and runs inside :func:`~shipway.backends.docker.edge.edge`. What must never happen here:

* traffic moving to a container that did not pass its health gate — containers start
  beside the old ones (:mod:`.health` gates them) and the proxy's route, a separate later
  unit (:mod:`.proxy`), is what switches;
* an old container stopped while requests may still be on their way to it — its removal
  waits (:mod:`.drain`) until no connection to it is open, or until ``drain_timeout`` has
  passed since its host's proxy was switched;
* a secret value in an error — an engine's message is masked with this release's secrets.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping, Sequence

import docker
import docker.errors
from docker.models.containers import Container

from shipway.backends import retry
from shipway.backends.docker import drift, labels
from shipway.backends.docker.connection import HostConnection
from shipway.backends.docker.containers import (
    ContainerSpec,
    create,
    data_mounts,
    ensure_image,
    ensure_network,
    file_mounts,
    remove,
)
from shipway.backends.docker.drain import drain
from shipway.backends.docker.edge import edge, explain
from shipway.backends.docker.health import Gate, events, watched_crash
from shipway.backends.docker.proxy import DockerProxy
from shipway.backends.docker.records import holder_made, tar_of
from shipway.backends.docker.state import name_of, tags_of
from shipway.backends.docker.volumes import DockerVolumes
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.errors import BackendError, CleanupFailed
from shipway.guard import Clearance
from shipway.plan.model import Remove, WaitRollout
from shipway.release.artifact import Artifact, Unit
from shipway.release.model import Release
from shipway.spec.model import Target
from shipway.spec.secrets import Secret, redact, reveal

#: the longest a gate waits for an event before it looks again all the same
QUIET = 1.0


class DockerSteps(DockerProxy, DockerVolumes):
    """write_records, delete_records, apply, remove, wait, stop (the proxy's and the routes'
    units are applied by :class:`~shipway.backends.docker.proxy.DockerProxy`)."""

    def write_records(
        self, clearance: Clearance, target: Target, records: Sequence[Release]
    ) -> None:
        self._guard(clearance, target)
        with self._records("write") as store:
            store.write(records)

    def delete_records(
        self, clearance: Clearance, target: Target, revisions: Sequence[int]
    ) -> None:
        self._guard(clearance, target)
        with self._records("delete") as store:
            store.delete(revisions)

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
        self._listed.pop((unit.host or "", unit.key), None)  # changed now: list it again
        self._forget_looks()  # what proxies' files say: read again
        conn = self._conn(unit.host)
        client = self._client(unit.host)
        appliers = {
            "volume": self._apply_volume,
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
            tags = {
                **labels.of_unit(self.app.name, self.slot.name, labels.FILES, unit),
                labels.CONTENT: json.dumps(content, sort_keys=True),
            }
            holder = holder_made(
                client,
                lambda: client.containers.create(
                    labels.HOLDER_IMAGE,
                    name=volume,
                    labels=tags,
                    volumes={volume: {"bind": "/files", "mode": "rw"}},
                ),
            )
        holder.put_archive(
            "/files", tar_of({p: (text.encode(), mode) for p, (text, mode) in files.items()})
        )
        verb = "wrote" if action == "update" else "created"
        return f"{verb} {len(files)} config files in volume {volume}"

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
        ensure_network(client, self.app.name, self.slot.name, str(body["network"]))
        ensure_image(client, str(body["image"]))
        if existing is not None:
            remove(existing, int(body.get("stop_timeout", 10)))
        env = {k: str(v) for k, v in reveal(body["env"], secrets).items()}
        resources = body.get("resources") or {}
        alias = self._release_alias(body)  # what the proxy resolves to this release's replicas
        container = create(
            client,
            ContainerSpec(
                image=str(body["image"]),
                name=name,
                env=env,
                labels={
                    **labels.of_unit(self.app.name, self.slot.name, labels.APP_CONTAINER, unit),
                    **body.get("labels", {}),
                    labels.ENV_HASH: drift.env_hash(name, env),
                    **({labels.ALIAS: alias[0]} if alias else {}),
                },
                entrypoint=body.get("entrypoint"),
                command=body.get("args"),
                network=str(body["network"]),
                aliases=[*(body.get("aliases") or []), *alias],
                mounts=file_mounts(client, body) + data_mounts(body),
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
                f"created container {name} but it did not start: {explain(exc)} (it is kept, "
                "state 'created', so the next run starts it instead of creating it twice)"
            ) from exc
        verb = "replaced" if action == "update" else "started"
        return f"{verb} {name} ({container.short_id})"

    # -- removing ------------------------------------------------------------------------

    def remove(
        self, clearance: Clearance, target: Target, step: Remove, reporter: Reporter
    ) -> None:
        self._guard(clearance, target)
        self._forget_looks()  # what proxies' files say: read again
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
            return self._drop_route(client, step)
        if step.kind == "proxy" and not step.unit.startswith(drift.UNKNOWN):
            # the shared proxy: this slot leaves it; it goes when no other slot uses it
            done = self._leave_proxies(
                client, step.host or "", labels.shared_proxy(self.settings.proxy_port)
            )
            return "; ".join(done) or f"{step.unit}: this slot no longer uses the shared proxy"
        if step.kind == "volume":  # no plan holds one (invariant 11): refused if one did
            raise BackendError(f"{step.unit} is data: only shipway destroy --volumes deletes it")
        c = self._unit_container(client, step)
        if c is None:
            return f"{step.unit} already gone"
        body, _ = drift.body_of(tags_of(c))
        body = body or {}
        if step.kind == "container":
            switched = self._switched_at.get(step.host or "")
            if body.get("port") and switched is not None and c.status == "running":
                until = switched + self.settings.drain
                drain(c, int(body["port"]), until, str(step.host), reporter, self.retry)
            remove(c, int(body.get("stop_timeout", 10)))
            return f"stopped and removed {name_of(c)}"
        if step.kind == "proxy":
            remove(c, 10)
            with contextlib.suppress(docker.errors.NotFound):
                client.volumes.get(str(body.get("volume"))).remove()
            return f"removed proxy {name_of(c)}"
        if step.kind == "files":
            c.remove(force=True)
            with contextlib.suppress(docker.errors.NotFound):
                client.volumes.get(str(body.get("volume"))).remove()
            return f"removed files volume {body.get('volume')}"
        c.remove(force=True)
        return f"removed {name_of(c)}"

    def _unit_container(self, client: docker.DockerClient, step: Remove) -> Container | None:
        """The container a Remove step names: by its unit key label, or — for one labelled
        as this slot's but carrying no key (observed as ``unknown/<name>@<host>``) — by its
        name, still labelled as this slot's and still keyless. As the list gives it (sparse:
        labels, state, names), not inspected: by the observation's list when no step has
        applied that key since."""
        listed = self._listed.pop((step.host or "", step.unit), None)
        if listed is not None:
            return listed
        found = self._by_key(client, step.unit)
        if found is not None or not step.unit.startswith(drift.UNKNOWN):
            return found
        name = step.unit.removeprefix(drift.UNKNOWN).rsplit("@", 1)[0]
        c = self._get(client, name)
        if c is None:
            return None
        tags = c.labels
        ours = (tags.get(labels.APP), tags.get(labels.SLOT)) == (self.app.name, self.slot.name)
        return c if ours and labels.KEY not in tags else None

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
        gates = [Gate(unit) for unit in units]
        # gated after a switch this wait comes before: a crash of one stops it here
        watched = [artifact.get(k) for k in step.watch]
        names = [g.name for g in gates] + [str(u.body["name"]) for u in watched]
        with (
            edge(f"host {conn.name}: wait for {step.process}"),
            retry.within(deadline),
            events(conn.client(), names) as changes,
        ):
            client = conn.client()
            touched = set(names)  # the first look reads every container
            while True:
                self._still_ours(target)  # a lost lock ends the wait, not only the next step
                failure = watched_crash(client, watched, touched)
                if failure is not None:
                    return self._failed(step, failure, reporter)
                now = time.monotonic()
                for gate in gates:
                    if gate.ready:
                        continue
                    inspect = gate.name in touched or gate.due is None
                    if inspect or (gate.due is not None and gate.due <= now):
                        failure = gate.look(client, conn, step.process, inspect)
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
                waiting = [g.due for g in gates if not g.ready and g.due is not None]
                until = min([*waiting, time.monotonic() + QUIET, deadline])
                touched = changes.wait(until - time.monotonic())

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

    def stop(self, clearance: Clearance, target: Target, reporter: Reporter) -> None:
        """Remove what runs (its routes from the shared proxies, containers, a proxy of its
        own of before, files volumes); the records, the lock and the data volumes stay, so
        the deployed release is still the anchor. A shared proxy no other slot uses goes."""
        self._guard(clearance, target)

        def stop_host(conn: HostConnection) -> list[str]:
            done: list[str] = []
            with edge(f"host {conn.name}: stop"):
                client = conn.client()
                # its routes out of the shared proxy first: its names answer 404, not 502
                for line in self._leave_proxies(client, conn.name):
                    reporter.line(f"host {conn.name}: {line}")
                kinds = (labels.PROXY, labels.APP_CONTAINER, labels.FILES, labels.RELEASE_COMMAND)
                for c in self._labelled(client, sparse=True):  # labels and state: no inspect
                    if tags_of(c).get(labels.KIND) in kinds:
                        remove(c, 10)
                        done.append(name_of(c))
                for v in client.volumes.list(
                    filters=labels.slot_filter(self.app.name, self.slot.name)
                ):
                    if (v.attrs.get("Labels") or {}).get(labels.KIND) in labels.DATA_KINDS:
                        continue  # the app's and its accessories' data: kept (invariant 11)
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
