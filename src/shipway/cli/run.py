"""``shipway run SLOT -- CMD ARGS…``: a one-off command in the deployed release's
environment, exiting with the command's exit code.

The command's output is its own, on standard output and error; what shipway itself says
goes to standard error (masked), so ``shipway run prod -- cat report.csv > report.csv``
gives exactly the command's output.
"""

from __future__ import annotations

import os
import re
import sys

import click

from shipway.cli.common import (
    Context,
    close_reporters,
    confirm_option,
    confirmation,
    one_slot,
    pass_obj,
    reporter_of,
    run_body,
)
from shipway.cli.completion import complete_slot


@click.command(
    context_settings={"ignore_unknown_options": True},
    epilog="\b\nExit code: the command's own (128+N when signal N ended it; 127: not "
    "found);\nshipway's own failures keep theirs (1 engine, 2 input, 3 guard).",
)
@click.argument("slot", required=False, shell_complete=complete_slot)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- CMD [ARGS]...")
@click.option(
    "-p",
    "--process",
    metavar="PROCESS",
    help="Whose environment and image (default: web, else the first process).",
)
@click.option(
    "--host",
    metavar="HOST",
    help="Docker slots: the host to run it on (one that runs the process; default: the first).",
)
@click.option(
    "-i/-I",
    "--interactive/--no-interactive",
    default=None,
    help="Pass standard input through (default: when it is a terminal).",
)
@click.option(
    "-t/-T",
    "--tty/--no-tty",
    default=None,
    help="Give the command a terminal (default: when stdin and stdout are terminals).",
)
@click.option(
    "-e",
    "--env",
    "env_items",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a variable for this command only, over the release's (KEY alone: this shell's "
    "value, as docker run -e). Repeatable.",
)
@confirm_option
@pass_obj
def run(
    obj: Context,
    slot: str | None,
    command: tuple[str, ...],
    process: str | None,
    host: str | None,
    interactive: bool | None,
    tty: bool | None,
    env_items: tuple[str, ...],
    confirm: str | None,
) -> None:
    """Run CMD once in SLOT's deployed release: its files, env, secrets and volumes, as
    PROCESS gets them — for migrations, a shell, createsuperuser.

    \b
      shipway run staging -- python manage.py createsuperuser
      shipway run -- python manage.py shell    (a spec with one slot)
      shipway run prod --confirm prod -- python manage.py migrate --plan
      shipway run prod -p worker --host docker-b -- sh
      shipway run staging -e DJANGO_SUPERUSER_PASSWORD -- \\
          python manage.py createsuperuser --noinput

    \b
    Local: a subprocess in the release's snapshot, on this terminal.
    Docker: a one-off container of the release's image, removed afterwards.
    Kubernetes: a pod made from the process's pod template, its output
    streamed, deleted afterwards (no stdin or terminal there: -i/-t are refused).
    Like any change, it needs the slot's clearance (--confirm on guarded slots).
    The slot's lock is not held: a deploy may run meanwhile. On a terminal the
    command gets this terminal's TERM. SIGTERM or SIGHUP removes the container or
    pod and exits 128+N (143 for SIGTERM); one a killed shipway left running on a
    Docker host is removed by the next run on that slot from this machine.
    """

    def body() -> int:
        from shipway import api

        app = obj.app()
        picked, argv = _slot_and_command(app.slots.names(), slot, command)
        name = one_slot(app, picked)
        # not given: wanted on a terminal, if the backend can (None), else off
        on_terminal = sys.stdin.isatty()
        terminal = on_terminal and sys.stdout.isatty()
        env = _env(env_items)
        if (tty if tty is not None else terminal) and "TERM" not in env:
            # the command's terminal is this one: it says what it is, as ssh and docker do
            env["TERM"] = os.environ.get("TERM") or "xterm"
        reporter = reporter_of(obj, sys.stderr)  # stdout is the command's own
        api.run(
            app,
            name,
            argv,
            process=process,
            stdin=interactive if interactive is not None else (None if on_terminal else False),
            tty=tty if tty is not None else (None if terminal else False),
            host=host,
            env=env,
            confirm=confirmation(app, name, confirm),
            reporter=reporter,
        )
        close_reporters(obj)
        if reporter.ended is None:  # every operation ends in the stream: a bug otherwise
            raise RuntimeError("the command's outcome was not told as an event")
        click.echo(reporter.ended.line, err=True)  # its exit code: the stream's, the command's
        return int(reporter.ended.exit_code)

    run_body(obj, body)


def _env(items: tuple[str, ...]) -> dict[str, str]:
    """``-e KEY=VALUE`` (or ``-e KEY``: this shell's value) as a mapping; a bad one is an
    input error naming it (its value never shown: it may be a secret)."""
    from shipway.errors import InputError

    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise InputError(
                f"-e {key[:40]!r}: not a variable name (hint: -e KEY=VALUE, KEY letters, "
                "digits and _)"
            )
        if not eq:
            if key not in os.environ:
                raise InputError(f"-e {key}: not set in this shell (hint: -e {key}=VALUE)")
            value = os.environ[key]
        out[key] = value
    return out


def _slot_and_command(
    slots: list[str], given: str | None, command: tuple[str, ...]
) -> tuple[str | None, tuple[str, ...]]:
    """SLOT and CMD as typed. ``--`` does not reach us (click drops it), so with one slot
    ``run -- python x.py`` arrives as SLOT ``python``: a first word that names no slot is
    the command's, and the slot is the only one. With several slots SLOT stays as typed
    (an unknown one is refused by name)."""
    if given is not None and given not in slots and len(slots) == 1:
        return slots[0], (given, *command)
    return given, command
