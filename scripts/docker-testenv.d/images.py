"""Build shipway's test images without pulling anything, and push them to the test registry.

Run by ``scripts/docker-testenv up``. Everything goes through the Docker SDK (engine API):

* ``base``: a root filesystem made here (Debian's static busybox, its applet links, a tiny
  shell app) and imported with the ``docker import`` call of the API;
* variants built ``FROM`` it with the classic builder and a tar context (no pull happens,
  the base is local);
* ``python-base``: Debian bookworm's minbase with ``python3`` and ``python3-venv``, a root
  filesystem ``scripts/docker-testenv`` made once with debootstrap (``--python-base TAR``),
  imported the same way: the Python apps of the build tests are built ``FROM`` it;
* each pushed to the registry, so other engines pull it from there.

Every image carries the label ``org.shipway.testenv.hash``: a hash of what went into it. An
image whose label already matches, and whose registry manifest is the one the engine pushed,
is left alone, so a warm ``up`` builds and pushes nothing.

The app (``/app/serve``, busybox sh) reads these variables:

``PORT`` (8080)            listen port (all addresses)
``APP_VERSION``            shown by ``/`` and ``/version`` (set per image)
``UP_STATUS`` (200)        HTTP status of ``/up``; other than 200 serves with a tiny nc-based
                           server instead of httpd (``/up`` answers that status, the rest 200)
``CRASH_ON_START``         when set, print a message and exit 3 at once
``STARTUP_DELAY``          seconds to wait before listening
``DRAIN_SECONDS`` (0)      after SIGTERM: close the listener, wait this long, exit 0

Paths: ``/`` (index.html), ``/up`` (``ok``), ``/version``, ``/cgi-bin/env`` (the server's
environment, to check injected config), ``/cgi-bin/slow?N`` (answers after N seconds, 2 by
default: a request still in flight at a switch).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.images import Image

# Bump to force a rebuild of every image when this file's output changes in ways the
# content hash cannot see.
RECIPE_VERSION = "1"
HASH_LABEL = "org.shipway.testenv.hash"
KIND_LABEL = "org.shipway.testenv.kind"
MTIME = 1_700_000_000  # fixed, so the same inputs give the same tar bytes

SERVE = r"""#!/bin/sh
# shipway test app: serves /app/www on $PORT with busybox httpd; /up is the health path.
# Knobs (environment): PORT, APP_VERSION, UP_STATUS, CRASH_ON_START, STARTUP_DELAY, DRAIN_SECONDS.
PORT=${PORT:-8080}
APP_VERSION=${APP_VERSION:-$(cat /app/www/version 2>/dev/null || echo unknown)}
export PORT APP_VERSION
echo "shipway-test app $APP_VERSION: starting on port $PORT (pid $$)"
if [ -n "${CRASH_ON_START:-}" ]; then
  echo "shipway-test app $APP_VERSION: CRASH_ON_START is set, exiting 3" >&2
  exit 3
fi
if [ -n "${STARTUP_DELAY:-}" ]; then
  sleep "$STARTUP_DELAY"
fi
child=
stop() {
  echo "shipway-test app $APP_VERSION: $1, stopping"
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
  sleep "${DRAIN_SECONDS:-0}"
  exit 0
}
trap 'stop SIGTERM' TERM
trap 'stop SIGINT' INT
if [ "${UP_STATUS:-200}" = 200 ]; then
  httpd -f -p "0.0.0.0:$PORT" -h /app/www &
else
  nc -ll -p "$PORT" -e /app/respond &
fi
child=$!
echo "shipway-test app $APP_VERSION: listening on port $PORT"
status=0
wait "$child" || status=$?
echo "shipway-test app $APP_VERSION: server exited with status $status" >&2
exit "$status"
"""

RESPOND = r"""#!/bin/sh
# One HTTP exchange on stdin/stdout (run by nc -ll -e): /up answers $UP_STATUS, the rest 200.
cr=$(printf '\r')
read -r method path proto || exit 0
while read -r line; do
  line=${line%"$cr"}
  [ -z "$line" ] && break
done
if [ "$path" = /up ]; then
  status=${UP_STATUS:-500}
  body="not ok ($APP_VERSION)"
