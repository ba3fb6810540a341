"""``shipway init``: a commented ``shipway.toml`` from what an app directory already has.

Read, never run: a Procfile (named, not repeated: ``procfile = "Procfile"``), env files
(``env_file``; variables that look like credentials become secrets read from them), an
``app.json`` (name, env, formation), ``requirements.txt`` / ``pyproject.toml`` /
``package.json`` (the stack and its build), a ``Dockerfile`` (its port; the image for
docker and kubernetes slots). Where nothing says how the app starts, the command and the
health path are guesses, and the file says so next to them. With nothing at all, a static
file server stands in, so the spec deploys as written and shows the whole loop.

What is written must validate and deploy on the local backend as it is; the caller checks
it with the spec's own parser before anything is written. Values of env files never
appear in the text (only variable names), since they may be secrets.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipway.spec import envfile, procfile
from shipway.spec.limits import MAX_SPEC_BYTES, Unreadable, read_regular_file

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
ENV_FILES = (".env",)
DEFAULT_PORT = 8000
STAND_IN = ("python3", "-m", "http.server", "$PORT", "--bind", "0.0.0.0")


@dataclass
class Proc:
    name: str
    command: tuple[str, ...] | None  # None: the Procfile gives it
    port: int | None = None
    replicas: int = 1
    guessed: str = ""  # why the command is a guess (empty: it was declared)


@dataclass
class Scaffold:
    """What ``init`` found and the spec text it writes."""

    name: str
    found: list[str] = field(default_factory=list)
    guesses: list[str] = field(default_factory=list)
    procfile: str | None = None
    procs: list[Proc] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    env_files: list[str] = field(default_factory=list)
    secrets: list[tuple[str, str]] = field(default_factory=list)  # (name, from where)
    commented_secrets: list[tuple[str, str]] = field(default_factory=list)
    build: str = ""
    dockerfile: bool = False
    notes: list[str] = field(default_factory=list)
    release_command: str = ""
    release_why: list[str] = field(default_factory=list)  # comment lines above it
    volumes: list[tuple[str, str, list[str]]] = field(default_factory=list)  # name, path, why
    #: what the user must change in the app itself (a Django project's settings), said in
    #: the file and by ``init``
    changes: list[str] = field(default_factory=list)

    def text(self) -> str:
        return render(self)


def _read(path: Path) -> str | None:
    try:
        return read_regular_file(path, MAX_SPEC_BYTES).decode("utf-8")
    except (Unreadable, UnicodeDecodeError):
        return None


def _json(path: Path) -> dict[str, Any]:
    text = _read(path)
    try:
        data = json.loads(text) if text is not None else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def dns_label(raw: str) -> str:
    label = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")[:63].strip("-")
    return label or "app"


def scan(directory: Path) -> Scaffold:
    """What ``directory`` holds, as the parts of a spec."""
    app_json = _json(directory / "app.json")
    package = _json(directory / "package.json")
    pyproject = _pyproject(directory / "pyproject.toml")
    raw_name = (
        app_json.get("name")
        or package.get("name")
        or pyproject.get("project", {}).get("name")
        or directory.resolve().name
    )
    s = Scaffold(name=dns_label(str(raw_name).split("/")[-1]))
    port = _dockerfile(s, directory)
    requirements = _python(s, directory, pyproject)
    _node(s, package)
    _procfile(s, directory, port)
    if not s.procs:
        _guess_process(s, directory, requirements, package, port)
    _app_json(s, app_json)
    _env_files(s, directory)
    _django(s, directory, requirements)
    return s


def _pyproject(path: Path) -> dict[str, Any]:
    text = _read(path)
    try:
        return tomllib.loads(text) if text is not None else {}
    except tomllib.TOMLDecodeError:
        return {}


def _dockerfile(s: Scaffold, directory: Path) -> int | None:
    text = _read(directory / "Dockerfile")
    if text is None:
        return None
    s.dockerfile = True
    m = re.search(r"^\s*EXPOSE\s+(\d+)", text, re.MULTILINE | re.IGNORECASE)
    port = int(m.group(1)) if m and 0 < int(m.group(1)) < 65536 else None
    s.found.append("Dockerfile" + (f" (EXPOSE {port})" if port else ""))
    return port


def _python(s: Scaffold, directory: Path, pyproject: dict[str, Any]) -> set[str]:
    """The Python packages the app depends on (lower-case names)."""
    names: set[str] = set()
    text = _read(directory / "requirements.txt")
    if text is not None:
        s.found.append("requirements.txt")
        s.build = "requirements.txt"
        for line in text.splitlines():
            m = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
            if m:
                names.add(m.group(1).lower())
    deps = pyproject.get("project", {}).get("dependencies", [])
    if pyproject:
        s.found.append("pyproject.toml")
        s.build = s.build or "pyproject.toml"
    for dep in deps if isinstance(deps, list) else []:
        m = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", str(dep))
        if m:
            names.add(m.group(1).lower())
    return names


def _node(s: Scaffold, package: dict[str, Any]) -> None:
    if package:
        s.found.append("package.json")
        s.build = s.build or "package.json"


def _procfile(s: Scaffold, directory: Path, port: int | None) -> None:
    if not (directory / "Procfile").exists():
        return
    found = procfile.read("Procfile", directory)
    if not found.entries:
        s.notes.append("the Procfile declares no process type shipway can use")
        return
    usable = {n: e for n, e in found.entries.items() if DNS_LABEL.match(n)}
    types = [*found.entries, *(["release"] if found.release else [])]
    s.found.append(f"Procfile ({', '.join(types)})")
    for problem in found.problems:
        s.notes.append(f"Procfile: {problem}")
    for name in found.entries:
        if name not in usable:
            s.notes.append(
                f"the Procfile's {name!r} type is left out: a process name is lowercase "
                "letters, digits and '-' (rename it there, then use procfile = \"Procfile\")"
            )
    if len(usable) == len(found.entries) and not found.problems:
        s.procfile = "Procfile"
        s.procs = [Proc(n, None, port=_port_for(n, port)) for n in found.entries]
        return
    # a type shipway cannot name as it is: the usable ones are written out instead
    s.procs = [Proc(n, e.command, port=_port_for(n, port)) for n, e in usable.items()]


def _port_for(name: str, port: int | None) -> int | None:
    """Heroku routes HTTP to the ``web`` type only."""
    return (port or DEFAULT_PORT) if name == "web" else None


def _guess_process(
    s: Scaffold, directory: Path, requirements: set[str], package: dict[str, Any], port: int | None
) -> None:
    scripts = package.get("scripts")
    if isinstance(scripts, dict) and scripts.get("start"):
        why = "package.json's start script; it must listen on $PORT"
        s.procs.append(Proc("web", ("npm", "start"), port or 3000, guessed=why))
        return
    if (directory / "manage.py").exists():
        project = next((p.parent.name for p in sorted(directory.glob("*/wsgi.py"))), None)
        if "gunicorn" in requirements and project:
            command: tuple[str, ...] = ("gunicorn", f"{project}.wsgi", "--bind", "0.0.0.0:$PORT")
        else:
            command = ("python3", "manage.py", "runserver", "0.0.0.0:$PORT", "--noreload")
        s.procs.append(Proc("web", command, port or DEFAULT_PORT, guessed="a Django project"))
        return
    for candidate in ("app.py", "main.py", "wsgi.py", "server.py"):
        text = _read(directory / candidate)
        if text is None:
            continue
        module = candidate[:-3]
        if "gunicorn" in requirements and re.search(r"^app\s*=", text, re.MULTILINE):
            command = ("gunicorn", f"{module}:app", "--bind", "0.0.0.0:$PORT")
        elif "uvicorn" in requirements and re.search(r"^app\s*=", text, re.MULTILINE):
            command = ("uvicorn", f"{module}:app", "--host", "0.0.0.0", "--port", "$PORT")
        else:
            command = ("python3", candidate)
        why = f"{candidate} found; it must listen on $PORT"
        s.procs.append(Proc("web", command, port or DEFAULT_PORT, guessed=why))
        return
    why = "nothing says how the app starts: a static file server stands in"
    s.procs.append(Proc("web", STAND_IN, port or DEFAULT_PORT, guessed=why))


#: where the Django project's SQLite database goes: a directory volume of the slot
DJANGO_DATA = "data"
_SQLITE_NAME = re.compile(r"""BASE_DIR\s*/\s*(['"])db\.sqlite3\1""")
_SQLITE_JOIN = re.compile(r"""os\.path\.join\(\s*BASE_DIR\s*,\s*(['"])db\.sqlite3\1\s*\)""")


def _django(s: Scaffold, directory: Path, requirements: set[str]) -> None:
    """A Django project (``manage.py``): its migrations as the release command, a directory
    volume for its SQLite database, and what its settings must change to use it."""
    if not (directory / "manage.py").exists():
        return
    settings_path = next(iter(sorted(directory.glob("*/settings.py"))), None)
    settings = (_read(settings_path) if settings_path else None) or ""
    if "django" not in requirements and "django" not in settings.lower():
        return
    where = settings_path.relative_to(directory).as_posix() if settings_path else "settings.py"
    procfile_release = s.procfile is not None and _procfile_release(directory)
    if not procfile_release:
        command = "python3 manage.py migrate --noinput"
        s.release_why = [
            "# Django: the migrations run once per deploy, before any new process starts",
        ]
        if re.search(r"^STATIC_ROOT\s*=", settings, re.MULTILINE):
            command += " && python3 manage.py collectstatic --noinput"
            s.release_why.append(f"# (and collectstatic: {where} sets STATIC_ROOT)")
        else:
            s.changes.append(
                f"static files: {where} sets no STATIC_ROOT, so nothing collects them "
                "(runserver with DEBUG serves them; gunicorn does not): set STATIC_ROOT, "
                "serve it (e.g. whitenoise), and add "
                "'&& python3 manage.py collectstatic --noinput' to release_command"
            )
        s.release_command = command
    if "sqlite3" not in settings:
        return
    why = ["# Django's SQLite database: a directory that outlives every release (a file in"]
    why.append("# the app's directory would be a new, empty one each deploy)")
    for pattern, replacement in (
        (_SQLITE_NAME, "BASE_DIR / {q}{d}{q} / {q}db.sqlite3{q}"),
        (_SQLITE_JOIN, "os.path.join(BASE_DIR, {q}{d}{q}, {q}db.sqlite3{q})"),
    ):
        m = pattern.search(settings)
        if m:
            new = replacement.format(q=m.group(1), d=DJANGO_DATA)
            change = f"in {where}, change {m.group(0)} to {new}"
            break
    else:
        change = (
            f"in {where}, put the SQLite database (DATABASES' NAME) in the "
            f"{DJANGO_DATA!r} directory, e.g. BASE_DIR / {DJANGO_DATA!r} / 'db.sqlite3'"
        )
    s.changes.insert(0, change)
    s.volumes.append((DJANGO_DATA, DJANGO_DATA, [*why, _comment(f"change: {change}")]))


def _procfile_release(directory: Path) -> bool:
    return procfile.read("Procfile", directory).release is not None


def _app_json(s: Scaffold, app_json: dict[str, Any]) -> None:
    if not app_json:
        return
    s.found.append("app.json")
    formation = app_json.get("formation")
    if isinstance(formation, dict):
        for proc in s.procs:
            quantity = formation.get(proc.name, {})
            if isinstance(quantity, dict) and isinstance(quantity.get("quantity"), int):
                proc.replicas = max(0, min(int(quantity["quantity"]), 1000))
    env = app_json.get("env")
    for key, spec in env.items() if isinstance(env, dict) else []:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(key)):
            continue
        value = spec.get("value") if isinstance(spec, dict) else spec
        secret = isinstance(spec, dict) and (
            spec.get("generator") == "secret" or bool(spec.get("required"))
        )
        shown = "" if value is None else str(value)
        if secret or envfile.is_credential(str(key), shown) or value is None:
            s.commented_secrets.append((str(key), "app.json"))
        elif isinstance(value, str | int | float | bool):
            s.env[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
    scripts = app_json.get("scripts")
    if isinstance(scripts, dict) and scripts.get("postdeploy"):
        s.notes.append("app.json's postdeploy script is a one-off, not a release command")


def _env_files(s: Scaffold, directory: Path) -> None:
    for name in ENV_FILES:
        if not (directory / name).exists():
            continue
        found = envfile.read(name, directory)
        if found.problems:
            s.notes.append(f"{name} was left out: {found.problems[0].message}")
            continue
        s.env_files.append(name)
        s.found.append(f"{name} ({len(found.values)} variables)")
        for key, value in found.values.items():
            # the env-file reader's own rule: such a variable is never plain env
            if envfile.is_credential(key, value):
                s.secrets.append((key, name))
                s.env.pop(key, None)
                s.commented_secrets = [c for c in s.commented_secrets if c[0] != key]


# -- the text ---------------------------------------------------------------------------


def _comment(text: str) -> str:
    """``text`` as ``#`` comment lines of at most 92 characters."""
    import textwrap

    return "\n".join(textwrap.wrap(text, 90, initial_indent="# ", subsequent_indent="#   "))


def _q(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value, ensure_ascii=False)


def _command(words: tuple[str, ...]) -> str:
    """The command as a string a user would type (quoted only where a word needs it)."""
    import shlex

    if all(re.fullmatch(r"[A-Za-z0-9_./:$@%+=,-]+", w) for w in words):
        return _q(" ".join(words))
    return _q(shlex.join(words))


BUILDS = {
    "requirements.txt": "pip install -r requirements.txt",
    "pyproject.toml": "pip install .",
    "package.json": "npm ci",
}


def render(s: Scaffold) -> str:
    out = [
        "# shipway.toml — written by `shipway init`",
        *([f"# from: {', '.join(s.found)}"] if s.found else []),
        "# Check it with `shipway validate`, see what a deploy would do with `shipway plan`,",
        '# deploy on this machine with `shipway deploy`. Every key: README.md, "The spec".',
        "",
        "[app]",
        f"name = {_q(s.name)}",
    ]
    if s.procfile:
        out.append(f"procfile = {_q(s.procfile)}   # its process types, commands and release:")
    if s.release_command:
        out += s.release_why
        out += [_comment(c) for c in s.changes if c.startswith("static files")]
        out.append(f"release_command = {_q(s.release_command)}")
    if s.env_files:
        files = ", ".join(map(_q, s.env_files))
        files = files if len(s.env_files) == 1 else f"[{files}]"
        out.append(f"env_file = {files}   # plain env: [env] < these files < a slot's env")
    if s.build:
        out += [
            f"# build: {s.build} found (the app's dependencies). To name the build yourself:",
            f"# build = {_q(BUILDS[s.build])}",
        ]
    if s.dockerfile:
        out += [
            "# Dockerfile found: docker and kubernetes slots run the image it builds, e.g.",
            f'# image = "registry.example/{s.name}:1"',
        ]
    for note in s.notes:
        out.append(f"# note: {note}")
    for proc in s.procs:
        out += ["", f"[processes.{proc.name}]"]
        if proc.guessed:
            out += [f"# a guess — {proc.guessed}.", "# Change it to how the app starts."]
        if proc.command is not None:
            out.append(f"command = {_command(proc.command)}")
        if proc.port is not None:
            out.append(f"port = {proc.port}   # locally each instance gets its own $PORT")
        if proc.replicas != 1:
            out.append(f"replicas = {proc.replicas}")
        if proc.port is not None:
            out += [
                f"[processes.{proc.name}.healthcheck]",
                "# a guess: a deploy waits until this path answers 2xx or 3xx; use the app's",
                "# health endpoint, or path = false if the process only has to stay up",
                'path = "/"',
            ]
    for name, path, why in s.volumes:
        out += ["", f"[volumes.{name}]", *why, f"path = {_q(path)}"]
    if s.env:
        out += ["", "[env]"] + [f"{k} = {_q(v)}" for k, v in s.env.items()]
    if s.secrets or s.commented_secrets:
        out += ["", "[secrets]   # references only, never values; masked in every output"]
        for key, source in s.secrets:
            out.append(f'{key} = {{ from_env = "{key}" }}   # set in {source} (or the shell)')
        for key, source in s.commented_secrets:
            out.append(f'# {key} = {{ from_env = "{key}" }}   # {source} names it: set it first')
    out += [
        "",
        "# With no [slots], there is one: local (this machine's processes). More, e.g.:",
        "# [slots.staging]",
        '# backend = "docker"',
        '# hosts = ["ssh://deploy@staging1"]',
        "",
    ]
    return "\n".join(out)
