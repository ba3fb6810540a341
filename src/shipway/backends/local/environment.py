"""A release's environment on this machine: the directory and the variables its processes
run with — what the release command and a one-off command (``shipway run``) run in too.

The snapshot is the release's own (a generation's, on a blue-green slot); the variables are
those of the process's program unit (its env, its secrets revealed, what every program
inherits), so a command sees exactly what the process sees. Secret values live in this
mapping only: never in a command line, a file shipway writes readable by others, or output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from shipway.backends.local import dependencies
from shipway.backends.local.dirs import SlotDirs
from shipway.backends.local.render import ProgramBody
from shipway.backends.local.state import LocalState
from shipway.release.model import Release
from shipway.spec.secrets import Secret


@dataclass(frozen=True)
class Environment:
    cwd: Path
    env: Mapping[str, str]
    secret_names: tuple[str, ...]


class LocalEnvironment(LocalState):
    """The environment of a release's process, read from its units."""

    def _environment(
        self,
        d: SlotDirs,
        release: Release,
        process: str | None,
        secrets: Mapping[str, Secret],
        purpose: str,
    ) -> Environment:
        """``process``: whose env (None: the first process's); ``purpose`` becomes
        ``SHIPWAY_PROCESS`` (``release`` for the release command)."""
        cwd = (
            self._generation_snapshot(d, release.generation)
            if release.generation
            else self._snapshot_dir(d, release.digest or "")
        )
        programs = [u for u in release.artifact if u.kind == "program"]
        unit = next((u for u in programs if u.process == process), None)
        if unit is None and process is None and programs:
            unit = programs[0]
        if unit is not None:
            env = dict(self._env_file(ProgramBody.of(unit), secrets).env)
        else:  # no program (an old record): the spec's env, as recorded
            spec_env = {str(k): str(v) for k, v in (release.spec.get("env") or {}).items()}
            env = {**self._base_env(), **spec_env, **{n: s.reveal() for n, s in secrets.items()}}
        build = release.build
        if build is not None and build.kind == "environment" and "SHIPWAY_ENV" not in env:
            # a record whose programs do not name it: the release's own environment
            env.update(dependencies.variables(Path(build.what), env.get("PATH", "")))
        env.update(
            SHIPWAY_APP=release.app,
            SHIPWAY_SLOT=release.slot,
            SHIPWAY_RELEASE=f"r{release.revision}",
            SHIPWAY_PROCESS=purpose,
        )
        env.pop("PORT", None)
        return Environment(cwd, env, tuple(sorted(n for n in secrets if n in env)))
