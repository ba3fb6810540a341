"""The ``shipway`` command: parse arguments, call the API, render text, JSON or progress.

Heavy modules (engine clients, YAML) are imported by the commands that need them, so
``shipway --help`` starts fast.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

if TYPE_CHECKING:
    from shipway.backends.protocol import Reporter
    from shipway.engine.outcome import Outcome
    from shipway.spec.model import App

EXIT_CODES = """\b
Exit codes:
  0   success (deploy: rolled, or no changes: nothing applied, no revision)
  1   unexpected error, or an engine failure
  2   invalid input: spec or arguments (nothing was touched)
  3   refused by the guard: confirmation missing or wrong
  4   the slot is locked by another operation (the message names the holder)
  5   the saved plan is stale: the slot changed since it was made
  6   plan --detailed-exitcode: the plan has changes (0: no changes)
  7   a file shipway keeps could not be written (a full disk): the message names it
  10  rolled-back: the new release failed; the previous one serves again
  11  rollback-failed: the new release failed and so did the rollback; the slot MAY BE DOWN
  12  no-anchor: the new release failed and nothing ran before it; nothing was restored
  130/143  interrupted (SIGINT/SIGTERM): the pending release is marked failed
"""

F = TypeVar("F", bound=Callable[..., Any])


class Context:
    def __init__(self, spec_file: str | None = None) -> None:
        self.spec_file = spec_file
        self.json = False

    def app(self) -> App:
        from shipway.api import load

        return load(self.spec_file)


def output_option(f: F) -> F:
    def set_output(ctx: click.Context, _: click.Parameter, value: str) -> str:
        ctx.ensure_object(Context).json = value == "json"
        return value

    return click.option(
        "-o",
        "--output",
        type=click.Choice(["text", "json"]),
        default="text",
        expose_value=False,
        callback=set_output,
        is_eager=True,
        help="text (default) or json: one JSON document on stdout, progress on stderr.",
    )(f)


def confirm_option(f: F) -> F:
    return click.option(
        "--confirm",
        metavar="SLOT",
        help="Type the slot's name back to change a guarded or production slot.",
    )(f)


def build_option(f: F) -> F:
    return click.option(
        "--build",
        is_flag=True,
        help="Build the image from the app's Dockerfile first (reused when the source is "
        "unchanged), push it, and deploy it by its digest.",
    )(f)


def timeout_options(f: F) -> F:
    f = click.option(
        "--rollback-timeout",
        type=float,
        default=300.0,
        show_default=True,
        help="Seconds the rollback may take (its own budget).",
    )(f)
    return click.option(
        "--timeout",
        type=float,
        default=300.0,
        show_default=True,
        help="Seconds to wait for the rollout.",
    )(f)


def _reporter(obj: Context) -> Any:
    from shipway.cli.report import TerminalReporter

    return TerminalReporter(sys.stderr if obj.json else sys.stdout)


def _confirmation(app: App, slot: str, given: str | None) -> str | None:
    """--confirm, or the slot name typed at a prompt when on a terminal."""
    if given is not None:
        return given
    from shipway.guard import Guard

    if not Guard(app.slots).needs_confirmation(slot) or not sys.stdin.isatty():
        return None
    return str(
        click.prompt(
            f"slot {slot!r} is guarded; type its name to confirm",
            default="",
            show_default=False,
            err=True,
        )
    )


def _fail(
    obj: Context | None, code: int, message: str, extra: dict[str, Any] | None = None
) -> NoReturn:
    if obj is not None and obj.json:
        from shipway.cli.report import emit_json

        emit_json({"error": {"message": message, "exit_code": code, **(extra or {})}})
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _run(obj: Context, action: Callable[[], int | None]) -> None:
    """Run a command body, turning shipway's errors into their exit codes."""
    from shipway.engine.signals import Interrupted
    from shipway.errors import ShipwayError, SpecInvalid

    try:
        code = action()
    except SpecInvalid as exc:
        _fail(obj, exc.exit_code, str(exc), {"problems": [p.to_json() for p in exc.problems]})
    except ShipwayError as exc:
        _fail(obj, exc.exit_code, str(exc))
    except Interrupted as exc:
        _fail(obj, exc.exit_code, f"interrupted by {exc}")
    except (KeyboardInterrupt, click.exceptions.Abort):
        # Ctrl-C before the engine took the signals over (a prompt, connecting)
        _fail(obj, 130, "interrupted by SIGINT")
    except Exception as exc:
        if os.environ.get("SHIPWAY_DEBUG"):
            raise
        _fail(
            obj,
            1,
            f"unexpected error: {type(exc).__name__}: {exc} (set SHIPWAY_DEBUG=1 for a traceback)",
        )
    sys.exit(code or 0)


