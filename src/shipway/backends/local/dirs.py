"""The state directory: where the local backend keeps everything, and how it writes it.

Layout (``<state>`` is ``slot.state_dir``, else ``$SHIPWAY_STATE_DIR``, else
``$XDG_STATE_HOME/shipway``, else ``~/.local/state/shipway``)::

    <state>/
      supervisor/            one supervisord per state dir: its config, socket, pid, log,
        programs/*.conf      and one include file per supervised program
      router/<port>/         one router per port: tables/<app>.<slot>.json, its log
      ports.json             ports handed out to programs (guarded by ports.lock)
      _events/               every operation's events on this machine, any backend's
                             (events/live.py: the dashboard's live view)
      <app>/<slot>/
        lock                 the slot's lock: flock-held, holder written inside
        records.json.gz      the release records of the slot (written atomically)
        releases/r<N>/       snapshot of the source for revision N (+ r<N>.json sidecar)
        programs.json        supervised programs of the slot: ports, snapshot, names
        routes.json          host -> program, per router port
        generations.json     blue-green: the slot's generations (snapshot, creation)
        claims.json          blue-green: generation -> host -> program, since when
        run/                 per-program env files (0600) and start counters
        logs/                one log per program instance, release-command logs
        volumes/<name>/      the slot's volumes: outside every snapshot, each placed in a
                             snapshot as a symlink at its path; deleted only by destroy

What must never happen: a torn file. Every state file is written to a temporary name and
renamed into place, so a ``kill -9`` at any instant leaves the old or the new version.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipway.events.live import default_state_dir
from shipway.spec.model import Slot, Target

DEFAULT_ROUTER_PORT = 8800
SOCKET_PATH_MAX = 100  # sun_path is 108 bytes on Linux; keep a margin


def state_root(slot: Slot, base_dir: Path, environ: Mapping[str, str] | None = None) -> Path:
    """Where a slot keeps its state. Pure: nothing is created here."""
    env = os.environ if environ is None else environ
    if slot.state_dir:
        return (base_dir / os.path.expanduser(slot.state_dir)).resolve()
    return default_state_dir(env)


#: room left under the state directory for what shipway keeps there (an app's environment
#: nests deep: envs/<id>/lib/python3.X/site-packages/<package>/…)
STATE_DEPTH = 1024


def check_state_root(root: Path, slot: Slot, environ: Mapping[str, str] | None = None) -> None:
    """InputError (exit 2, nothing touched) when ``root`` cannot be a state directory: a
    part of it is a file, a name in it is longer than the file system allows, or the path is
    so long that what shipway keeps under it could not be written. The message names where
    the directory came from and the fix."""
    from shipway.errors import InputError

    env = os.environ if environ is None else environ
    if slot.state_dir:
        origin = f"slots.{slot.name}.state_dir ({slot.state_dir!r})"
    elif env.get("SHIPWAY_STATE_DIR"):
        origin = "SHIPWAY_STATE_DIR"
    else:
        origin = "the default state directory (XDG_STATE_HOME or ~/.local/state)"
    fix = "hint: point it at a directory, or at a path where one can be made"
    try:
        name_max = os.pathconf("/", "PC_NAME_MAX")
        path_max = os.pathconf("/", "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    longest = max(root.parts, key=len)
    if len(longest.encode()) > name_max:
        raise InputError(
            f"{origin}: a name in it is {len(longest.encode())} bytes long, more than the "
            f"file system's {name_max} (hint: use a shorter name)"
        )
    for part in (root, *root.parents):
        if os.path.lexists(part) and not part.is_dir():
            raise InputError(f"{origin}: {part} is a file, not a directory ({fix})")
    if len(str(root).encode()) + STATE_DEPTH > path_max:
        raise InputError(
            f"{origin}: {len(str(root).encode())} bytes long; what shipway keeps there needs "
            f"paths up to {STATE_DEPTH} bytes longer, beyond this system's {path_max} "
            "(hint: use a shorter path)"
        )


def router_port(slot: Slot, environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    if slot.router_port:
        return slot.router_port
    raw = env.get("SHIPWAY_ROUTER_PORT")
    if raw:
        try:
            port = int(raw)
        except ValueError:
            port = -1
        if not 0 < port < 65536:
            from shipway.errors import InputError

            raise InputError(f"SHIPWAY_ROUTER_PORT={raw!r} is not a port number (1-65535)")
        return port
    return DEFAULT_ROUTER_PORT


def socket_base() -> Path:
    """Where sockets whose preferred path is too long live: ``<temp dir>/shipway-<uid>``."""
    return Path(tempfile.gettempdir()) / f"shipway-{os.getuid()}"


def socket_path(preferred: Path) -> Path:
    """A unix socket path short enough for the kernel: ``preferred`` when it fits, else a
    private directory under the temp dir keyed by the preferred path."""
    if len(str(preferred)) <= SOCKET_PATH_MAX:
        return preferred
    key = hashlib.sha256(str(preferred).encode()).hexdigest()[:16]
    return socket_base() / key / preferred.name


def _refuse_unless_private(path: Path) -> None:
    """``path`` must be a real directory (not a symlink) of this user, and is made one no
    one else may write to or list: in a shared temp dir, anyone could have made it first."""
    from shipway.errors import BackendError

    st = path.lstat()
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise BackendError(
            f"{path} is not a directory of its own (a symlink, or another kind of file); "
            "refusing to use it (hint: remove it, and shipway makes it again, private)"
        )
    if st.st_uid != os.getuid():
        raise BackendError(
            f"{path} belongs to another user (uid {st.st_uid}); refusing to use it (hint: "
            "remove it, or set TMPDIR to a directory of your own)"
        )
    if st.st_mode & 0o077:  # ours, but open to others (an older shipway made it so)
        os.chmod(path, 0o700)


def private_dir(path: Path) -> Path:
    """Create ``path`` (mode 0700) and refuse one owned by another user. Under the shared
    temp dir, its ``shipway-<uid>`` parent is made 0700 first and checked too (not a
    symlink, ours, private): whoever owns it could swap the directories inside."""
    base = socket_base()
    if base in path.parents or path == base:
        with writing(base), contextlib.suppress(FileExistsError):
            base.mkdir(mode=0o700)
        _refuse_unless_private(base)
    with writing(path):
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.getuid():
        from shipway.errors import BackendError

        raise BackendError(f"{path} belongs to another user; refusing to use it")
    if base in path.parents:
        _refuse_unless_private(path)
    return path


def private_logs(path: Path) -> Path:
    """A logs directory: 0700, made so again if it was not (what the processes print may
    hold anything, secret values included). Every log in it is unreachable to others,
    whatever its own mode (a file supervisord makes when it rotates a log is 0644)."""
    private_dir(path)
    if stat.S_IMODE(path.stat().st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def private_log(path: Path) -> None:
    """Create ``path`` (or keep its content) as a 0600 log: whoever writes it next keeps
    that mode."""
    with writing(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)


def contained(root: Path, relative: str) -> Path:
    """``root / relative``, refused when it leads out of ``root``: a path is resolved (every
    symlink on the way followed) before anything is written there, so a directory of the
    app that is a symlink (``config -> /etc``) can never have a file written through it."""
    base = root.resolve()
    path = (root / relative).resolve()
    if path != base and base not in path.parents:
        from shipway.errors import BackendError

        link = next(
            (p for p in [root / relative, *(root / relative).parents] if p.is_symlink()), None
        )
        via = f" ({link} is a symlink to {os.readlink(link)})" if link is not None else ""
        raise BackendError(
            f"{relative!r} leads out of {root} to {path}{via}; refusing to write it (hint: "
            "make that directory of the app a real directory, or move the file)"
        )
    return path


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """While ``path`` is written: an OSError (a full disk, above all) becomes WriteFailed,
    which names the file — an OSError of a ``write`` names none."""
    try:
        yield
    except OSError as exc:
        from shipway.errors import WriteFailed

        raise WriteFailed(path, exc) from exc


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` so a reader sees the old or the new file, never a torn one
    (on a full disk: the old one, and WriteFailed naming the file)."""
    with writing(path):
        _write_atomic(path, data, mode)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json(path: Path, doc: Any, mode: int = 0o644) -> None:
    write_atomic(path, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode(), mode)


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default
    except (OSError, ValueError) as exc:
        from shipway.errors import BackendError

        raise BackendError(f"{path} cannot be read: {exc}") from exc


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """A short exclusive lock between processes (held by the kernel: freed if we die)."""
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@dataclass(frozen=True)
class SlotDirs:
    """The paths of one app in one slot (the machinery it shares with other slots —
    supervisor, routers, ports — is found from ``root`` by its owner)."""

    root: Path
    app: str
    slot: str

    @classmethod
    def of(cls, root: Path, target: Target) -> SlotDirs:
        return cls(root, target.app, target.slot)

    @property
    def base(self) -> Path:
        return self.root / self.app / self.slot

    @property
    def lock(self) -> Path:
        return self.base / "lock"

    @property
    def records(self) -> Path:
        return self.base / "records.json.gz"

    @property
    def current_snapshot(self) -> Path:
        return self.base / "snapshot.json"

    @property
    def releases(self) -> Path:
        return self.base / "releases"

    @property
    def programs(self) -> Path:
        return self.base / "programs.json"

    @property
    def routes(self) -> Path:
        return self.base / "routes.json"

    @property
    def generations(self) -> Path:
        return self.base / "generations.json"

    @property
    def claims(self) -> Path:
        return self.base / "claims.json"

    @property
    def run(self) -> Path:
        return self.base / "run"

    @property
    def logs(self) -> Path:
        return self.base / "logs"

    @property
    def volumes(self) -> Path:
        return self.base / "volumes"

    def volume(self, name: str) -> Path:
        return self.volumes / name


# -- release records --------------------------------------------------------------------


def read_records_file(path: Path) -> list[dict[str, Any]]:
    """The stored records (codec JSON form). One gzip'd file, replaced atomically."""
    from shipway.errors import RecordError

    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise RecordError(f"{path} cannot be read: {exc}") from exc
    try:
        doc = json.loads(gzip.decompress(blob))
    except (OSError, EOFError, ValueError) as exc:
        raise RecordError(f"{path} is corrupt: {exc}") from exc
    records = doc.get("records") if isinstance(doc, dict) else None
    if not isinstance(records, list):
        raise RecordError(f"{path} holds no list of records")
    return records


def write_records_file(path: Path, records: list[dict[str, Any]]) -> None:
    raw = json.dumps({"format": 1, "records": records}, sort_keys=True).encode()
    write_atomic(path, gzip.compress(raw, mtime=0), 0o600)