else
  status=200
  body="shipway-test app $APP_VERSION"
fi
case "$status" in
  200) reason=OK ;;
  500) reason="Internal Server Error" ;;
  503) reason="Service Unavailable" ;;
  *) reason=Status ;;
esac
printf 'HTTP/1.0 %s %s\r\nContent-Type: text/plain\r\nContent-Length: %s\r\n' \
  "$status" "$reason" "$((${#body} + 1))"
printf 'Connection: close\r\n\r\n%s\n' "$body"
"""

WORKER = r"""#!/bin/sh
# A second process type: prints a heartbeat, stops at once on SIGTERM.
trap 'echo "worker ${APP_VERSION:-}: stopping"; exit 0' TERM INT
while :; do
  echo "worker ${APP_VERSION:-}: alive"
  sleep "${WORKER_INTERVAL:-5}" &
  wait $!
done
"""

CGI_SLOW = r"""#!/bin/sh
sleep "${QUERY_STRING:-2}"
printf 'Content-Type: text/plain\r\n\r\nslow %s\n' "$APP_VERSION"
"""

CGI_ENV = r"""#!/bin/sh
printf 'Content-Type: text/plain\r\n\r\n'
env | sort
"""

HEROKUISH = r"""#!/bin/sh
# Stand-in for herokuish (/bin/herokuish, linked as /start, /exec, /build): runs a process type
# of /app/Procfile the way "herokuish procfile start TYPE" does.
case "$(basename "$0")" in
  start) set -- procfile start "$@" ;;
  exec) set -- procfile exec "$@" ;;
  build) echo "herokuish stand-in: images come prebuilt, nothing to build" >&2; exit 1 ;;
esac
case "$1 ${2:-}" in
  "procfile start")
    type=${3:-web}
    cmd=$(sed -n "s/^$type:[[:space:]]*//p" /app/Procfile | head -n 1)
    if [ -z "$cmd" ]; then
      echo "herokuish stand-in: no process type '$type' in /app/Procfile" >&2
      exit 1
    fi
    cd /app && exec sh -c "exec $cmd"
    ;;
  "procfile exec")
    shift 2
    cd /app && exec "$@"
    ;;
  *)
    echo "usage: herokuish procfile start TYPE | procfile exec CMD..." >&2
    exit 2
    ;;
