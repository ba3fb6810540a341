"""The release command (migrations): run once in the new snapshot with the new env, after
the gate and before any host moves; its output streamed (secret values masked) and kept in
``logs/_release-r<N>.log``. A secret's ``$NAME`` is never expanded in its words.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from shipway.backends.local import environments, logfiles
from shipway.backends.local.launch import expand
from shipway.backends.local.state import LOG_TAIL, LocalState
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.guard import Clearance
from shipway.release.model import Release
from shipway.spec.model import Target
from shipway.spec.secrets import Secret


class LocalReleaseCommand(LocalState):
    """The release command step."""

    def run_release_command(
        self,
        clearance: Clearance,
        target: Target,
        release: Release,
        command: Sequence[str],
        secrets: Mapping[str, Secret],
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        d = self._guarded(clearance, target)
        self._secrets.update(secrets)
        cwd = (
            self._generation_snapshot(d, release.generation)
            if release.generation
            else self._snapshot_dir(d, release.digest or "")
        )
        spec_env = {str(k): str(v) for k, v in (release.spec.get("env") or {}).items()}
        env = {
            **self._base_env(),
            **spec_env,
            **{n: s.reveal() for n, s in secrets.items()},
            "SHIPWAY_APP": target.app,
            "SHIPWAY_SLOT": target.slot,
            "SHIPWAY_RELEASE": f"r{release.revision}",
        }
        if release.build is not None and release.build.kind == "environment":
            env.update(environments.variables(Path(release.build.what), env.get("PATH", "")))
        words = [expand(w, env, keep=secrets.keys()) for w in command]  # never a secret in argv
        d.logs.mkdir(parents=True, exist_ok=True)
        log = d.logs / f"_release-r{release.revision}.log"
        redact = self._redactor(d)
        try:
            proc = subprocess.Popen(
                words,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        except OSError as exc:
            return Failure(
                reason=Reason.RELEASE_COMMAND_FAILED,
                message=f"cannot run {words[0]!r}: {exc.strerror or exc}",
            )
        assert proc.stdout is not None
        with open(log, "wb") as out:
            os.set_blocking(proc.stdout.fileno(), False)
            buffer = b""
            while True:
                chunk = proc.stdout.read()
                if chunk:
                    out.write(chunk)
                    buffer += chunk
                    *complete, buffer = buffer.split(b"\n")
                    for raw in complete:
                        reporter.line(f"  release | {redact(raw.decode(errors='replace'))}")
                if proc.poll() is not None and not chunk:
                    break
                if time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    return Failure(
                        reason=Reason.RELEASE_COMMAND_TIMEOUT,
                        message=f"{' '.join(command)} did not finish before the deadline",
                        details=tuple(f"| {redact(t)}" for t in logfiles.tail(log, LOG_TAIL)),
                    )
                if not chunk:
                    time.sleep(0.05)
        code = proc.returncode
        if code != 0:
            return Failure(
                reason=Reason.RELEASE_COMMAND_FAILED,
                message=f"{' '.join(command)} exited with code {code}",
                exit_code=code,
                details=(
                    f"last lines of its output ({log}):",
                    *(f"| {redact(t)}" for t in logfiles.tail(log, LOG_TAIL)),
                ),
            )
        return None
