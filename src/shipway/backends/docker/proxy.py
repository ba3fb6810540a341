"""The proxy on each host and the routes it serves: the switch that moves traffic.

One Caddy container per host and port (``shipway-proxy-<port>``, :mod:`.shared`) is shared
by every app and slot serving there and belongs to none: the first slot that needs it
creates it, each slot adds and removes only its own routes (its part of the proxy's files,
under the proxy's lock), and it is removed with the last routes on it. The routes (a
separate, later unit than the containers they name) are written into its volume. A switch
of a route to another release's containers rewrites the route's upstream file only (the
release's network alias, :mod:`.caddy`): Caddy reads it at each request, so no reload runs
and no request of any app on the proxy is lost to one. A change of the config itself (a route
added or removed, its host names, TLS, a canary) is loaded by a graceful reload (through
Caddy's admin socket where it can be reached, :mod:`.admin`, else an ``exec`` of ``caddy
reload``), so requests in flight finish where they started.
What must never happen: another slot's routes changed or lost; a route written that the
running proxy does not serve (a refused reload puts the previous files back); or traffic
moved to a container before its health gate passed (the plan orders the route after the
wait). Each switch stamps the host's drain clock.

A per-slot proxy of before (``shipway-<app>-<slot>-proxy``) is moved over by the slot's
next deploy: its ``proxy@host`` unit is updated, which stops it, frees its port and starts
the shared proxy there with its routes (``shipway plan`` says so, :mod:`.reads`).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from secrets import token_urlsafe
from typing import Any

import docker
import docker.errors
import docker.types
from docker.models.containers import Container

from shipway.backends.docker import (
    admin,
    caddy,
    caddy_version,
    drift,
    https,
    labels,
    render,
    shared,
)
from shipway.backends.docker.containers import (
    ContainerSpec,
    create,
    ensure_image,
    ensure_network,
    half_removed,
    remove,
)
from shipway.backends.docker.edge import explain
from shipway.backends.docker.execs import run_in
from shipway.backends.docker.records import put_tree, read_tree, read_tree_of
from shipway.backends.docker.retrying import transient_call
from shipway.backends.docker.state import DockerState, name_of, tags_of
from shipway.errors import BackendError
from shipway.plan.model import Remove
from shipway.release.artifact import Unit
from shipway.spec.secrets import Secret, placeholder

#: how long a host that gets its certificates from the issuer waits for the issuer's proxy
#: (made by the same deploy, at the same time) to have its share token
TOKEN_WAIT = 60.0

#: what changes one slot's part of a shared proxy's routes, in place
Change = Callable[[dict[str, Any]], None]


class DockerProxy(DockerState):
    """Applying a host's shared proxy and this slot's route units; dropping a route;
    leaving the shared proxy (stop, destroy)."""

    @property
    def _owner(self) -> str:
        return labels.owner(self.app.name, self.slot.name)

    @property
    def _network(self) -> str:
        """This slot's network: the shared proxy joins it while it routes to the slot."""
        return labels.network(self.app.name, self.slot.name)

    def _apply_proxy(
        self, client: docker.DockerClient, unit: Unit, action: str, secrets: Mapping[str, Secret]
    ) -> str:
        # a release rendered before the shared proxy (a rollback to one) asks for the
        # shared proxy on its port and image all the same
        body = dict(unit.body)
        if not body.get("shared"):
            body = render.shared_proxy_body(str(body["image"]), int(body["port"]))
        port, host = int(body["port"]), unit.host or self.primary
        image = str(body["image"])
        old_caddy = caddy_version.too_old(ensure_image(client, image))  # before anything old goes
        if old_caddy is not None:
            raise BackendError(caddy_version.refusal(image, old_caddy))
        shared.ensure_network(client)
        with shared.locked(client, port, host):
            old = self._per_slot_proxy(client)
            existing = self._get(client, str(body["name"]))
            if existing is not None and not half_removed(existing):  # else: made anew
                theirs, _ = drift.body_of(existing.labels)
                if (theirs or {}).get("tls_port") and not body.get("tls_port"):
                    body = dict(theirs or {})  # it serves HTTPS too: as good for this slot
                reasons = drift.container(existing.attrs, body)
                if (theirs or {}).get("tls_port") != body.get("tls_port"):
                    # its published ports are not in its container's config: a slot whose
                    # HTTPS names it cannot serve would be "deployed" and never served
                    had = (theirs or {}).get("tls_port") or "no HTTPS port"
                    want = body["tls_port"]
                    reasons.append(f"it publishes {had}, this slot's HTTPS needs {want}")
                if not reasons:
                    return self._use_proxy(host, client, existing, old)
                self._refuse_replacing(existing, body, reasons)
            return self._make_proxy(client, body, unit, existing, old)

    def _refuse_replacing(
        self, existing: Container, body: Mapping[str, Any], reasons: list[str]
    ) -> None:
        """A shared proxy that other slots route through is not replaced for one slot's
        wish (another image): it would drop their requests while it restarts."""
        others = sorted(
            o for o in caddy.parse_parts(read_tree(existing, caddy.CONFIG_DIR)) if o != self._owner
        )
        if not others:
            return
        raise BackendError(
            f"the shared proxy {existing.name} serves {', '.join(others)} too, and differs "
            f"from what slot {self.slot.name} asks ({'; '.join(reasons)}): replacing it would "
            "interrupt their requests (hint: give every slot on this port the same "
            "proxy_image and proxy_tls_port, or use another proxy_port; a proxy gets its HTTPS "
            "port when made for a slot with HTTPS routes)"
        )

    def _use_proxy(
        self, host: str, client: docker.DockerClient, proxy: Container, old: Container | None
    ) -> str:
        """The shared proxy as it is, this slot's from now on (the lock is held); this
        slot's own proxy of before, on another port, removed and its routes moved over."""
        if (drift.body_of(proxy.labels)[0] or {}).get("tls_port"):
            _ensure_token(proxy)
        started = proxy.status != "running"
        if started:
            proxy.start()
            proxy.reload()
        self._claim(proxy)
        if old is None:
            return f"{'started proxy' if started else 'uses proxy'} {proxy.name} (shared)"
        carried = caddy.parse_routes(read_tree(old, caddy.CONFIG_DIR))
        self._remove_per_slot(client, old)
        shared.join(client, proxy, self._network)
        self._rewrite(host, proxy, lambda routes: routes.update({**carried, **routes}))
        return f"moved proxy {old.name} → shared proxy {proxy.name}"

    def _remove_per_slot(self, client: docker.DockerClient, old: Container) -> None:
        remove(old, 10)
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            client.volumes.get(labels.proxy_volume(self.app.name, self.slot.name)).remove()

    def _claim(self, proxy: Container) -> None:
        """This slot's (empty) part in the shared proxy's files, unless it has one: the
        proxy is in use by this slot from now on (the lock is held)."""
        tree = read_tree(proxy, caddy.CONFIG_DIR)
        parts = caddy.parse_parts(tree)
        if self._owner in parts:
            return
        parts[self._owner] = {}
        put_tree(proxy, caddy.CONFIG_DIR, {caddy.PARTS_FILE: _parts_file(parts)})

    def _per_slot_proxy(self, client: docker.DockerClient) -> Container | None:
        """This slot's own proxy of before the shared one, if it is still there."""
        return next(iter(self._labelled(client, labels.PROXY)), None)

    def _make_proxy(
        self,
        client: docker.DockerClient,
        body: Mapping[str, Any],
        unit: Unit,
        existing: Container | None,
        old: Container | None,
    ) -> str:
        """(Re)create the shared proxy, its routes kept (they are in its volume), and, from
        this slot's per-slot proxy of before, this slot's routes moved over."""
        name, volume = str(body["name"]), str(body["volume"])
        config_dir = str(body.get("config_dir", caddy.CONFIG_DIR))
        carried = caddy.parse_routes(read_tree(old, caddy.CONFIG_DIR)) if old is not None else {}
        if existing is not None:
            remove(existing, 10)
        if old is not None:  # it holds the port: it goes first
            self._remove_per_slot(client, old)
        mounts = [docker.types.Mount(target=config_dir, source=volume, type="volume")]
        ports = {int(body["listen"]): int(body["port"])}
        try:  # a volume left by a proxy of before holds its routes: read below
            client.volumes.get(volume)
            fresh = False
        except docker.errors.NotFound:
            fresh = True  # made now: empty, nothing to read back from it
        for made in (volume, *([body["data_volume"]] if body.get("data_volume") else [])):
            if made == volume and not fresh:
                continue
            with contextlib.suppress(docker.errors.APIError):
                client.volumes.create(str(made), labels={labels.KIND: labels.PROXY})
        if body.get("data_volume"):  # Caddy's certificates and ACME account: kept
            mounts.append(
                docker.types.Mount(target=https.DATA_DIR, source=body["data_volume"], type="volume")
            )
            ports[https.TLS_LISTEN] = int(body["tls_port"])
        info = client.info()
        container = create(
            client,
            ContainerSpec(
                image=str(body["image"]),
                name=name,
                command=["caddy", "run", "--config", f"{config_dir}/{caddy.CONFIG_FILE}"],
                env={"XDG_CONFIG_HOME": "/config", "XDG_DATA_HOME": "/data"},
                labels={
                    labels.KIND: labels.PROXY,
                    labels.SHARED_PORT: str(body["port"]),
                    labels.KEY: unit.key,
                    labels.DIGEST: Unit(unit.key, unit.kind, body).digest,
                    labels.UNIT: caddy.dumps(body).decode().strip(),
                },
                restart=str(body.get("restart", "unless-stopped")),
                mounts=mounts,
                ports=ports,
                network=str(body["network"]),
                stop_timeout=int(body.get("stop_timeout", 10)),
                sysctls=_listener_migration(info),
                log=_log_rotation(info),
            ),
        )
        # the config it starts with: the routes already in its volume (a proxy recreated
        # keeps serving them) and those moved over from this slot's own proxy
        tree = _ensure_token(container, config_dir) if body.get("tls_port") else {}
        if not tree and not fresh:
            tree = read_tree(container, config_dir)
        parts = caddy.parse_parts(tree)
        parts[self._owner] = carried or parts.get(self._owner, {})
        if body.get("tls_port") and any(r.tls is not None for r in self.app.routes):
            # the secure entries (and its ACME settings) in its first config: this slot's
            # HTTPS names come without a reload
            acme = any(r.tls == "auto" for r in self.app.routes)
            tree = {**tree, **caddy.seeded(tree, https.acme_of(self.slot) if acme else None)}
        ensure_network(client, self.app.name, self.slot.name, self._network)
        for owner in parts:  # every slot's containers reachable again
            app, _, slot = owner.partition("/")
            with contextlib.suppress(docker.errors.APIError):
                shared.join(client, container, labels.network(app, slot))
        files = _config_files(parts, body, str(container.id), tree)
        files |= _stamp(files[caddy.CONFIG_FILE][0])  # what it loads as it starts
        put_tree(container, config_dir, files)
        try:
            _start(client, container)
        except docker.errors.APIError as exc:
            raise BackendError(
                f"the proxy {name} did not start: {explain(exc)} (hint: is port "
                f"{body['port']} free on the host? set proxy_port in the slot)"
            ) from exc
        if old is not None:
            return f"moved proxy {old.name} → shared proxy {name} on port {body['port']}"
        verb = "replaced" if existing is not None else "started"
        return f"{verb} proxy {name} (shared) on port {body['port']}"

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
        self, host: str, client: docker.DockerClient, proxy: Container, change: Change
    ) -> dict[str, dict[str, Any]]:
        """Change this slot's part of the shared proxy's routes and reload it gracefully,
        under the proxy's lock (another slot may change its own part at the same time).
        Every part as it is now."""
        body, _ = drift.body_of(proxy.labels)
        with shared.locked(client, int((body or {}).get("port", 0)), host):
            return self._rewrite(host, proxy, change)

    def _rewrite(
        self, host: str, proxy: Container, change: Change, leave: bool = False
    ) -> dict[str, dict[str, Any]]:
        """:meth:`_reconfigure` with the proxy's lock held. ``leave``: this slot's part goes
        (it uses the proxy no more); else it stays, empty too (the proxy is still this slot's
        to use: not removed by another slot's leaving). A refused reload puts the previous
        files back, so what is written is always what runs; a proxy that is not running
        loads them when it starts."""
        body, _ = drift.body_of(proxy.labels)
        proxy_body = dict(body or {})
        config_dir = str(proxy_body.get("config_dir", caddy.CONFIG_DIR))
        tree = read_tree(proxy, config_dir)
        parts = caddy.parse_parts(tree)
        mine = dict(parts.pop(self._owner, {}))
        change(mine)
        if not leave:
            parts[self._owner] = mine
        clash = caddy.catch_all_of(parts, self._owner)
        if clash is not None:
            raise BackendError(
                f"the shared proxy {proxy.name} already sends every request no route names to "
                f"{clash}: slot {self.slot.name} declares no routes, so its requests would "
                "never reach it (hint: declare [[routes]] with host names in one of them, or "
                "use another proxy_port)"
            )
        files = _config_files(parts, proxy_body, str(proxy.id), tree)
        config = files[caddy.CONFIG_FILE][0]
        reloads = tree.get(caddy.LOADED_FILE) != _stamp(config)[caddy.LOADED_FILE]
        # only what changed: an upstream file rewritten is a switch (of its route alone); a
        # pool entry freed while the config changes too (its route now in the config
        # itself: a canary's) only once that config runs, so its name is always served
        changed = {k: v for k, v in files.items() if tree.get(k) != v}
        freed = caddy.freed(changed) if reloads and proxy.status == "running" else {}
        changed = {k: v for k, v in changed.items() if k not in freed}
        if changed:
            put_tree(proxy, config_dir, changed)
        emptied: dict[str, tuple[bytes, int]] = dict(freed)  # and the certificate files of
        # routes gone
        for key, unit in caddy.parse_parts(tree).get(self._owner, {}).items():
            if key not in parts.get(self._owner, {}):
                emptied |= https.given_files(f"{self._owner} {key}", unit.get("body") or {}, None)
                if caddy.upstream_file(f"{self._owner} {key}") in tree:
                    emptied[caddy.upstream_file(f"{self._owner} {key}")] = (b"", 0o644)
        if proxy.status != "running":
            put_tree(proxy, config_dir, {**emptied, **_stamp(config)})
            return parts
        if not reloads:
            # the config Caddy runs already: a switch (upstream files) or nothing
            if emptied:
                put_tree(proxy, config_dir, emptied)
            return parts
        running = tree.get(caddy.CONFIG_FILE, (b"", 0))[0]  # what the proxy runs now
        refused = self._reload(host, proxy, config_dir, config, running)
        if refused is not None:
            previous = {k: v for k, v in tree.items() if k in changed}
            if previous:
                put_tree(proxy, config_dir, previous)
            raise BackendError(f"the proxy {proxy.name} refused its new configuration {refused}")
        # only once the config that names them no more is the one running
        put_tree(proxy, config_dir, {**emptied, **_stamp(config)})
        return parts

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
        code, raw = self.retry.call(lambda: run_in(proxy, command), transient_call)
        if code == 0:
            return None
        output = raw.decode(errors="replace").strip().splitlines()
        return f"(exit {code}): " + (output[-1][:300] if output else "no output")

    def _apply_route(
        self, client: docker.DockerClient, unit: Unit, action: str, secrets: Mapping[str, Secret]
    ) -> str:
        # a route rendered before the shared proxy (a rollback to one) goes there all the same
        name = labels.shared_proxy(self.settings.proxy_port)
        if str(unit.body.get("proxy", "")).startswith(labels.shared_proxy(0)[:-1]):
            name = str(unit.body["proxy"])
        proxy, _ = self._proxy_for(client, name)
        shared.join(client, proxy, self._network)
        if unit.body.get("tls"):
            self._tls_files(proxy, unit, secrets)
        group = self._group_of(client, unit)

        def put(routes: dict[str, Any]) -> None:
            routes[unit.key] = {"key": unit.key, "digest": unit.digest, "body": dict(unit.body)}
            if group is not None:
                routes[unit.key]["group"] = group

        self._reconfigure(unit.host or "", client, proxy, put)
        self._switched_at[unit.host or ""] = time.monotonic()
        targets = ", ".join(str(u).split(":")[0] for u in unit.body["upstreams"])
        where = ", ".join(unit.body.get("hosts") or []) or "all requests"
        return f"switched {where} to {targets}"

    def _release_alias(self, body: Mapping[str, Any]) -> list[str]:
        """The release alias an app container of ``body`` gets on its network (none for a
        process that takes no requests)."""
        tags = body.get("labels") or {}
        if body.get("port") is None or not tags.get(labels.PROCESS):
            return []
        process, deployment = str(tags[labels.PROCESS]), str(tags.get(labels.DEPLOYMENT, "0"))
        return [labels.release_alias(self.app.name, self.slot.name, process, deployment)]

    def _group_of(self, client: docker.DockerClient, unit: Unit) -> str | None:
        """The release alias that names exactly the route's containers on this host (what
        its upstream file says), or None when none does: containers made before the alias,
        or others of the same alias (the config then names the containers: a reload)."""
        upstreams = [str(u).rsplit(":", 1) for u in unit.body.get("upstreams") or []]
        if not upstreams or len({tuple(u[1:]) for u in upstreams}) != 1 or len(upstreams[0]) != 2:
            return None
        names = {u[0] for u in upstreams}
        members: dict[str, set[str]] = {}
        for c in self._labelled(client, labels.APP_CONTAINER, sparse=True):
            alias = tags_of(c).get(labels.ALIAS)
            if alias:
                members.setdefault(alias, set()).add(name_of(c))
        aliases = [a for a, of in members.items() if of & names]
        return aliases[0] if len(aliases) == 1 and members[aliases[0]] == names else None

    def _tls_files(self, proxy: Container, unit: Unit, secrets: Mapping[str, Secret]) -> None:
        """The files a route's HTTPS needs in the proxy's config directory, written before
        the config that names them: its given certificates and keys (0600), its ACME root,
        and, on a host that gets its certificates from the issuer, the issuer's token."""
        values = {placeholder(n): v.reveal() for n, v in secrets.items()}
        files = https.given_files(f"{self._owner} {unit.key}", unit.body, values)
        source = unit.body["tls"].get("from")
        if source and unit.body["tls"].get("auto"):
            files[https.token_file(source)] = (self._issuer_token(str(source)), 0o600)
        if files:
            put_tree(proxy, caddy.CONFIG_DIR, files)

    def _issuer_token(self, source: str) -> bytes:
        """The share token of the issuer's proxy (the host reached at ``source``), once it
        has one (its proxy is made by this deploy too, maybe at this moment)."""
        issuer = next((h for h in self.host_addresses if h.hostname == source), None)
        if issuer is None:
            raise BackendError(f"no host of slot {self.slot.name} is reached at {source}")
        client = self._client(issuer.name)
        name = labels.shared_proxy(self.settings.proxy_port)
        deadline = time.monotonic() + TOKEN_WAIT
        while True:
            token = read_tree_of(client, name, caddy.CONFIG_DIR).get(https.SHARE_TOKEN)
            if token is not None:
                return token[0]
            if time.monotonic() > deadline:
                raise BackendError(
                    f"the proxy {name} on {issuer.name} (which orders this slot's "
                    f"certificates) has no share token after {TOKEN_WAIT:g}s (hint: deploy "
                    "again; the first host must serve a route too)"
                )
            time.sleep(0.5)  # the issuer's proxy step runs beside this one

    def _shared_proxies(self, client: docker.DockerClient) -> list[Container]:
        """The shared proxies on this host (this slot's port first): where its routes are.
        As the one list call gives them (sparse: read their labels with :func:`tags_of`,
        their names with :func:`name_of`; inspect one before changing it). Not one the
        engine left half removed: it serves nothing (this port's own is made anew by the
        next deploy)."""
        filters: dict[str, str | list[str] | bool] = {
            "label": [f"{labels.KIND}={labels.PROXY}", labels.SHARED_PORT]
        }
        found: list[Container] = client.containers.list(all=True, filters=filters, sparse=True)
        mine = labels.shared_proxy(self.settings.proxy_port)
        alive = [c for c in found if not half_removed(c)]
        return sorted(alive, key=lambda c: (name_of(c) != mine, name_of(c)))

    def _looked_parts(
        self, client: docker.DockerClient, host: str, proxy: str
    ) -> dict[str, dict[str, Any]] | None:
        """:func:`parts_of` the proxy (None: not readable whole). While the slot's lock is
        held, one whose whole slots.json has no part of this slot's is remembered as such
        until a step of this backend changes something: only this slot adds its own part."""
        key = f"{host} {proxy}"
        if key in self._no_part:
            return {}
        parts = parts_of(client, proxy)
        if parts is not None and self._owner not in parts and self._slot_lock is not None:
            self._no_part.add(key)
        return parts

    def _drop_route(self, client: docker.DockerClient, step: Remove) -> str:
        """Take one of this slot's routes out of the host's proxy (gracefully, as a switch:
        the drain of the containers it served starts now)."""
        for listed in self._shared_proxies(client):
            if step.unit not in (parts_of(client, str(listed.id)) or {}).get(self._owner, {}):
                continue
            if listed.status != "running":
                return f"{step.unit} already gone (proxy {name_of(listed)} is {listed.status})"
            proxy = self._get(client, str(listed.id))  # its whole configuration, to change it
            if proxy is None:
                continue
            parts = self._reconfigure(
                step.host or "", client, proxy, lambda routes: routes.pop(step.unit, None)
            )
            if self._owner not in parts:  # nothing of this slot's is routed there any more
                shared.leave(client, proxy, self._network)
            self._switched_at[step.host or ""] = time.monotonic()
            return f"dropped route {step.unit}"
        return f"{step.unit} already gone (no proxy routes it)"

    def _leave_proxies(
        self, client: docker.DockerClient, host: str, only: str | None = None
    ) -> list[str]:
        """Take this slot out of the host's shared proxies (``only``: of that one): its
        routes dropped, its network left, and a proxy no other slot uses removed (stop,
        destroy, the removal of this slot's ``proxy@host``). What was done, in words."""
        done: list[str] = []
        network = self._network
        own = labels.shared_proxy(self.settings.proxy_port)
        for listed in self._shared_proxies(client):
            if only is not None and name_of(listed) != only:
                continue
            # another port's proxy is looked at first: only this slot adds or removes its
            # own part (under the slot's lock, held now), so one whose whole slots.json has
            # none is passed by without the proxy's lock (and without inspecting it)
            if f"{host} {listed.id}" in self._no_part:
                continue
            if name_of(listed) != own:
                looked = self._looked_parts(client, host, str(listed.id))
                if looked is not None and self._owner not in looked:
                    continue
            proxy = self._get(client, str(listed.id))  # its whole configuration, to change it
            if proxy is None:
                continue
            body, _ = drift.body_of(proxy.labels)
            with shared.locked(client, int((body or {}).get("port", 0)), host):
                parts = caddy.parse_parts(read_tree(proxy, caddy.CONFIG_DIR))
                if self._owner not in parts:
                    continue
                if len(parts) == 1:  # only this slot used it: it goes, with its files
                    remove(proxy, 10)
                    for volume in ((body or {}).get("volume"), (body or {}).get("data_volume")):
                        if not volume:
                            continue
                        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                            client.volumes.get(str(volume)).remove()
                    done.append(f"removed shared proxy {proxy.name} (no other slot uses it)")
                    continue
                routes = len(parts[self._owner])
                self._rewrite(host, proxy, lambda r: r.clear(), leave=True)
            shared.leave(client, proxy, network)
            done.append(f"dropped its {routes} routes from shared proxy {proxy.name}")
        return done