esac
"""

CNB_LAUNCHER = r"""#!/bin/sh
# Stand-in for the Cloud Native Buildpacks launcher. /cnb/process/TYPE links here and runs TYPE;
# the launcher itself runs $CNB_PROCESS_TYPE (default web), or its arguments as a command.
self=$(basename "$0")
if [ "$self" = launcher ] && [ $# -gt 0 ]; then
  [ "$1" = -- ] && shift
  cd "${CNB_APP_DIR:-/workspace}" && exec "$@"
fi
type=$self
[ "$type" = launcher ] && type=${CNB_PROCESS_TYPE:-web}
cmd=$(sed -n "s/^$type:[[:space:]]*//p" /cnb/processes | head -n 1)
if [ -z "$cmd" ]; then
  echo "launcher stand-in: no process type '$type'" >&2
  exit 1
fi
cd "${CNB_APP_DIR:-/workspace}" && exec sh -c "exec $cmd \"\$@\"" "$type" "$@"
"""


def index_html(version: str) -> str:
    return (
        "<!doctype html>\n<title>shipway test app</title>\n"
        f'<p id="version">shipway-test app {version}</p>\n'
    )


@dataclass
class Tree:
    """Files for a tar: path -> (mode, bytes) and path -> symlink target."""

    files: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    dirs: dict[str, int] = field(default_factory=dict)

    def file(self, path: str, content: str | bytes, mode: int = 0o644) -> None:
        data = content.encode() if isinstance(content, str) else content
        self.files[path.lstrip("/")] = (mode, data)

    def link(self, path: str, target: str) -> None:
        self.links[path.lstrip("/")] = target

    def dir(self, path: str, mode: int = 0o755) -> None:
        self.dirs[path.lstrip("/")] = mode

    def tar(self) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
            all_dirs = dict(self.dirs)
            for path in [*self.files, *self.links]:
                parent = path.rpartition("/")[0]
                while parent and parent not in all_dirs:
                    all_dirs[parent] = 0o755
                    parent = parent.rpartition("/")[0]
            for path in sorted(all_dirs):
                info = tarfile.TarInfo(path)
                info.type = tarfile.DIRTYPE
                info.mode = all_dirs[path]
                info.mtime = MTIME
                tar.addfile(info)
            for path in sorted(self.files):
                mode, data = self.files[path]
                info = tarfile.TarInfo(path)
                info.size = len(data)
                info.mode = mode
                info.mtime = MTIME
                tar.addfile(info, io.BytesIO(data))
            for path in sorted(self.links):
                info = tarfile.TarInfo(path)
                info.type = tarfile.SYMTYPE
                info.linkname = self.links[path]
                info.mode = 0o777
                info.mtime = MTIME
                tar.addfile(info)
        return buf.getvalue()


def base_tree(busybox: Path) -> Tree:
    tree = Tree()
    tree.file("/bin/busybox", busybox.read_bytes(), 0o755)
    applets = subprocess.run(
        [str(busybox), "--list-full"], check=True, capture_output=True, text=True
    ).stdout.split()
    for applet in applets:
        if applet.rsplit("/", 1)[-1] != "busybox":
            tree.link("/" + applet, "/bin/busybox")
    tree.file("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n")
    tree.file("/etc/group", "root:x:0:\nnogroup:x:65534:\n")
    tree.dir("/tmp", 0o1777)
    tree.dir("/root", 0o700)
    for d in ("/proc", "/sys", "/dev", "/etc", "/var", "/run"):
        tree.dir(d)
    tree.file("/app/serve", SERVE, 0o755)
    tree.file("/app/respond", RESPOND, 0o755)
    tree.file("/app/worker", WORKER, 0o755)
    tree.file("/app/www/index.html", index_html("base"))
    tree.file("/app/www/version", "base\n")
    tree.file("/app/www/up", "ok\n")
    tree.file("/app/www/cgi-bin/env", CGI_ENV, 0o755)
    tree.file("/app/www/cgi-bin/slow", CGI_SLOW, 0o755)
    return tree


@dataclass
class Variant:
    """An image built FROM the base with a Dockerfile and a context of files."""

    repo: str  # under the prefix, e.g. "web"
    tag: str
    kind: str  # dockerfile | herokuish | pack: what a backend should classify it as
    dockerfile: str
    context: Tree


def app_variant(tag: str, env: Iterable[str] = ()) -> Variant:
    ctx = Tree()
    ctx.file("www/index.html", index_html(tag))
    ctx.file("www/version", tag + "\n")
    envs = "".join(f"ENV {e}\n" for e in env)
    dockerfile = f"FROM {{base}}\nCOPY www/ /app/www/\nENV APP_VERSION={tag}\n{envs}"
    return Variant("web", tag, "dockerfile", dockerfile, ctx)


def herokuish_variant() -> Variant:
    ctx = Tree()
    ctx.file("herokuish", HEROKUISH, 0o755)
    ctx.file("Procfile", "web: /app/serve\nworker: /app/worker\n")
    ctx.file("www/index.html", index_html("herokuish-v1"))
    ctx.file("www/version", "herokuish-v1\n")
    dockerfile = (
        "FROM {base}\n"
        "COPY herokuish /bin/herokuish\n"
        "COPY Procfile /app/Procfile\n"
        "COPY www/ /app/www/\n"
        # /start, /exec, /build -> /bin/herokuish: the context carries the links (COPY keeps
        # symlinks), so no RUN is needed.
        "COPY links/ /\n"
        "ENV USER=herokuishuser APP_VERSION=herokuish-v1 PORT=5000\n"
        "EXPOSE 5000\n"
        'CMD ["/start", "web"]\n'
    )
    for name in ("start", "exec", "build"):
        ctx.link(f"links/{name}", "/bin/herokuish")
    return Variant("herokuish", "v1", "herokuish", dockerfile, ctx)


def cnb_variant() -> Variant:
    buildpack = {"id": "shipway-test/busybox", "version": "0.1.0"}
    processes = [
        {"type": "web", "command": ["/app/serve"], "args": [], "direct": True,
         "buildpackID": buildpack["id"]},
        {"type": "worker", "command": ["/app/worker"], "args": [], "direct": True,
         "buildpackID": buildpack["id"]},
    ]
    launcher = {
        "version": "0.0.0-shipway-test",
        "source": {"git": {"repository": "", "commit": ""}},
    }
    build_metadata = {
        "processes": processes,
        "buildpacks": [{**buildpack, "homepage": ""}],
        "launcher": launcher,
        "bom": None,
    }
    lifecycle_metadata = {
        "app": [],
        "buildpacks": [{"key": buildpack["id"], "version": buildpack["version"], "layers": {}}],
        "launcher": launcher,
        "runImage": {"topLayer": "", "reference": "", "image": "shipway-test/base"},
        "stack": {"runImage": {"image": "shipway-test/base"}},
    }
    ctx = Tree()
    ctx.file("cnb/lifecycle/launcher", CNB_LAUNCHER, 0o755)
    ctx.file("cnb/processes", "web: /app/serve\nworker: /app/worker\n")
    ctx.link("cnb/process/web", "../lifecycle/launcher")
    ctx.link("cnb/process/worker", "../lifecycle/launcher")
    ctx.file("www/index.html", index_html("cnb-v1"))
    ctx.file("www/version", "cnb-v1\n")
    ctx.dir("workspace")
    ctx.dir("layers")

    def label(key: str, value: object) -> str:
        return f"LABEL {key}={json.dumps(json.dumps(value, separators=(',', ':')))}\n"

    dockerfile = (
        "FROM {base}\n"
        "COPY cnb/ /cnb/\n"
        "COPY www/ /app/www/\n"
        "COPY workspace/ /workspace/\n"
        "COPY layers/ /layers/\n"
        "ENV CNB_APP_DIR=/workspace CNB_LAYERS_DIR=/layers CNB_PLATFORM_API=0.9 "
        "APP_VERSION=cnb-v1 "
        "PATH=/cnb/process:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
        "WORKDIR /workspace\n"
        + label("io.buildpacks.build.metadata", build_metadata)
        + label("io.buildpacks.lifecycle.metadata", lifecycle_metadata)
        + label("io.buildpacks.project.metadata", {})
        + "LABEL io.buildpacks.stack.id=io.buildpacks.stacks.shipway-test\n"
        + 'ENTRYPOINT ["/cnb/process/web"]\n'
        + "CMD []\n"
    )
    return Variant("cnb", "v1", "pack", dockerfile, ctx)


def proxy_variant(binary: Path, version: str) -> Variant:
    """The proxy the Docker backend drives in tests: Caddy ``version``, built with Go from
    the Go module proxy (a static binary, docker-testenv's ensure_caddy), in an image built
    FROM scratch and tagged by its version (a new version is a new image, never a stale
    one). It behaves like the official image for what shipway uses: ``caddy`` on the PATH,
    a JSON config, ``caddy reload``. Production slots use the official image
    (``proxy_image``, default ``caddy:2``)."""
    ctx = Tree()
    ctx.file("rootfs/usr/bin/caddy", binary.read_bytes(), 0o755)
    ctx.file("rootfs/etc/nsswitch.conf", "hosts: files dns\n")
    ctx.file("rootfs/etc/passwd", "root:x:0:0:root:/root:/bin/false\n")
    for d in ("config", "data", "tmp", "etc/shipway"):
        ctx.dir(f"rootfs/{d}", 0o1777 if d == "tmp" else 0o755)
    dockerfile = (
        "FROM scratch\n"
        "COPY rootfs/ /\n"
        "ENV PATH=/usr/bin XDG_CONFIG_HOME=/config XDG_DATA_HOME=/data\n"
        # the official image says its version so too (shipway checks it is 2.8 or later)
        f"ENV CADDY_VERSION={version}\n"
        f"LABEL org.shipway.testenv.caddy={version}\n"
        "EXPOSE 80\n"
        'CMD ["caddy", "run", "--config", "/etc/shipway/caddy.json"]\n'
    )
    return Variant("proxy", f"caddy-{version}", "proxy", dockerfile, ctx)


PG_ENTRYPOINT = r"""#!/bin/sh
# The test image's stand-in for the official postgres image's entrypoint, as far as shipway
# uses it: the same environment (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, PGDATA) and
# the same behaviour (initdb when the data directory is empty, then the server as the
# postgres user, listening on every address of the container, password required).
set -eu
if [ "${1:-}" = postgres ] && [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA"
  chown -R postgres:postgres "$PGDATA"
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?the official image refuses to start without it, and so does this one}"
  user=${POSTGRES_USER:-postgres}
  pw=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pw"
  initdb -D "$PGDATA" -U "$user" --auth=scram-sha-256 --pwfile="$pw" \
    --encoding=UTF8 --locale=C.UTF-8
  rm -f "$pw"
  printf "listen_addresses = '*'\n" >>"$PGDATA/postgresql.conf"
  printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  db=${POSTGRES_DB:-$user}
  if [ "$db" != postgres ]; then
    echo "CREATE DATABASE \"$db\";" | postgres --single -D "$PGDATA" postgres >/dev/null
  fi
  echo "initdb done: database $db, user $user"
fi
exec "$@"
"""

REDIS_ENTRYPOINT = r"""#!/bin/sh
# The test image's stand-in for the official redis image's entrypoint: options alone run
# redis-server with them; redis-server runs as the redis user, its data in /data.
set -eu
if [ "${1#-}" != "${1:-}" ] || [ "${1%.conf}" != "${1:-}" ]; then
  set -- redis-server "$@"
fi
if [ "${1:-}" = redis-server ] && [ "$(id -u)" = 0 ]; then
  chown -R redis:redis .
  exec setpriv --reuid=redis --regid=redis --init-groups "$0" "$@"
fi
exec "$@"
"""

#: the official images' interface each accessory image keeps (what shipway relies on)
ACCESSORY_TAILS = {
    "postgres": (
        "ENV PATH=/usr/lib/postgresql/{version}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
        "/usr/bin:/sbin:/bin PGDATA=/var/lib/postgresql/data LANG=C.UTF-8\n"
        # the package's own cluster (made by its postinst) is not the image's
        "RUN rm -rf /var/lib/postgresql/{version}/main /etc/postgresql/{version}/main \\\n"
        " && mkdir -p /var/lib/postgresql/data /var/run/postgresql \\\n"
        " && chown postgres:postgres /var/lib/postgresql/data /var/run/postgresql\n"
        "VOLUME /var/lib/postgresql/data\n"
        "STOPSIGNAL SIGINT\n"
        "EXPOSE 5432\n"
        'CMD ["postgres"]\n'
    ),
    "redis": (
        "RUN mkdir -p /data && chown redis:redis /data\n"
        "VOLUME /data\n"
        "WORKDIR /data\n"
        "EXPOSE 6379\n"
        'CMD ["redis-server"]\n'
    ),
}


def accessory_variant(repo: str, tag: str, debs: Path) -> Variant:
    """An accessory's server for tests, in place of the official image of the same name and
    tag (``postgres:15``, ``redis:7``: nothing can be pulled here): built FROM the Python base
    (Debian bookworm) with Debian's own packages — the .deb files in ``debs``, downloaded by
    docker-testenv with this machine's apt (the package and what it needs beyond the base),
    installed offline — and an entrypoint taking what the official image's takes."""
    ctx = Tree()
    for deb in sorted(debs.glob("*.deb")):
        ctx.file(f"debs/{deb.name}", deb.read_bytes())
    ctx.file("policy-rc.d", "#!/bin/sh\nexit 101\n", 0o755)
    ctx.file("docker-entrypoint.sh", PG_ENTRYPOINT if repo == "postgres" else REDIS_ENTRYPOINT, 0o755)
    dockerfile = (
        "FROM {base}\n"
        "COPY debs/ /tmp/debs/\n"
        # no package's service is started in a build (Debian's policy-rc.d convention)
        "COPY policy-rc.d /usr/sbin/policy-rc.d\n"
        "RUN DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
        "/tmp/debs/*.deb \\\n"
        " && rm -rf /tmp/debs /usr/sbin/policy-rc.d /var/lib/apt/lists/* /var/cache/apt/*.bin\n"
        "COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh\n"
        'ENTRYPOINT ["docker-entrypoint.sh"]\n'
        + ACCESSORY_TAILS[repo].format(version=tag)
        + f"LABEL org.shipway.testenv.debs={json.dumps(' '.join(sorted(p.name for p in debs.glob('*.deb'))))}\n"
    )
    return Variant(repo, tag, "accessory", dockerfile, ctx)


def variants() -> list[Variant]:
    return [
        app_variant("v1"),
        app_variant("v2"),
        app_variant("unhealthy", ["UP_STATUS=500"]),
        app_variant("crash", ["CRASH_ON_START=1"]),
        herokuish_variant(),
        cnb_variant(),
    ]


def sha256(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()


def log(msg: str) -> None:
    print(f"[docker-testenv] images: {msg}", file=sys.stderr, flush=True)


class Images:
    def __init__(self, client: docker.DockerClient, registry: str, prefix: str) -> None:
        self.client = client
        self.registry = registry
        self.prefix = prefix

    def local(self, ref: str) -> Image | None:
        try:
            return self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            return None

    def registry_digest(self, repo: str, tag: str) -> str | None:
        """The manifest digest the registry serves for prefix/repo:tag, None when absent."""
        path = self.prefix.split("/", 1)[1] + "/" + repo
        req = urllib.request.Request(
            f"http://{self.registry}/v2/{path}/manifests/{tag}",
            method="HEAD",
            headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                digest = resp.headers.get("Docker-Content-Digest")
                return str(digest) if digest else None
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def up_to_date(self, ref: str, repo: str, tag: str, want_hash: str) -> bool:
        image = self.local(ref)
        if image is None or image.labels.get(HASH_LABEL) != want_hash:
            return False
        digest = self.registry_digest(repo, tag)
        repo_digests: list[str] = image.attrs.get("RepoDigests") or []
        return digest is not None and f"{self.prefix}/{repo}@{digest}" in repo_digests

    def push(self, repo: str, tag: str) -> str:
        name = f"{self.prefix}/{repo}"
        for chunk in self.client.api.push(name, tag=tag, stream=True, decode=True):
            if "error" in chunk:
                raise RuntimeError(f"push {name}:{tag}: {chunk['error']}")
        digest = self.registry_digest(repo, tag)
        if digest is None:
            raise RuntimeError(f"push {name}:{tag}: the registry has no manifest afterwards")
        return digest

    def ensure_base(self, busybox: Path) -> tuple[str, str]:
        tree = base_tree(busybox)
        data = tree.tar()
        want = sha256(RECIPE_VERSION.encode(), data)
        ref = f"{self.prefix}/base:latest"
        if self.up_to_date(ref, "base", "latest", want):
            return ref, want
        if (img := self.local(ref)) is None or img.labels.get(HASH_LABEL) != want:
            log(f"importing {ref} ({len(data) // 1024} KiB root filesystem)")
            changes = [
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "ENV PORT=8080",
                "WORKDIR /app",
                "EXPOSE 8080",
                'CMD ["/app/serve"]',
                f"LABEL {HASH_LABEL}={want} {KIND_LABEL}=dockerfile",
            ]
            self.client.api.import_image_from_data(
                data, repository=f"{self.prefix}/base", tag="latest", changes=changes
            )
            img = self.local(ref)
            if img is None or img.labels.get(HASH_LABEL) != want:
                raise RuntimeError(f"import of {ref} did not produce the expected image")
        log(f"pushing {ref}")
        self.push("base", "latest")
        return ref, want

    def ensure_python_base(self, rootfs: Path) -> tuple[str, str]:
        """``python-base:bookworm`` from the debootstrap tar (hashed by its bytes, so a warm
        ``up`` neither imports nor pushes it again)."""
        h = hashlib.sha256(RECIPE_VERSION.encode())
        with rootfs.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        want = h.hexdigest()
        repo, tag = "python-base", "bookworm"
        ref = f"{self.prefix}/{repo}:{tag}"
        if self.up_to_date(ref, repo, tag, want):
            return ref, want
        if (img := self.local(ref)) is None or img.labels.get(HASH_LABEL) != want:
            log(f"importing {ref} ({rootfs.stat().st_size // (1 << 20)} MiB root filesystem)")
            changes = [
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "ENV LANG=C.UTF-8",
                'CMD ["python3"]',
                f"LABEL {HASH_LABEL}={want} {KIND_LABEL}=dockerfile",
            ]
            self.client.api.import_image_from_file(
                str(rootfs), repository=f"{self.prefix}/{repo}", tag=tag, changes=changes
            )
            img = self.local(ref)
            if img is None or img.labels.get(HASH_LABEL) != want:
                raise RuntimeError(f"import of {ref} did not produce the expected image")
        log(f"pushing {ref}")
        self.push(repo, tag)
        return ref, want

    def ensure_variant(self, v: Variant, base_ref: str, base_hash: str) -> str:
        dockerfile = v.dockerfile.replace("{base}", base_ref)
        ctx = Tree(dict(v.context.files), dict(v.context.links), dict(v.context.dirs))
        ctx.file("Dockerfile", dockerfile)
        data = ctx.tar()
        want = sha256(RECIPE_VERSION.encode(), base_hash.encode(), data)
        ref = f"{self.prefix}/{v.repo}:{v.tag}"
        if self.up_to_date(ref, v.repo, v.tag, want):
            return ref
        if (img := self.local(ref)) is None or img.labels.get(HASH_LABEL) != want:
            log(f"building {ref}")
            t0 = time.monotonic()
            self.client.images.build(
                fileobj=io.BytesIO(data),
                custom_context=True,
                tag=ref,
                labels={HASH_LABEL: want, KIND_LABEL: v.kind},
                pull=False,
                rm=True,
                forcerm=True,
            )
            log(f"built {ref} in {time.monotonic() - t0:.1f}s")
        log(f"pushing {ref}")
        self.push(v.repo, v.tag)
        return ref


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--docker", required=True, help="engine to build on, e.g. unix:///x.sock")
    ap.add_argument("--registry", required=True, help="host:port")
    ap.add_argument("--prefix", required=True, help="registry/namespace for the refs")
    ap.add_argument("--busybox", default="/bin/busybox", type=Path)
    ap.add_argument("--state", required=True, type=Path, help="where images.json is written")
    ap.add_argument("--caddy", type=Path, help="the caddy binary the proxy image holds")
    ap.add_argument("--caddy-version", default="", help="its version (the image's tag)")
    ap.add_argument("--python-base", type=Path, help="tar of a Debian root fs with python3")
    ap.add_argument(
        "--accessory",
        action="append",
        default=[],
        metavar="REPO:TAG:DEBS",
        help="an accessory image (postgres:15) FROM the Python base, from the .debs in DEBS",
    )
    args = ap.parse_args(argv)

    client = docker.DockerClient(base_url=args.docker, timeout=300)
    images = Images(client, args.registry, args.prefix)
    t0 = time.monotonic()
    base_ref, base_hash = images.ensure_base(args.busybox)
    refs: dict[str, Any] = {"base": base_ref}
    if args.python_base:
        python_ref, python_hash = images.ensure_python_base(args.python_base)
        refs["python-base:bookworm"] = python_ref
        for item in args.accessory:
            repo, tag, debs = item.split(":", 2)
            variant = accessory_variant(repo, tag, Path(debs))
            refs[f"{repo}:{tag}"] = images.ensure_variant(variant, python_ref, python_hash)
    extra = [proxy_variant(args.caddy, args.caddy_version)] if args.caddy else []
    for v in [*variants(), *extra]:
        refs[f"{v.repo}:{v.tag}"] = images.ensure_variant(v, base_ref, base_hash)
    args.state.mkdir(parents=True, exist_ok=True)
    manifest = {}
    for key, ref in refs.items():
        img = images.local(ref)
        manifest[key] = {
            "ref": ref,
            "id": img.id if img else None,
            "repo_digests": img.attrs.get("RepoDigests") if img else None,
            "labels": img.labels if img else None,
        }
    (args.state / "images.json").write_text(json.dumps(manifest, indent=2) + "\n")
    log(f"{len(refs)} images ready in {time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
