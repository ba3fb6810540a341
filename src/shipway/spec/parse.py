"""Raw data (from TOML or YAML) → a validated :class:`App`, collecting every error.

Every problem carries its key path, its line where the format gives one, and a hint.
Unknown keys are errors: a typo must never be silently ignored.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from shipway.errors import SpecInvalid
from shipway.spec import appfiles
from shipway.spec.accessories import check_links, parse_accessories
from shipway.spec.build import parse_build
from shipway.spec.canary import parse_canary
from shipway.spec.check import Checker, kind_of, span
from shipway.spec.limits import MAX_HEALTH_GATE
from shipway.spec.locate import KeyPath, Locator, no_lines, render_path
from shipway.spec.model import (
    BACKENDS,
    IMAGE_TYPES,
    ROLES,
    STRATEGIES,
    App,
    ConfigFile,
    DockerHost,
    Healthcheck,
    Process,
    Resources,
    Role,
    Route,
    Slot,
    SlotRegistry,
    Strategy,
)
from shipway.spec.notify import with_freeze, with_notify
from shipway.spec.procfile import Procfile
from shipway.spec.secret_refs import parse_secrets
from shipway.spec.secrets import SecretRef, names_in
from shipway.spec.source import Source, every_slot_has_source, parse_source
from shipway.spec.tls import SLOT_TLS_KEYS, check_backend, parse_route_tls, parse_slot_tls
from shipway.spec.volumes import check_file_volumes, check_volume_slots, parse_volumes

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_NAME = re.compile(
    r"^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
QUANTITY = re.compile(r"^([0-9]+(\.[0-9]+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
IMAGE_REF = re.compile(r"^[a-z0-9][a-z0-9._:/@-]*[a-z0-9]$|^[a-z0-9]$", re.IGNORECASE)

TOP_KEYS = (
    "app",
    "processes",
    "env",
    "secrets",
    "files",
    "routes",
    "volumes",
    "slots",
    "build",
    "source",
    "accessories",
    "notify",
)
APP_KEYS = (
    "name",
    "image",
    "image_type",
    "release_command",
    "release_timeout",
    "build",
    "build_timeout",
    "procfile",
    "env_file",
)
PROCESS_KEYS = ("command", "port", "replicas", "healthcheck", "resources")
HEALTH_KEYS = ("path", "interval", "timeout", "attempts", "initial_delay")
RESOURCE_KEYS = ("requests", "limits")
ROUTE_KEYS = ("host", "process", "port", "tls_secret", "tls")
SLOT_KEYS = (
    "backend",
    "role",
    "guarded",
    "promotes_to",
    "strategy",
    "sleep_after",
    "history_limit",
    "context",
    "namespace",
    "hosts",
    "known_hosts",
    "proxy_image",
    "proxy_port",
    "drain_timeout",
    "batch",
    "state_dir",
    "router_port",
    "replicas",
    "env",
    "routes",
    "source",
    *SLOT_TLS_KEYS,
    "canary",
    "freeze",
    "notify",
)
BACKEND_ONLY = {
    **{key: "docker" for key in SLOT_TLS_KEYS},
    "context": "kubernetes",
    "namespace": "kubernetes",
    "source": "kubernetes",
    "hosts": "docker",
    "known_hosts": "docker",
    "proxy_image": "docker",
    "proxy_port": "docker",
    "batch": "docker",
    "state_dir": "local",
    "router_port": "local",
}


def parse(
    raw: Any,
    *,
    file: str = "shipway.toml",
    locate: Locator = no_lines,
    base_dir: Path = Path("."),
    check_files: bool = True,
) -> App:
    """Validate raw spec data and build the App, or raise SpecInvalid with every problem.
    ``check_files``: the files a source names must exist (not for a recorded snapshot)."""
    c = Checker(file, locate)
    top = c.table(raw, (), TOP_KEYS) or {}

    app_t = c.table(top.get("app", {}), ("app",), APP_KEYS) or {}
    name = None
    if "name" not in app_t:
        c.error(("app", "name"), "is required", 'add name = "myapp" under [app]')
    else:
        name = c.string(
            app_t["name"],
            ("app", "name"),
            pattern=DNS_LABEL,
            what="app name",
            hint="lowercase letters, digits and '-', at most 63 characters",
        )
    image = c.string(app_t["image"], ("app", "image")) if "image" in app_t else None
    image_type = (
        c.choice(app_t["image_type"], ("app", "image_type"), IMAGE_TYPES)
        if "image_type" in app_t
        else None
    )
    release_command = (
        c.command(app_t["release_command"], ("app", "release_command"), shell=True)
        if "release_command" in app_t
        else None
    )
    release_timeout = (
        c.duration(app_t["release_timeout"], ("app", "release_timeout"), "release_timeout")
        if "release_timeout" in app_t
        else None
    )
    build_timeout = (
        c.duration(app_t["build_timeout"], ("app", "build_timeout"), "build_timeout")
        if "build_timeout" in app_t
        else None
    )
    procfile = appfiles.read_procfile(appfiles.procfile(c, app_t), base_dir)
    release_command = appfiles.release_command(
        c, procfile, release_command, "release_command" in app_t
    )

    processes = _processes(
        c, top.get("processes"), procfile, required=not every_slot_has_source(top)
    )
    default_source = (
        parse_source(c, top["source"], ("source",), base_dir, check_files=check_files)
        if "source" in top
        else None
    )
    env = _env(c, top.get("env", {}), ("env",))
    secrets = parse_secrets(c, top.get("secrets", {}), base_dir)
    env, secrets, env_files = appfiles.env_files(c, app_t, base_dir, env, secrets)
    files = _files(c, top.get("files", {}), secrets)
    routes = _routes(c, top.get("routes", []), ("routes",), processes, secrets)
    for key in env:
        if key in secrets:
            c.error(("env", key), "is also declared as a secret", "keep one of the two")
    slots = _slots(
        c, top.get("slots"), processes, routes, name or "app", default_source, base_dir,
        check_files, secrets,
    )  # fmt: skip
    slots = with_notify(c, top.get("notify"), top.get("slots"), slots, secrets)
    build = parse_build(c, top.get("build"), app_t.get("build"))
    volumes = parse_volumes(c, top.get("volumes", {}), processes, files)
    check_volume_slots(c, volumes, slots)
    accessories = parse_accessories(c, top.get("accessories", {}), slots)
    check_links(c, secrets, accessories)
    if check_files:  # the spec file read now (a recorded one is not refused afterwards)
        check_file_volumes(c, volumes, base_dir)

    if procfile is not None:
        c.problems.extend(procfile.problems)
    if c.problems:
        raise SpecInvalid(
            sorted(c.problems, key=lambda p: (p.file != file, p.line is None, p.line or 0))
        )
    assert name is not None
    return App(
        name=name,
        image=image,
        image_type=image_type,
        release_command=release_command,
        release_timeout=release_timeout,
        build_timeout=build_timeout,
        processes=processes,
        env=env,
        secrets=secrets,
        files=files,
        routes=routes,
        volumes=volumes,
        accessories=accessories,
        slots=SlotRegistry(app=name, slots=slots),
        source_dir=base_dir,
        spec_file=base_dir / file,
        build=build,
        env_files=env_files,
    )


def _processes(
    c: Checker, raw: Any, procfile: Procfile | None = None, *, required: bool = True
) -> dict[str, Process]:
    """The ``[processes]`` table, with the Procfile's types (and commands) when it names one;
    none is needed when every slot takes its objects from a source (``required``)."""
    if raw is None and not (procfile and procfile.entries):
        if procfile is None and required:
            c.error(
                ("processes",),
                "at least one process is required",
                'add [processes.web] with command = "...", or procfile = "Procfile" under [app]',
            )
        return {}
    table = (c.table(raw, ("processes",)) or {}) if raw is not None else {}
    out = appfiles.procfile_processes(procfile, table, DNS_LABEL)
    for pname, praw in table.items():
        path: KeyPath = ("processes", pname)
        c.string(
            pname,
            path,
            pattern=DNS_LABEL,
            what="process name",
            hint="lowercase letters, digits and '-'",
        )
        p = c.table(praw, path, PROCESS_KEYS)
        if p is None:
            continue
        command = c.command(p["command"], (*path, "command")) if "command" in p else None
        command = appfiles.command_for(c, procfile, pname, command, "command" in p)
        port = c.integer(p["port"], (*path, "port"), "port") if "port" in p else None
        replicas = c.integer(p.get("replicas", 1), (*path, "replicas"), "replicas")
        health = (
            _healthcheck(c, p["healthcheck"], (*path, "healthcheck"))
            if "healthcheck" in p
            else None
        )
        resources = _resources(c, p.get("resources", {}), (*path, "resources"))
        out[pname] = Process(
            name=pname,
            command=command,
            port=port,
            replicas=1 if replicas is None else replicas,
            healthcheck=health,
            resources=resources,
        )
    order = [*(procfile.entries if procfile else ()), *table]
    return {name: out[name] for name in dict.fromkeys(order) if name in out}


def _healthcheck(c: Checker, raw: Any, path: KeyPath) -> Healthcheck | None:
    h = c.table(raw, path, HEALTH_KEYS)
    if h is None:
        return None
    default = Healthcheck()
    hpath: str | None = default.path
    if "path" in h:
        if h["path"] is False:
            hpath = None
        else:
            hpath = c.string(
                h["path"],
                (*path, "path"),
                pattern=re.compile(r"^/"),
                what="HTTP path",
                hint='start it with "/", e.g. "/up"',
            )
    values = {
        key: c.duration(h[key], (*path, key), key)
        for key in ("interval", "timeout", "initial_delay")
        if key in h
    }
    attempts = c.integer(h.get("attempts", default.attempts), (*path, "attempts"), "attempts")
    health = Healthcheck(
        path=hpath,
        interval=values.get("interval") or default.interval,
        timeout=values.get("timeout") or default.timeout,
        attempts=attempts or default.attempts,
        initial_delay=values.get("initial_delay") or default.initial_delay,
    )
    gate = health.initial_delay + health.attempts * health.interval
    if health.path is not None and gate > MAX_HEALTH_GATE:
        c.error(
            path,
            f"would keep probing for up to {gate:g}s (initial_delay + attempts * interval), "
            f"longer than {span(MAX_HEALTH_GATE)}",
            "use fewer attempts or a shorter interval",
        )
    return health


def _resources(c: Checker, raw: Any, path: KeyPath) -> Resources:
    r = c.table(raw, path, RESOURCE_KEYS) or {}
    found: dict[str, str | None] = {}
    for section in RESOURCE_KEYS:
        sec = c.table(r.get(section, {}), (*path, section), ("cpu", "memory")) or {}
        for kind in ("cpu", "memory"):
            if kind in sec:
                value = sec[kind]
                if isinstance(value, int | float) and not isinstance(value, bool):
                    value = str(value)
                found[f"{kind}_{section[:-1] if section == 'limits' else 'request'}"] = c.string(
                    value,
                    (*path, section, kind),
                    pattern=QUANTITY,
                    what="quantity",
                    hint='e.g. cpu = "250m", memory = "128Mi"',
                )
    return Resources(
        cpu_request=found.get("cpu_request"),
        memory_request=found.get("memory_request"),
        cpu_limit=found.get("cpu_limit"),
        memory_limit=found.get("memory_limit"),
    )


def _env(c: Checker, raw: Any, path: KeyPath) -> dict[str, str]:
    table = c.table(raw, path) or {}
    out: dict[str, str] = {}
    for key, value in table.items():
        if not ENV_NAME.match(key):
            c.error(
                (*path, key),
                f"{key!r} is not a valid environment variable name",
                "letters, digits and '_', not starting with a digit",
            )
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            out[key] = str(value)
        else:
            c.error((*path, key), f"must be a string, number or boolean, not {kind_of(value)}")
    return out


def _files(c: Checker, raw: Any, secrets: Mapping[str, SecretRef]) -> tuple[ConfigFile, ...]:
    table = c.table(raw, ("files",)) or {}
    out: list[ConfigFile] = []
    for fpath, value in table.items():
        path: KeyPath = ("files", fpath)
        if fpath.startswith("/") or ".." in Path(fpath).parts or not fpath:
            c.error(
                path, f"{fpath!r} must be a relative path inside the app", 'e.g. "config/app.ini"'
            )
            continue
        if isinstance(value, Mapping):
            body = c.table(value, path, ("content",)) or {}
            value = body.get("content")
        content = c.string(
            value, path, hint='give the content: "path" = "text" or { content = "…" }'
        )
        if content is None:
            continue
        refs = tuple(dict.fromkeys(names_in(content)))
        for ref in refs:
            if ref not in secrets:
                c.error(
                    path,
                    f"refers to secrets.{ref}, which is not declared",
                    "declare it under [secrets] or fix the name",
                )
        out.append(ConfigFile(path=fpath, content=content, secrets=refs))
    return tuple(out)


def _routes(
    c: Checker,
    raw: Any,
    path: KeyPath,
    processes: Mapping[str, Process],
    secrets: Mapping[str, SecretRef],
) -> tuple[Route, ...]:
    if not isinstance(raw, list):
        c.error(path, f"must be a list of tables ([[{render_path(path)}]]), not {kind_of(raw)}")
        return ()
    out: list[Route] = []
    for i, item in enumerate(raw):
        rpath = (*path, i)
        r = c.table(item, rpath, ROUTE_KEYS)
        if r is None:
            continue
        missing = [k for k in ("host", "process") if k not in r]
        for k in missing:
            c.error((*rpath, k), "is required", 'e.g. host = "app.example.com", process = "web"')
        if missing:
            continue
        host = c.string(
            r["host"],
            (*rpath, "host"),
            pattern=DNS_NAME,
            what="host name",
            hint="a lowercase DNS name such as app.example.com",
        )
        process = c.string(r["process"], (*rpath, "process"))
        port = c.integer(r["port"], (*rpath, "port"), "port") if "port" in r else None
        tls = (
            c.string(r["tls_secret"], (*rpath, "tls_secret"), pattern=DNS_NAME, what="secret name")
            if "tls_secret" in r
            else None
        )
        https = parse_route_tls(c, r, rpath, secrets)
        if process is not None and processes and process not in processes:
            c.error(
                (*rpath, "process"),
                f"no process named {process!r}",
                "declared: " + ", ".join(processes),
            )
            continue
        if process and process in processes and processes[process].port is None and port is None:
            c.error(
                (*rpath, "process"),
                f"process {process!r} has no port to route to",
                f"add port = … to [processes.{process}]",
            )
            continue
        if host and process:
            out.append(Route(host=host, process=process, port=port, tls_secret=tls, tls=https))
    return tuple(out)


def _slots(
    c: Checker,
    raw: Any,
    processes: Mapping[str, Process],
    routes: tuple[Route, ...],
    app_name: str,
    default_source: Source | None = None,
    base_dir: Path = Path("."),
    check_files: bool = True,
    secrets: Mapping[str, SecretRef] | None = None,
) -> dict[str, Slot]:
    if raw is None:
        return {"local": Slot(name="local", backend="local", role="test")}
    table = c.table(raw, ("slots",)) or {}
    out: dict[str, Slot] = {}
    for sname, sraw in table.items():
        path: KeyPath = ("slots", sname)
        if not DNS_LABEL.match(sname):
            c.error(
                path,
                f"{sname!r} is not a valid slot name",
                "lowercase letters, digits and '-', at most 63 characters",
            )
        s = c.table(sraw, path, SLOT_KEYS)
        if s is None:
            continue
        slot = with_freeze(
            c, _slot(c, sname, s, path, processes, app_name, secrets or {}), s, path
        )
        if slot is not None and slot.backend == "docker":
            acme, tls_port, hsts = parse_slot_tls(c, s, path, base_dir, check_files)
            slot = replace(slot, acme=acme, proxy_tls_port=tls_port, hsts=hsts)
        if slot is not None:
            check_backend(c, slot.backend, path, slot.routes)
        if slot is not None and slot.backend == "kubernetes":
            own = (
                parse_source(c, s["source"], (*path, "source"), base_dir, check_files=check_files)
                if "source" in s
                else None
            )
            declared = "source" in s or default_source is not None
            slot = _with_source(c, slot, s, path, own or default_source, declared)
        if slot is not None:
            out[sname] = slot
    _check_chain(c, out, list(table))
    _check_hosts(c, out, routes)
    _check_namespaces(c, out)
    return out


def _slot(
    c: Checker,
    name: str,
    s: dict[str, Any],
    path: KeyPath,
    processes: Mapping[str, Process],
    app_name: str,
    secrets: Mapping[str, SecretRef],
) -> Slot | None:
    backend = c.choice(s.get("backend", "local"), (*path, "backend"), BACKENDS)
    if backend is None:
        return None
    role = c.choice(s.get("role", "test"), (*path, "role"), ROLES)
    strategy = c.choice(s.get("strategy", "rolling"), (*path, "strategy"), STRATEGIES)
    guarded = c.boolean(s.get("guarded", False), (*path, "guarded"))
    history = c.integer(s.get("history_limit", 10), (*path, "history_limit"), "history_limit")
    sleep_after = c.duration(s.get("sleep_after", 10.0), (*path, "sleep_after"), "sleep_after")
    if strategy == "blue-green" and backend == "docker":
        c.error(
            (*path, "strategy"),
            "blue-green generations run on kubernetes and local slots only",
            'use strategy = "rolling" (docker slots switch traffic per container already)',
        )
    for key, only in BACKEND_ONLY.items():
        if key in s and backend != only:
            c.error(
                (*path, key),
                f"applies to {only} slots only, this slot's backend is {backend}",
                f'remove it, or set backend = "{only}"',
            )
    if "drain_timeout" in s and backend == "local":  # docker: the drain; kubernetes: preStop
        c.error(
            (*path, "drain_timeout"),
            "applies to docker and kubernetes slots only, this slot's backend is local",
            "remove it: a local slot has no use for it",
        )
    promotes_to = c.string(s["promotes_to"], (*path, "promotes_to")) if "promotes_to" in s else None
    context = c.string(s["context"], (*path, "context")) if "context" in s else None
    namespace = (
        c.string(s["namespace"], (*path, "namespace"), pattern=DNS_LABEL, what="namespace")
        if "namespace" in s
        else None
    )
    hosts = (
        _docker_hosts(c, s.get("hosts"), (*path, "hosts"), processes) if backend == "docker" else ()
    )
    if backend == "docker" and not hosts and "hosts" not in s:
        c.error(
            (*path, "hosts"),
            "a docker slot needs at least one host",
            'e.g. hosts = ["unix:///var/run/docker.sock", "ssh://deploy@web1"]',
        )
    known_hosts = (
        c.string(
            s["known_hosts"], (*path, "known_hosts"), hint="a path to an OpenSSH known_hosts file"
        )
        if "known_hosts" in s
        else None
    )
    proxy_image = (
        c.string(
            s["proxy_image"],
            (*path, "proxy_image"),
            pattern=IMAGE_REF,
            what="image reference",
            hint='e.g. "caddy:2" or "registry.example:5000/proxy:1"',
        )
        if "proxy_image" in s
        else None
    )
    proxy_port = (
        c.integer(s["proxy_port"], (*path, "proxy_port"), "port") if "proxy_port" in s else None
    )
    drain_timeout = (
        c.duration(s["drain_timeout"], (*path, "drain_timeout"), "drain_timeout")
        if "drain_timeout" in s
        else None
    )
    batch = c.integer(s["batch"], (*path, "batch"), "batch") if "batch" in s else None
    state_dir = c.string(s["state_dir"], (*path, "state_dir")) if "state_dir" in s else None
    router_port = (
        c.integer(s["router_port"], (*path, "router_port"), "port") if "router_port" in s else None
    )
    replicas: dict[str, int] = {}
    for pname, value in (c.table(s.get("replicas", {}), (*path, "replicas")) or {}).items():
        if processes and pname not in processes:
            c.error(
                (*path, "replicas", pname),
                f"no process named {pname!r}",
                "declared: " + ", ".join(processes),
            )
            continue
        count = c.integer(value, (*path, "replicas", pname), "replicas")
        if count is not None:
            replicas[pname] = count
    env = _env(c, s.get("env", {}), (*path, "env"))
    routes = (
        _routes(c, s["routes"], (*path, "routes"), processes, secrets) if "routes" in s else None
    )
    if backend == "local":
        for pname, p in processes.items():
            if p.command is None:
                c.error(
                    ("processes", pname, "command"),
                    f"is required: slot {name!r} runs processes locally",
                    'e.g. command = "python app.py"',
                )
    canary = parse_canary(c, s.get("canary"), (*path, "canary"), strategy, backend)
    if None in (role, strategy, guarded, history) or (strategy == "canary" and canary is None):
        return None
    return Slot(
        name=name,
        backend=backend,
        role=cast(Role, role),
        guarded=bool(guarded),
        promotes_to=promotes_to,
        strategy=cast(Strategy, strategy),
        sleep_after=10.0 if sleep_after is None else sleep_after,
        history_limit=cast(int, history),
        context=context,
        namespace=namespace or (f"{app_name}-{name}" if backend == "kubernetes" else None),
        hosts=hosts,
        known_hosts=known_hosts,
        proxy_image=proxy_image,
        batch=batch,
        proxy_port=proxy_port,
        drain_timeout=drain_timeout,
        state_dir=state_dir,
        router_port=router_port,
        replicas=replicas,
        env=env,
        routes=routes,
        canary=canary,
    )


def _with_source(
    c: Checker,
    slot: Slot,
    s: Mapping[str, Any],
    path: KeyPath,
    source: Source | None,
    declared: bool,
) -> Slot:
    """The slot with its source (its own, else the app's default); overrides that only
    shipway's own render reads are refused on it rather than silently ignored (also when
    the source itself is invalid: ``declared``)."""
    if not declared:
        return slot
    for key in ("replicas", "routes"):
        if key in s:
            c.error(
                (*path, key),
                "does not apply to a slot whose objects come from a source",
                f"set it in the source's objects, or remove {key}",
            )
    if slot.strategy == "blue-green":
        c.error(
            (*path, "strategy"),
            "a slot whose objects come from a source rolls them in place",
            'use strategy = "rolling"',
        )
    return replace(slot, source=source) if source is not None else slot


def _docker_hosts(
    c: Checker, raw: Any, path: KeyPath, processes: Mapping[str, Process]
) -> tuple[DockerHost, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        c.error(path, f"must be a list, not {kind_of(raw)}")
        return ()
    out: list[DockerHost] = []
    url_pattern = re.compile(r"^(unix://.+|ssh://[^@/\s]+@[^/\s]+(/[^\s?#]*)?|tcp://[^/\s]+)$")
    hint = (
        'use "unix:///path/docker.sock" or "ssh://user@host[:port]", or name the engine\'s '
        'socket on the host: "ssh://user@host/var/run/docker.sock"'
    )
    for i, item in enumerate(raw):
        hpath = (*path, i)
        roles: tuple[str, ...] | None = None
        address: str | None = None
        if isinstance(item, Mapping):
            h = c.table(item, hpath, ("url", "processes", "address")) or {}
            if "address" in h:
                address = _host_address(c, h["address"], (*hpath, "address"))
            url = c.string(
                h.get("url"), (*hpath, "url"), pattern=url_pattern, what="host", hint=hint
            )
            if "processes" in h:
                names = h["processes"]
                if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                    c.error((*hpath, "processes"), "must be a list of process names")
                else:
                    for n in names:
                        if processes and n not in processes:
                            c.error(
                                (*hpath, "processes"),
                                f"no process named {n!r}",
                                "declared: " + ", ".join(processes),
                            )
                    roles = tuple(names)
        else:
            url = c.string(item, hpath, pattern=url_pattern, what="host", hint=hint)
        if url:
            out.append(DockerHost(url=url, processes=roles, address=address))
    return tuple(out)


def _host_address(c: Checker, raw: Any, path: KeyPath) -> str | None:
    """The IP address the slot's other hosts reach a host at (an accessory is published
    there, and nowhere else)."""
    text = c.string(raw, path, what="address")
    if text is None:
        return None
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        c.error(
            path,
            f"{text!r} is not an IP address",
            'the address the slot\'s other hosts reach this one at, e.g. address = "10.0.0.5"',
        )
        return None


def _check_chain(c: Checker, slots: Mapping[str, Slot], declared: list[str]) -> None:
    for name, slot in slots.items():
        target = slot.promotes_to
        if target is None:
            continue
        if target not in slots:
            c.error(
                ("slots", name, "promotes_to"),
                f"no slot named {target!r}",
                "declared: " + ", ".join(declared),
            )
            continue
        seen = [name]
        while target is not None and target in slots:
            if target in seen:
                cycle = " -> ".join([*seen, target])
                c.error(
                    ("slots", name, "promotes_to"),
                    f"the promotion chain has a cycle: {cycle}",
                    "the last slot of a chain must not promote anywhere",
                )
                break
            seen.append(target)
            target = slots[target].promotes_to


def _check_hosts(c: Checker, slots: Mapping[str, Slot], routes: tuple[Route, ...]) -> None:
    """A host name is served by one slot only; two slots claiming one host would fight."""
    owner: dict[str, str] = {}
    for name, slot in slots.items():
        for i, route in enumerate(slot.routes if slot.routes is not None else routes):
            first = owner.setdefault(route.host, name)
            if first != name:
                where: KeyPath = (
                    ("slots", name, "routes", i) if slot.routes is not None else ("slots", name)
                )
                c.error(
                    where,
                    f"host {route.host!r} is already served by slot {first!r}",
                    f"give slot {name!r} its own hosts with [[slots.{name}.routes]]",
                )


def _check_namespaces(c: Checker, slots: Mapping[str, Slot]) -> None:
    """Two kubernetes slots of one app in one namespace of one cluster would share their
    release records, lock and objects: each would overwrite and prune the other's."""
    owner: dict[tuple[str | None, str | None], str] = {}
    for name, slot in slots.items():
        if slot.backend != "kubernetes":
            continue
        first = owner.setdefault((slot.context, slot.namespace), name)
        if first != name:
            where = f" of context {slot.context!r}" if slot.context else ""
            c.error(
                ("slots", name, "namespace"),
                f"namespace {slot.namespace!r}{where} is already used by slot {first!r}",
                f"give slot {name!r} its own namespace (their release records would collide)",
            )


def from_snapshot(snapshot: Any, base_dir: Path) -> App:
    """The App a release record ran, parsed back from its spec snapshot."""
    return parse(snapshot, file="(recorded release)", base_dir=base_dir, check_files=False)