def parts_of(client: docker.DockerClient, proxy: str) -> dict[str, dict[str, Any]] | None:
    """Each slot's part of a shared proxy's routes, read from its ``slots.json`` alone and
    without the proxy's lock (a look, not a change); None when that file cannot be read
    whole: the proxy or the file is gone, or another slot's change rewrites it at this
    moment (the engine removes a file it unpacks before it writes it anew)."""
    path = f"{caddy.CONFIG_DIR}/{caddy.PARTS_FILE}"
    raw = read_tree_of(client, proxy, path).get(caddy.PARTS_FILE)
    if raw is None:
        return None
    try:
        json.loads(raw[0])
    except ValueError:
        return None
    return caddy.parse_parts({caddy.PARTS_FILE: raw})


def _config_files(
    parts: Mapping[str, Mapping[str, Any]],
    proxy_body: Mapping[str, Any],
    proxy_id: str,
    tree: Mapping[str, tuple[bytes, int]],
) -> dict[str, tuple[bytes, int]]:
    """The shared proxy's files for every slot's routes: the parts themselves, Caddy's
    config composed from them all (with the share tokens in ``tree``: 0600), the upstream
    file of each route that has one, and the pool's files (each route's entries kept where
    ``tree`` has them)."""
    identity = admin.identity(proxy_id)
    routes = caddy.flatten(parts)
    pool = caddy.assign(routes, caddy.pool_of(tree), secure=bool(proxy_body.get("tls_port")))
    tokens = caddy.tokens_of(tree)
    config = caddy.compose(routes, proxy_body, identity, tokens, pool)
    return {
        **caddy.upstream_files(routes, pool),  # before the config that names them
        **caddy.pool_files(routes, pool, tokens),
        caddy.PARTS_FILE: _parts_file(parts),
        caddy.CONFIG_FILE: (caddy.dumps(config), 0o600),
    }


