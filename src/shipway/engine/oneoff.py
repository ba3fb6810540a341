"""One-off commands (``shipway run SLOT -- CMD``): a command run once in the deployed
release's environment — Heroku's ``run``, dokku's ``run``, ``kubectl run`` from a pod
template — returning the command's exit code.

What must never happen: a command run without the slot's clearance (it can change
production data: ``require_covers`` first, before any read), a command run in anything but
the deployed release (the anchor, read from the target's own records), a secret value in a
line shipway itself prints (masked; the command's own output is the user's).

The slot's lock is NOT held while the command runs: an interactive shell may stay open for
hours and must not block a deploy or a rollback (Heroku's one-off dynos do not either).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from shipway.backends.oneoff import Stopped
from shipway.backends.protocol import OneOffCommand
from shipway.engine.done import DONE, FAILED, Done
from shipway.engine.telling import Telling
from shipway.errors import InputError
from shipway.guard import Clearance
from shipway.release import history
from shipway.spec.model import App
from shipway.spec.parse import from_snapshot
from shipway.spec.secrets import Masker


class OneOffs(Telling):
    """``run``: a one-off command in the deployed release's environment."""

    def run_command(
        self,
        clearance: Clearance,
        app: App,
        slot_name: str,
        command: Sequence[str],
        *,
        process: str | None = None,
        stdin: bool | None = False,
        tty: bool | None = False,
        host: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> int:
        extra = dict(env or {})
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        if not command:
            raise InputError(
                f"nothing to run (hint: shipway run {slot_name} -- CMD ARGS…, e.g. "
                f"shipway run {slot_name} -- python manage.py migrate)"
            )
        release = history.deployed(self.backend.read_records(target))
        if release is None:
            raise InputError(
                f"nothing is deployed in slot {slot_name!r}: a one-off command runs in the "
                "deployed release's environment (hint: shipway deploy first)"
            )
        names = list(from_snapshot(release.spec, app.source_dir).processes)
        chosen = process or ("web" if "web" in names else (names[0] if names else ""))
        if chosen not in names:
            raise InputError(
                f"--process {process!r}: r{release.revision} has no such process "
                f"(processes: {', '.join(names) or 'none'})"
            )
        secrets = self._secrets_of(release, app, self.secrets(app, slot_name))
        mask = Masker([s.reveal() for s in secrets.values()])
        where = f" on {host}" if host else ""
        shown = mask(shlex.join(command))
        self.reporter.line(
            f"running {shown} in r{release.revision} of {target} (the environment of "
            f"{chosen}{where})"
        )
        oneoff = OneOffCommand(
            tuple(command), chosen, stdin=stdin, tty=tty, host=host, env=tuple(extra.items())
        )
        what = f"run {shown} in r{release.revision} as {chosen}{where}"
        with self._telling(clearance, target, app, "run", what, secrets):
            try:
                code = self.backend.run_command(
                    clearance, target, release, oneoff, secrets, self.reporter
                )
                ended = f"exit {code}"
            except Stopped as stop:
                # the backend removed what it made; the exit code is the shell's for the signal
                self.reporter.line(f"stopped by {stop}: exit {stop.exit_code}")
                code, ended = stop.exit_code, f"stopped by {stop}: exit {stop.exit_code}"
            result = {
                "command": shown,
                "revision": release.revision,
                "process": chosen,
                "host": host,
            }
            line = f"ran {shown} in r{release.revision} of {target}: {ended}"
            kind = DONE if code == 0 else FAILED
            self._done(Done("run", str(target), line, result, (), code, kind))
            return code