def _roll(obj: Context, operation: Callable[[App, Reporter], Outcome]) -> None:
    """Run an operation that ends in one of the four outcomes (``operation`` asks for the
    slot's confirmation itself, after reading what it must read first), print it, exit
    with its code."""

    from shipway.engine.signals import signals_raise

    def body() -> int:
        return _outcome(obj, operation(obj.app(), _reporter(obj)))

    # once the engine has settled the outcome, a signal while it is printed is said and
    # the exit code stays the outcome's
    with signals_raise():
        _run(obj, body)


def _outcome(obj: Context, outcome: Outcome) -> int:
    from shipway.cli.report import emit_json

    if obj.json:
        emit_json(outcome.to_json())
    else:
        click.echo(outcome.line())
        for line in outcome.details():
            click.echo(f"  {line}")
    return outcome.exit_code


@click.group(epilog=EXIT_CODES, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-f",
    "--file",
    "spec_file",
    metavar="FILE",
    envvar="SHIPWAY_FILE",
    help="The spec (default: ./shipway.toml, or .yaml).",
)
@click.version_option(package_name="shipway")
@click.pass_context
def cli(ctx: click.Context, spec_file: str | None) -> None:
    """Release apps safely: plan, guard, roll out, fail fast, roll back, record.

    \b
    Typical use:
      shipway validate                  check the spec, list every error
      shipway plan staging              what a deploy would change (touches nothing)
      shipway diff prod [REV_A] [REV_B] what differs between releases (secrets masked)
      shipway deploy staging            roll out; roll back automatically on failure
      shipway deploy staging --build    build the image from the source first, then roll out
      shipway deploy prod --confirm prod
      shipway status prod | history prod | rollback prod [REV]
      shipway restart prod web          restart one process type only
      shipway promote staging           roll staging's release to the next slot
      shipway logs local web -f         follow a process's log
      shipway stop local                stop what runs in a slot (records stay)
      shipway destroy test1 --confirm test1   delete it all but the volumes
      shipway helm values RELEASE -n NS values of a Helm release (no helm binary)
    """
    ctx.ensure_object(Context).spec_file = spec_file


pass_obj = click.make_pass_decorator(Context, ensure=True)


@cli.command()
@output_option
@pass_obj
def validate(obj: Context) -> None:
    """Check the spec; print every error with its key, line and a hint (exit 2)."""

    def body() -> int:
        app = obj.app()
        slots = [
            f"{s.name} ({s.backend}{', guarded' if s.needs_confirmation else ''})"
            for s in app.slots
        ]
        if obj.json:
            from shipway.cli.report import emit_json

            emit_json(
                {
                    "valid": True,
                    "app": app.name,
                    "processes": list(app.processes),
                    "slots": app.slots.names(),
                }
            )
        else:
            click.echo(
                f"ok: {app.name} — processes: {', '.join(app.processes)}; slots: {', '.join(slots)}"
            )
        return 0

    _run(obj, body)


def _saved_plan(plan_file: str | None) -> Any:
    if not plan_file:
        return None
    from shipway.plan.model import Plan

    try:
        return Plan.from_json(json.loads(Path(plan_file).read_text()))
    except (ValueError, KeyError, TypeError) as exc:
        from shipway.errors import InputError

        raise InputError(f"{plan_file}: not a shipway plan: {exc}") from exc


