"""The files an app already has that a spec may name instead of repeating them: a
Procfile (``[app] procfile``) and env files (``[app] env_file``).

What they give is merged into the declarations while the spec is validated, and their
problems are collected with the spec's own. A release record's spec snapshot holds the
merged result (the commands, the plain env), never the names of these files: a recorded
release is re-read without them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from shipway.spec import envfile
from shipway.spec import procfile as procfiles
from shipway.spec.check import Checker
from shipway.spec.model import Process
from shipway.spec.procfile import Procfile
from shipway.spec.secrets import Secret, SecretRef

_DNS_LABEL_HINT = "lowercase letters, digits and '-' (rename it in the Procfile)"


def procfile(c: Checker, app_t: Mapping[str, Any]) -> str | None:
    """``[app] procfile``: the Procfile's name, or None."""
    if "procfile" not in app_t:
        return None
    return c.string(app_t["procfile"], ("app", "procfile"), hint='e.g. procfile = "Procfile"')


def read_procfile(name: str | None, base_dir: Path) -> Procfile | None:
    return procfiles.read(name, base_dir) if name else None


def release_command(
    c: Checker, found: Procfile | None, declared: tuple[str, ...] | None, given: bool
) -> tuple[str, ...] | None:
    """The release command: ``[app] release_command``, or the Procfile's ``release`` type —
    never both."""
    if found is None or found.release is None:
        return declared
    if given:
        c.error(
            ("app", "release_command"),
            f"is also given by {found.file} line {found.release.line} (release: …)",
            "keep one of the two",
        )
        return declared
    return found.release.command


def procfile_processes(
    found: Procfile | None, table: Mapping[str, Any], pattern: Any
) -> dict[str, Process]:
    """The Procfile's process types that ``[processes]`` does not also configure (those
    the process table builds itself, taking the command from :func:`command_for`)."""
    out: dict[str, Process] = {}
    if found is None:
        return out
    for name, entry in found.entries.items():
        if not pattern.match(name):
            message = f"{name!r} is not a valid process name"
            found.error(entry.line, f"processes.{name}", message, _DNS_LABEL_HINT)
            continue
        if name not in table:
            out[name] = Process(name=name, command=entry.command)
    return out


def command_for(
    c: Checker, found: Procfile | None, name: str, declared: tuple[str, ...] | None, given: bool
) -> tuple[str, ...] | None:
    """A process's command: its table's, or its Procfile line's — never both."""
    entry = found.entries.get(name) if found is not None else None
    if entry is None:
        return declared
    if given:
        assert found is not None
        c.error(
            ("processes", name, "command"),
            f"is also given by {found.file} line {entry.line}",
            f"keep one: remove the command here, or the {name}: line there",
        )
    return entry.command


def env_files(
    c: Checker,
    app_t: Mapping[str, Any],
    base_dir: Path,
    env: Mapping[str, str],
    secrets: Mapping[str, SecretRef],
) -> tuple[dict[str, str], dict[str, SecretRef], tuple[str, ...]]:
    """The plain env with the env files' variables over the spec's ``[env]``, the secrets
    with the values the env files give their ``from_env``, and the files' names.

    A variable that a secret reads is never plain env (module doc of spec/envfile.py); its
    value lives only in the secret reference, masked. A variable that looks like a
    credential (:func:`envfile.is_credential`) and no secret reads becomes a secret of its
    own name, read from it.
    """
    if "env_file" not in app_t:
        return dict(env), dict(secrets), ()
    names = envfile.names(app_t["env_file"])
    if names is None or not all(names):
        c.error(
            ("app", "env_file"),
            "must be a path or a list of paths",
            'e.g. env_file = ".env" or env_file = [".env", ".env.local"]',
        )
        return dict(env), dict(secrets), ()
    for name in names:
        if not envfile.is_env_file(Path(name).name):
            c.error(
                ("app", "env_file"),
                f"{name!r} is not named like an env file",
                "name it .env, .env.NAME or NAME.env: files so named never enter a snapshot "
                "or an image",
            )
            return dict(env), dict(secrets), ()
    merged: dict[str, str] = {}
    for name in names:
        found = envfile.read(name, base_dir)
        c.problems.extend(found.problems)
        merged.update(found.values)
    secret_vars = set(secrets) | {r.from_env for r in secrets.values() if r.from_env}
    # a variable that looks like a credential (its name or its value: the one rule, shared
    # with ``shipway init``) becomes a secret read from itself, never plain env
    credentials = {
        k for k, v in merged.items() if k not in secret_vars and envfile.is_credential(k, v)
    }
    plain = {k: v for k, v in merged.items() if k not in secret_vars | credentials}
    implied = {
        k: SecretRef(name=k, from_env=k, env_files=tuple(names)) for k in sorted(credentials)
    }
    refs = {
        n: replace(
            r,
            env_file_value=Secret(merged[r.from_env]) if r.from_env in merged else None,
            env_files=tuple(names),
        )
        if r.from_env
        else r
        for n, r in {**secrets, **implied}.items()
    }
    kept = {k: v for k, v in env.items() if k not in credentials}
    return {**kept, **plain}, refs, tuple(names)