def _start(client: docker.DockerClient, container: Container) -> None:
    """Start a proxy just made. A slot network it joined for another slot's routes can be
    removed before it starts (that slot destroyed meanwhile: the engine lets a network go
    while only created containers are on it), and the start then fails ("network … not
    found"): it leaves the networks that are gone and starts once more."""
    try:
        container.start()
    except docker.errors.APIError as exc:
        if "not found" not in str(exc.explanation or "") or "network" not in str(exc):
            raise
        container.reload()
        joined = (container.attrs.get("NetworkSettings") or {}).get("Networks") or {}
        for network in joined:
            if not any(n["Name"] == network for n in client.api.networks(names=[network])):
                with contextlib.suppress(docker.errors.APIError):
                    client.api.disconnect_container_from_network(str(container.id), network)
        container.start()


def _stamp(config: bytes) -> dict[str, tuple[bytes, int]]:
    """The file that says Caddy was made to load ``config``."""
    return {caddy.LOADED_FILE: (caddy.loaded(config), 0o644)}


def _ensure_token(proxy: Container, config_dir: str = caddy.CONFIG_DIR) -> dict[str, Any]:
    """The proxy's files, with its share token (made now when it has none: a random
    secret, 0600, never shown) — what another host presents to get its certificates."""
    tree = read_tree(proxy, config_dir)
    if https.SHARE_TOKEN not in tree:
        token = (token_urlsafe(32).encode(), 0o600)
        put_tree(proxy, config_dir, {https.SHARE_TOKEN: token})
        tree[https.SHARE_TOKEN] = token
    return tree