@cli.command()
@click.argument("slot")
@click.option(
    "--plan",
    "plan_file",
    metavar="FILE",
    type=click.Path(exists=True, dir_okay=False),
    help="Apply exactly this saved repair plan (plan --repair --out FILE), or refuse if stale.",
)
@confirm_option
@timeout_options
@output_option
@pass_obj
def repair(
    obj: Context,
    slot: str,
    plan_file: str | None,
    confirm: str | None,
    timeout: float,
    rollback_timeout: float,
) -> None:
    """Re-assert SLOT's deployed release as recorded: start what stopped, recreate what is
    missing, replace what drifted, remove what nobody declared; leave the rest alone."""

    from shipway import api

    _roll(
        obj,
        lambda app, reporter: api.repair(
            app,
            slot,
            confirm=_confirmation(app, slot, confirm),
            saved_plan=_saved_plan(plan_file),
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        ),
    )


def take_host_option(f: F) -> F:
    return click.option(
        "--take-host",
        is_flag=True,
        help="Take a host another app or slot serves today (refused, naming it, otherwise).",
    )(f)


@cli.command()
@click.argument("slot")
@click.option("--image", metavar="REF", help="Deploy this image instead of the spec's.")
@click.option(
    "--plan",
    "plan_file",
    metavar="FILE",
    type=click.Path(exists=True, dir_okay=False),
    help="Apply exactly this saved plan, or refuse if the slot changed since.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the plan and touch nothing: exactly `shipway plan SLOT` (same options).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Roll every process even when nothing changed (default: 'no changes', exit 0).",
)
@confirm_option
@take_host_option
@build_option
@timeout_options
@output_option
@pass_obj
def deploy(
    obj: Context,
    slot: str,
    image: str | None,
    plan_file: str | None,
    dry_run: bool,
    force: bool,
    confirm: str | None,
    take_host: bool,
    build: bool,
    timeout: float,
    rollback_timeout: float,
) -> None:
    """Roll out to SLOT: lock, read the anchor, build, apply, wait, record — or roll back.

    When nothing differs from the deployed release (spec, image, secrets, and the target
    matching its record) it says "no changes", applies nothing, records no revision and
    exits 0; --force rolls every process anyway."""
    if dry_run:
        if plan_file:
            _fail(obj, 2, "--dry-run prints a new plan; it takes no --plan FILE")
        from shipway.cli.changes import show_plan

        def dry_run_body() -> int:
            show_plan(obj, slot, image, None, False, take_host, force, build)
            return 0

        _run(obj, dry_run_body)
        return

    from shipway import api

    _roll(
        obj,
        lambda app, reporter: api.deploy(
            app,
            slot,
            saved_plan=_saved_plan(plan_file),  # a bad plan file is refused before asking
            confirm=_confirmation(app, slot, confirm),
            image=image,
            take_host=take_host,
            force=force,
            build=build,
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        ),
    )


@cli.command()
@click.argument("slot")
@click.argument("revision", required=False, type=int)
@confirm_option
@timeout_options
@output_option
@pass_obj
def rollback(
    obj: Context,
    slot: str,
    revision: int | None,
    confirm: str | None,
    timeout: float,
    rollback_timeout: float,
) -> None:
    """Re-deploy REVISION (default: the previous good one) of SLOT as a new revision."""

    from shipway import api

    _roll(
        obj,
        lambda app, reporter: api.rollback(
            app,
            slot,
            revision,
            confirm=_confirmation(app, slot, confirm),
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        ),
    )


@cli.command()
@click.argument("slot")
@click.argument("process", required=False)
@confirm_option
@timeout_options
@output_option
@pass_obj
def restart(
    obj: Context,
    slot: str,
    process: str | None,
    confirm: str | None,
    timeout: float,
    rollback_timeout: float,
) -> None:
    """Restart PROCESS (default: all) in SLOT; other processes are left untouched."""

    from shipway import api

    _roll(
        obj,
        lambda app, reporter: api.restart(
            app,
            slot,
            process,
            confirm=_confirmation(app, slot, confirm),
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        ),
    )


