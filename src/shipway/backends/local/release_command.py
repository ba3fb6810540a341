"""The release command (migrations): run once in the new release's snapshot with the env
its processes get (:mod:`.environment`), after the snapshot is made and BEFORE any program
of the release starts; its output streamed (secret values masked) and kept in
``logs/_release-r<N>.log`` (0600: the command's own output may hold a secret). A secret's
``$NAME`` is never expanded in its words.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping, Sequence

from shipway.backends.local import logfiles
from shipway.backends.local.environment import LocalEnvironment
from shipway.backends.local.launch import expand
from shipway.backends.local.state import LOG_TAIL
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.guard import Clearance
from shipway.release.model import Release
from shipway.spec.model import Target
from shipway.spec.secrets import Secret


class LocalReleaseCommand(LocalEnvironment):
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
        release_env = self._environment(d, release, None, secrets, "release")
        cwd, env = release_env.cwd, dict(release_env.env)
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
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # an older log of this revision may have been wider
        with open(fd, "wb") as out:
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
