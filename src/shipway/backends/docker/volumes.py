"""The app's data on the Docker hosts: one named, labelled volume per app, slot and volume
on each host that runs a process mounting it (Kamal's named volumes are the model), the same
name in every release, so each new container mounts what the old one wrote.

What must never happen: a data volume removed by a deploy, rollback, restart or ``stop``
(no plan holds its removal, ``stop`` passes it by, and Docker refuses to remove a volume a
container uses), or a volume someone made by hand under shipway's name replaced: it is used
as it is, and said so.

Volumes are not shared between hosts: a process on two hosts has two volumes, one each,
and the plan says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import docker
import docker.errors

from shipway.backends.docker import labels
from shipway.backends.docker.connection import HostConnection
from shipway.backends.docker.edge import edge
from shipway.backends.docker.state import DockerState
from shipway.backends.protocol import Leftover
from shipway.backends.volume_status import VolumeStatus, human_bytes
from shipway.plan.model import ObservedUnit, Plan
from shipway.release.artifact import Unit
from shipway.spec.model import App, Slot, Target
from shipway.spec.secrets import Secret


def volume_sizes(client: docker.DockerClient) -> dict[str, int]:
    """Volume name -> bytes on disk, from the engine's disk usage (``docker system df -v``);
    -1 (the engine could not tell) is left out."""
    usage = client.api.df().get("Volumes") or []
    out: dict[str, int] = {}
    for v in usage:
        size = (v.get("UsageData") or {}).get("Size")
        if isinstance(size, int) and size >= 0:
            out[str(v.get("Name"))] = size
    return out


def _trap(app: App, volume: str, hosts: int, host: str | None) -> str:
    command = " ".join(app.release_command or ())
    where = f"on {host}" if host else "on the first host"
    return (
        f"warning: the release command ({command}) runs once, {where}, and writes volume "
        f"{volume} there only: the other {hosts - 1} host(s) keep their own copy of {volume} "
        "and never see what it did (a database migrated on one host, not on the others). "
        'A database every host shares is an accessory: [accessories.db] kind = "postgres", '
        'version = "15", and DATABASE_URL = { from_accessory = "db" } in [secrets] '
        "(README, Accessories)"
    )


class DockerVolumes(DockerState):
    """Data volumes made, observed, listed and (by destroy) deleted."""

    def _apply_volume(
        self,
        client: docker.DockerClient,
        unit: Unit,
        action: str,
        secrets: Mapping[str, Secret],
    ) -> str:
        name = str(unit.body["volume"])
        try:
            found = client.volumes.get(name)
        except docker.errors.NotFound:
            tags = {
                **labels.of_unit(self.app.name, self.slot.name, labels.VOLUME, unit),
                labels.VOLUME_NAME: str(unit.body["name"]),
            }
            client.volumes.create(name, driver="local", labels=tags)
            return f"created volume {name}"
        if (found.attrs.get("Labels") or {}).get(labels.KEY) == unit.key:
            return f"kept volume {name}"
        return f"volume {name} exists (not made by shipway): used as it is"

    def _observe_volumes(self, client: docker.DockerClient, host: str) -> list[ObservedUnit]:
        out = []
        for name, v in sorted(self._data_volumes(client).items()):
            tags: dict[str, str] = v.attrs.get("Labels") or {}
            out.append(
                ObservedUnit(
                    key=tags.get(labels.KEY) or f"volume/{name}@{host}",
                    kind="volume",
                    digest=tags.get(labels.DIGEST),
                    host=host,
                    phase=0,
                )
            )
        return out

    def _data_volumes(self, client: docker.DockerClient) -> dict[str, Any]:
        """Volume name -> the volume, for this slot's data volumes on one host."""
        found = client.volumes.list(
            filters=labels.slot_filter(self.app.name, self.slot.name, labels.VOLUME)
        )
        return {str(v.name): v for v in found}

    # -- the protocol's Volumes ----------------------------------------------------------

    def volume_notes(self, app: App, slot: Slot, plan: Plan) -> list[str]:
        """Pure: a volume used on several hosts is one volume on each of them — and the
        release command, run once on one host, writes that host's only (the multi-host
        trap: a database migrated on one host, the others answering from their own copy)."""
        notes = []
        units = plan.release.artifact if plan.release is not None else ()
        first = next((u for u in units if u.kind == "container"), None)
        for name, volume in sorted(app.volumes.items()):
            hosts = [
                h.url
                for h in slot.hosts
                if any(h.runs(p) for p in app.processes if volume.mounted_by(p))
            ]
            if len(hosts) < 2:
                continue
            notes.append(
                f"note: volume {name} is a separate Docker volume on each of its "
                f"{len(hosts)} hosts: they do not share its data"
            )
            runs_it = first is None or first.process is None or volume.mounted_by(first.process)
            if app.release_command and runs_it:
                notes.append(_trap(app, name, len(hosts), first.host if first else None))
        return notes

    def volumes(self, target: Target) -> list[VolumeStatus]:
        self._serves(target)
        found = self._each_host(self._volumes_on)
        return [v for host in self.host_addresses for v in found[host.name]]

    def _volumes_on(self, conn: HostConnection) -> list[VolumeStatus]:
        host = conn.address
        wanted = {
            name
            for name, v in self.app.volumes.items()
            if any(host.runs(p) and v.mounted_by(p) for p in self.app.processes)
        }
        with edge(f"host {conn.name}: list volumes"):
            client = conn.client()
            found = self._data_volumes(client)
            sizes = volume_sizes(client) if found else {}
        by_name = {
            str((v.attrs.get("Labels") or {}).get(labels.VOLUME_NAME) or n): n
            for n, v in found.items()
        }
        out = []
        for name in sorted(wanted | set(by_name)):
            docker_name = by_name.get(name, labels.data_volume(self.app.name, self.slot.name, name))
            out.append(
                VolumeStatus(
                    name=name,
                    where=docker_name,
                    host=conn.name,
                    state="present" if name in by_name else "not created yet",
                    size_bytes=sizes.get(docker_name),
                    declared=name in self.app.volumes,
                )
            )
        return out

    def _volume_leftovers(self, client: docker.DockerClient, host: str) -> list[Leftover]:
        found = self._data_volumes(client)
        sizes = volume_sizes(client) if found else {}
        return [
            Leftover(
                "volume",
                f"{name} on {host}" + (f" ({human_bytes(sizes[name])})" if name in sizes else ""),
                data=True,
            )
            for name in sorted(found)
        ]
