"""The build settings of an app: ``[build]`` (the image's Dockerfile, its build args, the
engine that builds it, the interpreter of a local environment) and ``[app] build`` (a
command that replaces dependency detection on the local backend, or ``false`` to build
nothing there).

Never: a path that leaves the app's directory (the build context is the app, nothing
around it), a build arg whose value is not a string (it reaches the Dockerfile's ARG as
text), an unknown key (a typo must not silently build the wrong thing).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from shipway.spec.check import Checker
from shipway.spec.model import BuildSettings

BUILD_KEYS = ("dockerfile", "context", "args", "host", "python")
ARG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ENGINE_URL = re.compile(r"^(unix|ssh)://.+")
PYTHON = re.compile(r"^(\d+(\.\d+){0,2}|.*/.*)$")


def _inside(c: Checker, value: Any, path: tuple[str, ...], hint: str) -> str | None:
    text = c.string(value, path, hint=hint)
    if text is None:
        return None
    parts = PurePosixPath(text).parts
    if not text or text.startswith("/") or ".." in parts:
        c.error(path, f"{text!r} is not a path inside the app's directory", hint)
        return None
    return text


def parse_build(c: Checker, raw: Any, app_build: Any) -> BuildSettings:
    """``[build]`` and ``[app] build`` → BuildSettings (problems go to ``c``)."""
    table = (c.table(raw, ("build",), BUILD_KEYS) or {}) if raw is not None else {}
    settings = BuildSettings()
    dockerfile = settings.dockerfile
    if "dockerfile" in table:
        dockerfile = (
            _inside(c, table["dockerfile"], ("build", "dockerfile"), 'e.g. "Dockerfile"')
            or dockerfile
        )
    context = settings.context
    if "context" in table:
        context = _inside(c, table["context"], ("build", "context"), 'e.g. "."') or context
    args: dict[str, str] = {}
    for name, value in (c.table(table.get("args", {}), ("build", "args")) or {}).items():
        if not ARG_NAME.match(name):
            c.error(("build", "args", name), f"{name!r} is not a valid build arg name")
        elif not isinstance(value, str):
            c.error(("build", "args", name), "must be a string", f'e.g. {name} = "value"')
        else:
            args[name] = value
    host = None
    if "host" in table:
        host = c.string(
            table["host"],
            ("build", "host"),
            pattern=ENGINE_URL,
            what="Docker engine address",
            hint='e.g. "unix:///var/run/docker.sock" or "ssh://builder@build-1"',
        )
    python = None
    if "python" in table:
        python = c.string(
            table["python"],
            ("build", "python"),
            pattern=PYTHON,
            what="interpreter",
            hint='a version ("3.11") or a path ("/usr/bin/python3.11")',
        )
    command: tuple[str, ...] | None = None
    enabled = True
    if app_build is False:
        enabled = False
    elif app_build is True:
        c.error(
            ("app", "build"),
            "true is the default: detection builds the app's dependencies",
            'give a command (build = "make deps"), or false to build nothing',
        )
    elif app_build is not None:
        command = c.command(app_build, ("app", "build"))
    return BuildSettings(
        dockerfile=dockerfile,
        context=context,
        args=args,
        host=host,
        python=python,
        command=command,
        enabled=enabled,
    )


def snapshot_of(settings: BuildSettings) -> dict[str, Any]:
    """``[build]`` in the spec's own format (only what differs from the defaults)."""
    default = BuildSettings()
    out: dict[str, Any] = {}
    if settings.dockerfile != default.dockerfile:
        out["dockerfile"] = settings.dockerfile
    if settings.context != default.context:
        out["context"] = settings.context
    if settings.args:
        out["args"] = dict(settings.args)
    if settings.host:
        out["host"] = settings.host
    if settings.python:
        out["python"] = settings.python
    return out