@cli.command()
@click.argument("slot")
@confirm_option
@timeout_options
@output_option
@pass_obj
def promote(
    obj: Context, slot: str, confirm: str | None, timeout: float, rollback_timeout: float
) -> None:
    """Roll SLOT's deployed release, by digest, to the slot it promotes to."""

    from shipway import api

    _roll(
        obj,
        lambda app, reporter: api.promote(
            app,
            slot,
            # the destination's guard: promotion changes the slot it promotes to
            confirm=_confirmation(app, app.slots.get(slot).promotes_to or slot, confirm),
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        ),
    )


@cli.command()
@click.argument("slot")
@output_option
@pass_obj
def status(obj: Context, slot: str) -> None:
    """What runs in SLOT: the deployed release, each process, each volume."""

    def body() -> int:
        from shipway import api
        from shipway.cli.report import emit_json, table

        result = api.status(obj.app(), slot)
        if obj.json:
            emit_json(result.to_json())
            return 0
        d = result.deployed
        click.echo(
            f"{result.app}/{result.slot} ({result.backend}): "
            + (
                f"r{d.revision} deployed {d.updated_at} — {d.description}"
                if d
                else "nothing deployed"
            )
        )
        rows = [p.to_json() for p in result.processes]
        columns = list(dict.fromkeys(k for r in rows for k in r if r.get(k) is not None))
        for line in table(rows, columns):
            click.echo(line)
        for volume in result.volumes:
            click.echo(f"volume {volume.line()}")
        return 0

    _run(obj, body)


@cli.command()
@click.argument("slot")
@output_option
@pass_obj
def gens(obj: Context, slot: str) -> None:
    """List SLOT's generations (blue-green): release, state (live / awake / asleep), age."""

    def body() -> int:
        from shipway import api

        rows = [g.to_json() for g in api.generations(obj.app(), slot)]
        if not obj.json:
            for row in rows:
                row["age"] = _age(str(row["created_at"]))
        return _list(obj, slot, "generations", rows, ["name", "state", "release", "age"])

    _run(obj, body)


def _list(
    obj: Context, slot: str, what: str, rows: list[dict[str, Any]], columns: list[str]
) -> int:
    """``{"slot": SLOT, WHAT: rows}`` with -o json, else a table (or a line saying there
    is none)."""
    from shipway.cli.report import emit_json, table

    if obj.json:
        emit_json({"slot": slot, what: rows})
        return 0
    if not rows:
        click.echo(f"no {what} in slot {slot!r}")
    for line in table(rows, columns):
        click.echo(line)
    return 0