def _parts_file(parts: Mapping[str, Mapping[str, Any]]) -> tuple[bytes, int]:
    return caddy.dumps(dict(parts)), 0o644


def _listener_migration(info: Mapping[str, Any]) -> dict[str, str]:
    """``net.ipv4.tcp_migrate_req=1`` in the proxy's network namespace when the host's
    kernel has it (Linux 5.14+). Caddy opens a new SO_REUSEPORT socket on every reload and
    closes the old one; without migration, the connections still waiting in the old
    socket's accept queue are reset — a handful per reload under load. With it, the kernel
    hands them to the new socket."""
    release = str(info.get("KernelVersion") or "")
    parts = release.split(".")
    try:
        major, minor = int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return {}
    return {"net.ipv4.tcp_migrate_req": "1"} if (major, minor) >= (5, 14) else {}


#: the shared proxy's own log rotation on an engine that logs to ``json-file`` (Docker's
#: default, which keeps every line unless the daemon says otherwise): while a canary runs,
#: the proxy logs a line per request it serves (docs/canary.md, *The counts*), for every app
#: on the host, for as long as the proxy lives
LOG_ROTATION = {"max-size": "10m", "max-file": "3"}


def _log_rotation(info: Mapping[str, Any]) -> dict[str, Any] | None:
    """The proxy's log options: rotated where the engine's driver is ``json-file``; any
    other driver (``local`` rotates by itself, ``journald`` …) is the engine's choice."""
    if info.get("LoggingDriver") != "json-file":
        return None
    return {"type": "json-file", "config": dict(LOG_ROTATION)}
