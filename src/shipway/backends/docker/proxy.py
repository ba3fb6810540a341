"""The proxy on each host and the routes it serves: the switch that moves traffic.

One Caddy container per host listens on the slot's proxy port; its routes (a separate,
later unit than the containers they name) are written into its volume and loaded by a
graceful reload (through Caddy's admin socket where it can be reached, :mod:`.admin`, else
an ``exec`` of ``caddy reload``), so requests in flight finish where they started. What must never
happen: a route written that the running proxy does not serve (a refused reload puts the
previous files back), or traffic moved to a container before its health gate passed (the
plan orders the route after the wait). Each switch stamps the host's drain clock.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

import docker
import docker.errors
import docker.types
from docker.models.containers import Container

from shipway.backends.docker import admin, caddy, drift, labels
from shipway.backends.docker.containers import (
    ContainerSpec,
    create,
    ensure_image,
    ensure_network,
    remove,
)
from shipway.backends.docker.edge import explain
from shipway.backends.docker.records import read_tree, tar_of
from shipway.backends.docker.retrying import transient_call
from shipway.backends.docker.state import DockerState
from shipway.errors import BackendError
from shipway.plan.model import Remove
from shipway.release.artifact import Unit
from shipway.spec.secrets import Secret


class DockerProxy(DockerState):
    """Applying a host's proxy and its route units; dropping a route."""

    def _apply_proxy(
        self, client: docker.DockerClient, unit: Unit, action: str, secrets: Mapping[str, Secret]
    ) -> str:
        body = unit.body
        name = str(body["name"])
        existing = self._get(client, name)
        if action == "start" and existing is not None:
            existing.start()
            return f"started proxy {name}"
        ensure_network(client, self.app.name, self.slot.name, str(body["network"]))
        ensure_image(client, str(body["image"]))  # before the old proxy goes
        if existing is not None:
            remove(existing, 10)
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
                labels=labels.of_unit(self.app.name, self.slot.name, labels.PROXY, unit),
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
        routes = caddy.parse_routes(read_tree(container, config_dir))
        container.put_archive(config_dir, tar_of(_config_files(routes, body, str(container.id))))
        try:
            container.start()
        except docker.errors.APIError as exc:
            raise BackendError(
                f"the proxy {name} did not start: {explain(exc)} (hint: is port "
                f"{body['port']} free on the host? set proxy_port in the slot)"
            ) from exc
        verb = "replaced" if action == "update" else "started"
        return f"{verb} proxy {name} on port {body['port']}"

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
        host: str,
        proxy: Container,
        proxy_body: Mapping[str, Any],
        change: Callable[[dict[str, Any]], None],
    ) -> None:
        """Change the proxy's routes and reload it gracefully; put the previous files back
        if the reload fails, so what is written is always what runs. The files are read
        from the proxy unless this operation has them already (observed, or written by it
        since, under the slot's lock)."""
        config_dir = str(proxy_body.get("config_dir", caddy.CONFIG_DIR))
        known = (str(proxy.id), config_dir)
        tree = self._proxy_files.pop(known, None)
        if tree is None:
            tree = read_tree(proxy, config_dir)
        routes = caddy.parse_routes(tree)
        change(routes)
        files = _config_files(routes, proxy_body, str(proxy.id))
        proxy.put_archive(config_dir, tar_of(files))
        running = tree.get(caddy.CONFIG_FILE, (b"", 0))[0]  # what the proxy runs now
        refused = self._reload(host, proxy, config_dir, files[caddy.CONFIG_FILE][0], running)
        if refused is not None:
            previous = {
                k: v for k, v in tree.items() if k in (caddy.ROUTES_FILE, caddy.CONFIG_FILE)
            }
            if previous:
                proxy.put_archive(config_dir, tar_of(previous))
            raise BackendError(f"the proxy {proxy.name} refused its new configuration {refused}")
        self._proxy_files[known] = {**tree, **files}

    def _reload(
        self, host: str, proxy: Container, config_dir: str, config: bytes, running: bytes
    ) -> str | None:
        """Have the proxy load the files just written: through its admin socket when it can
        be reached and is this proxy's, else by ``exec`` (posting where the ``running``
        config has its admin API, which a config composed before the socket has elsewhere).
        None when loaded, else why not."""
        path = admin.host_socket(proxy, config_dir)
        if path is not None:
            try:
                admin.load(self._conn(host), path, str(proxy.id), config)
                return None
            except admin.Refused as exc:
                return f"(admin API): {exc}"
            except admin.Unusable:
                pass  # not reachable from here, or not known to have loaded: the exec
        # a reload of the same files is safe to run twice: one whose exec was cut off
        # (its output lost with it) is run again whole
        command = ["caddy", "reload", "--config", f"{config_dir}/{caddy.CONFIG_FILE}", "--force"]
        listen = caddy.admin_listen(running)
        if listen:
            command += ["--address", listen]
        result = self.retry.call(lambda: proxy.exec_run(command), transient_call)
        if result.exit_code == 0:
            return None
        raw = result.output if isinstance(result.output, bytes) else b""
        output = raw.decode(errors="replace").strip().splitlines()
        return f"(exit {result.exit_code}): " + (output[-1][:300] if output else "no output")

    def _apply_route(
        self, client: docker.DockerClient, unit: Unit, action: str, secrets: Mapping[str, Secret]
    ) -> str:
        proxy, proxy_body = self._proxy_for(client, str(unit.body["proxy"]))

        def put(routes: dict[str, Any]) -> None:
            routes[unit.key] = {"key": unit.key, "digest": unit.digest, "body": dict(unit.body)}

        self._reconfigure(unit.host or "", proxy, proxy_body, put)
        self._switched_at[unit.host or ""] = time.monotonic()
        targets = ", ".join(str(u).split(":")[0] for u in unit.body["upstreams"])
        where = ", ".join(unit.body.get("hosts") or []) or "all requests"
        return f"switched {where} to {targets}"

    def _drop_route(self, client: docker.DockerClient, step: Remove) -> str:
        """Take a route out of the host's proxy (gracefully, as a switch: the drain of the
        containers it served starts now)."""
        proxy = next(iter(self._labelled(client, labels.PROXY)), None)
        if proxy is None or proxy.status != "running":
            return f"{step.unit} already gone (no running proxy)"
        body, _ = drift.body_of(proxy.labels)
        self._reconfigure(
            step.host or "", proxy, body or {}, lambda routes: routes.pop(step.unit, None)
        )
        self._switched_at[step.host or ""] = time.monotonic()
        return f"dropped route {step.unit}"


def _config_files(
    routes: Mapping[str, Any], proxy_body: Mapping[str, Any], proxy_id: str
) -> dict[str, tuple[bytes, int]]:
    """The proxy's two files for these routes: the routes themselves and Caddy's config."""
    config = caddy.compose(routes, proxy_body, admin.identity(proxy_id))
    return {
        caddy.ROUTES_FILE: (caddy.dumps(dict(routes)), 0o644),
        caddy.CONFIG_FILE: (caddy.dumps(config), 0o644),
    }


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