def _age(stamp: str) -> str:
    from datetime import UTC, datetime

    try:
        then = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    seconds = int((datetime.now(UTC) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


@cli.command()
@click.argument("slot")
@click.argument("generation")
@confirm_option
@take_host_option
@timeout_options
@output_option
@pass_obj
def switch(
    obj: Context,
    slot: str,
    generation: str,
    confirm: str | None,
    take_host: bool,
    timeout: float,
    rollback_timeout: float,
) -> None:
    """Switch SLOT to GENERATION: wake, wait, point hosts, drop the old route, sleep it."""

    from shipway import api

    _roll(
        obj,
        lambda app, reporter: api.switch(
            app,
            slot,
            generation,
            confirm=_confirmation(app, slot, confirm),
            take_host=take_host,
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        ),
    )


def _generation_command(name: str, doc: str) -> None:
    @cli.command(name=name, help=doc)
    @click.argument("slot")
    @click.argument("generation")
    @confirm_option
    @output_option
    @pass_obj
    def command(obj: Context, slot: str, generation: str, confirm: str | None) -> None:
        def body() -> int:
            from shipway import api
            from shipway.cli.report import emit_json

            app = obj.app()
            action = api.sleep if name == "sleep" else api.wake
            action(
                app,
                slot,
                generation,
                confirm=_confirmation(app, slot, confirm),
                reporter=_reporter(obj),
            )
            state = "asleep" if name == "sleep" else "awake (no traffic moved)"
            if obj.json:
                emit_json({"slot": slot, "generation": generation, "state": state})
            else:
                click.echo(f"{generation} is {state}")
            return 0

        _run(obj, body)


_generation_command("sleep", "Put GENERATION of SLOT to sleep (scaled to zero, kept).")
_generation_command("wake", "Wake GENERATION of SLOT and wait until ready; no traffic moves.")


@cli.command()
@click.argument("slot")
@click.option(
    "--keep", type=int, default=2, show_default=True, help="How many asleep generations to keep."
)
@confirm_option
@output_option
@pass_obj
def gc(obj: Context, slot: str, keep: int, confirm: str | None) -> None:
    """Delete SLOT's asleep generations beyond the KEEP newest; never the live one."""

    def body() -> int:
        from shipway import api
        from shipway.cli.report import emit_json

        app = obj.app()
        deleted = api.gc(
            app, slot, keep, confirm=_confirmation(app, slot, confirm), reporter=_reporter(obj)
        )
        if obj.json:
            emit_json({"slot": slot, "deleted": deleted})
        else:
            click.echo(f"deleted {len(deleted)} generation(s): {', '.join(deleted) or '-'}")
        return 0

    _run(obj, body)


@cli.command()
@click.argument("slot")
@click.argument("process", required=False)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until Ctrl-C.")
@click.option(
    "-n",
    "--lines",
    type=click.IntRange(min=0),
    default=50,
    show_default=True,
    help="How many of the last lines of each log to print first.",
)
@output_option
@pass_obj
def logs(obj: Context, slot: str, process: str | None, follow: bool, lines: int) -> None:
    """Print the logs of SLOT's processes (or of PROCESS only); secret values are masked."""

    def body() -> int:
        from shipway import api

        stream = api.logs(obj.app(), slot, process, follow=follow, lines=lines)
        try:
            if obj.json and not follow:
                from shipway.cli.report import emit_json

                emit_json({"slot": slot, "process": process, "lines": list(stream)})
                return 0
            for line in stream:
                click.echo(json.dumps({"line": line}) if obj.json else line)
        except KeyboardInterrupt:
            return 0
        except BrokenPipeError:
            sys.stderr.close()  # the reader went away (| head): not an error
            return 0
        return 0

    _run(obj, body)


@cli.command()
@click.argument("slot")
@confirm_option
@output_option
@pass_obj
def stop(obj: Context, slot: str, confirm: str | None) -> None:
    """Stop SLOT's processes (hosts dropped, requests drained). Records stay: the deployed
    release comes back with deploy or restart."""

    def body() -> int:
        from shipway import api

        app = obj.app()
        api.stop(app, slot, confirm=_confirmation(app, slot, confirm), reporter=_reporter(obj))
        if obj.json:
            from shipway.cli.report import emit_json

            emit_json({"stopped": f"{app.name}/{slot}"})
        else:
            click.echo(f"stopped {app.name}/{slot}; its release records stay (shipway history)")
        return 0

    _run(obj, body)


# Command groups kept in their own modules; imported last, as they use what is above.
from shipway.cli import changes as _changes  # noqa: E402,F401  (plan, diff, history)
from shipway.cli.build import build  # noqa: E402
from shipway.cli.destroy import destroy  # noqa: E402
from shipway.cli.helm import helm  # noqa: E402

cli.add_command(build)
cli.add_command(destroy)
cli.add_command(helm)


def main() -> None:
    try:
        cli(prog_name="shipway")
    except SystemExit:
        from shipway.engine.signals import settled_outcome

        if settled_outcome() is not None:
            # the outcome is recorded and its code is the exit code: a signal during the
            # interpreter's own exit must not turn it into 130/143
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise
