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

from shipway.cli.completion import complete_process, complete_revision, complete_slot

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
  run: the command's own exit code (shipway's own failures: 1, 2, 3 as above)
"""

F = TypeVar("F", bound=Callable[..., Any])


class Context:
    def __init__(self, spec_file: str | None = None) -> None:
        self.spec_file = spec_file
        self.json = False
        self.reporters: list[Any] = []

    def app(self) -> App:
        """The spec, read and validated. From the spec layer itself, not through the API:
        ``validate`` and the reads must not load the engine to read a file."""
        from shipway.spec import load

        return load(self.spec_file)


def pick_slot(app: App, given: str | None, *after: Any) -> tuple[Any, ...]:
    """SLOT and the arguments after it, for a command whose SLOT may be left out when the
    spec has one slot (the implicit ``local`` one, say): ``restart web`` is then
    ``restart local web``, ``rollback 3`` is ``rollback local 3``. With several slots, a
    missing SLOT is an input error naming them."""
    names = app.slots.names()
    if given is not None and given not in app.slots and len(names) == 1 and after[-1:] == (None,):
        return (names[0], given, *after[:-1])
    if given is not None:
        return (given, *after)
    if len(names) == 1:
        return (names[0], *after)
    from shipway.errors import InputError

    command = f"shipway {click.get_current_context().info_name}"
    raise InputError(
        f"which slot? the spec declares {len(names)}: {', '.join(names)} "
        f"(hint: {command} {names[0]})"
    )


def one_slot(app: App, given: str | None) -> str:
    """SLOT as given, or the spec's only slot (:func:`pick_slot`)."""
    return str(pick_slot(app, given)[0])


def slot_argument(f: F) -> F:
    """The optional SLOT argument every slot command takes, completed from the spec."""
    return click.argument("slot", required=False, shell_complete=complete_slot)(f)


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
        help="Docker and Kubernetes slots: build the image from the app's Dockerfile first "
        "(reused when the source is unchanged), push it, and deploy it by its digest. "
        "(Local slots build their dependency environment on every deploy anyway.)",
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
    """Progress for this command (stderr with -o json); closed when the command ends."""
    from shipway.cli.report import TerminalReporter

    reporter = TerminalReporter(sys.stderr if obj.json else sys.stdout)
    obj.reporters.append(reporter)
    return reporter


def _close_reporters(obj: Context) -> None:
    while obj.reporters:
        obj.reporters.pop().close()


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
    from shipway.cli.hints import pasteable
    from shipway.cli.term import colour_on, paint

    message = pasteable(message)
    click.echo(paint("error:", "bad", colour_on(sys.stderr)) + f" {message}", err=True)
    sys.exit(code)


def _run(obj: Context, action: Callable[[], int | None]) -> None:
    """Run a command body, turning shipway's errors into their exit codes."""
    from shipway.errors import Interrupted, ShipwayError, SpecInvalid

    try:
        try:
            code = action()
        finally:
            _close_reporters(obj)
    except SpecInvalid as exc:
        _fail(obj, exc.exit_code, str(exc), {"problems": [p.to_json() for p in exc.problems]})
    except ShipwayError as exc:
        _fail(obj, exc.exit_code, str(exc))
    except Interrupted as exc:
        _fail(obj, exc.exit_code, f"interrupted by {exc}")
    except (KeyboardInterrupt, click.exceptions.Abort):
        # Ctrl-C before the engine took the signals over (a prompt, connecting)
        _fail(obj, 130, "interrupted by SIGINT")
    except BrokenPipeError:
        # a read whose stdout reader went away (`| head`): it ends quietly (cli/pipe.py)
        from shipway.cli.pipe import READER_GONE

        sys.exit(READER_GONE)
    except Exception as exc:
        if os.environ.get("SHIPWAY_DEBUG"):
            raise
        _fail(
            obj,
            1,
            f"unexpected error: {type(exc).__name__}: {exc} (set SHIPWAY_DEBUG=1 for a traceback)",
        )
    sys.exit(code or 0)


def _roll(
    obj: Context,
    operation: Callable[[App, Reporter], Outcome],
    more_json: Callable[[App, Outcome], dict[str, Any]] | None = None,
) -> None:
    """Run an operation that ends in one of the four outcomes (``operation`` asks for the
    slot's confirmation itself, after reading what it must read first), print it, exit
    with its code."""

    from shipway.cli.pipe import carry_on
    from shipway.engine.signals import signals_raise

    carry_on(f"the {click.get_current_context().info_name or 'operation'}")

    def body() -> int:
        reporter = _reporter(obj)
        app = obj.app()
        outcome = operation(app, reporter)
        _close_reporters(obj)  # the live view goes before the outcome is printed
        extra = more_json(app, outcome) if more_json is not None and obj.json else {}
        return _outcome(obj, outcome, extra)

    # once the engine has settled the outcome, a signal while it is printed is said and
    # the exit code stays the outcome's
    with signals_raise():
        _run(obj, body)


def _outcome(obj: Context, outcome: Outcome, extra: dict[str, Any] | None = None) -> int:
    from shipway.cli.report import emit_json

    if obj.json:
        emit_json({**outcome.to_json(), **(extra or {})})
    else:
        from shipway.cli.hints import pasteable
        from shipway.cli.term import colour_on, paint

        on = colour_on(sys.stdout)
        click.echo(paint(pasteable(outcome.line()), outcome.kind, on))
        for line in map(pasteable, outcome.details()):
            click.echo(f"  {paint(line, 'warn', on) if line.startswith('warning:') else line}")
    return outcome.exit_code


class _Commands(click.Group):
    """The command group: ``-f`` after a command that has no ``-f`` of its own is refused
    with the line that works (it belongs before the command)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.NoSuchOption as exc:
            if exc.option_name in ("-f", "--file") and exc.ctx is not None:
                from shipway.cli.hints import file_after_command

                hint = file_after_command(sys.argv[1:], str(exc.ctx.info_name))
                raise click.UsageError(hint, exc.ctx) from exc
            raise


@click.group(
    cls=_Commands,
    epilog=EXIT_CODES,
    context_settings={"help_option_names": ["-h", "--help"]},
)
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

    SLOT may be left out of every command when the spec has one slot (a spec without
    [slots] has one: local).

    \b
    Typical use:
      shipway init                      write a shipway.toml from the Procfile, .env …
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
      shipway run prod -- CMD ARGS      a one-off command in the deployed release
      shipway stop local                stop what runs in a slot (records stay)
      shipway set-image prod Deployment/web REF   roll a workload shipway did not render
      shipway destroy test1 --confirm test1   delete it all but the volumes
      shipway ls                        every app and slot this machine runs
      shipway completion bash           shell completion (see README)
      shipway helm values RELEASE -n NS values of a Helm release (no helm binary)
    """
    ctx.ensure_object(Context).spec_file = spec_file
    from shipway.cli.hints import remember

    typed = ctx.get_parameter_source("spec_file") == click.core.ParameterSource.COMMANDLINE
    remember(spec_file if typed else None, cli.commands)


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
                f"ok: {app.name} — processes: "
                + (", ".join(app.processes) or "none (every slot's objects come from a source)")
                + f"; slots: {', '.join(slots)}"
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
@slot_argument
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
    slot: str | None,
    plan_file: str | None,
    confirm: str | None,
    timeout: float,
    rollback_timeout: float,
) -> None:
    """Re-assert SLOT's deployed release as recorded: start what stopped, recreate what is
    missing, replace what drifted, remove what nobody declared; leave the rest alone."""

    from shipway import api

    def operation(app: App, reporter: Reporter) -> Outcome:
        name = one_slot(app, slot)
        return api.repair(
            app,
            name,
            confirm=_confirmation(app, name, confirm),
            saved_plan=_saved_plan(plan_file),
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        )

    _roll(obj, operation)


def take_host_option(f: F) -> F:
    return click.option(
        "--take-host",
        is_flag=True,
        help="Take a host another app or slot serves today (refused, naming it, otherwise).",
    )(f)


def take_over_option(f: F) -> F:
    return click.option(
        "--take-over",
        is_flag=True,
        help="Source slots: take objects a Helm release or another tool owns (said, per object).",
    )(f)


@cli.command()
@slot_argument
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
@take_over_option
@build_option
@timeout_options
@output_option
@pass_obj
def deploy(
    obj: Context,
    slot: str | None,
    image: str | None,
    plan_file: str | None,
    dry_run: bool,
    force: bool,
    confirm: str | None,
    take_host: bool,
    take_over: bool,
    build: bool,
    timeout: float,
    rollback_timeout: float,
) -> None:
    """Roll out to SLOT: lock, read the anchor, build; the release's prerequisites, its release
    command (before any new process starts), the new processes and their health gate, the
    switch, the prune; record — or roll back (a failed release command started nothing).

    When nothing differs from the deployed release (spec, image, secrets, and the target
    matching its record) it says "no changes", applies nothing, records no revision and
    exits 0; --force rolls every process anyway. For a slot whose objects come from a
    source, --image sets the image of the containers the source's image_containers names."""
    if dry_run:
        if plan_file:
            _fail(obj, 2, "--dry-run prints a new plan; it takes no --plan FILE")
        from shipway.cli.changes import show_plan

        def dry_run_body() -> int:
            show_plan(obj, slot, image, None, False, take_host, force, take_over, build)
            return 0

        _run(obj, dry_run_body)
        return

    from shipway import api

    def operation(app: App, reporter: Reporter) -> Outcome:
        name = one_slot(app, slot)
        return api.deploy(
            app,
            name,
            saved_plan=_saved_plan(plan_file),  # a bad plan file is refused before asking
            confirm=_confirmation(app, name, confirm),
            image=image,
            take_host=take_host,
            force=force,
            take_over=take_over,
            build=build,
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        )

    _roll(obj, operation, _urls(slot))


def _urls(slot: str | None) -> Callable[[App, Outcome], dict[str, Any]]:
    """For ``-o json``: the URLs the slot serves once the operation settled, by process
    (``{"urls": {"web": ["http://…"]}}``, empty when nothing is routed) — what the text
    output's ``serving http://…`` lines say."""

    def urls(app: App, outcome: Outcome) -> dict[str, Any]:
        from shipway import api

        found: dict[str, list[str]] = {}
        try:
            for p in api.status(app, one_slot(app, slot)).processes:
                url = p.detail.get("url")
                if url:
                    found.setdefault(p.process, [])
                    found[p.process] += [u for u in str(url).split() if u not in found[p.process]]
        except Exception as exc:  # the outcome stands; the URLs are a courtesy
            return {"urls": found, "urls_error": f"{type(exc).__name__}: {exc}"}
        return {"urls": found}

    return urls


def _revision(value: Any) -> int | None:
    """REVISION as a number (it may have arrived in SLOT's place: ``rollback 3``)."""
    if value is None or isinstance(value, int):
        return value
    try:
        return int(value)
    except ValueError:
        from shipway.errors import InputError

        raise InputError(f"REVISION must be a revision number, not {value!r}") from None


@cli.command()
@slot_argument
@click.argument("revision", required=False, shell_complete=complete_revision)
@confirm_option
@timeout_options
@output_option
@pass_obj
def rollback(
    obj: Context,
    slot: str | None,
    revision: str | None,
    confirm: str | None,
    timeout: float,
    rollback_timeout: float,
) -> None:
    """Re-deploy REVISION (default: the previous good one) of SLOT as a new revision."""

    from shipway import api

    def operation(app: App, reporter: Reporter) -> Outcome:
        name, rev = pick_slot(app, slot, revision)
        return api.rollback(
            app,
            name,
            _revision(rev),
            confirm=_confirmation(app, name, confirm),
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        )

    _roll(obj, operation)


@cli.command()
@slot_argument
@click.argument("process", required=False, shell_complete=complete_process)
@confirm_option
@timeout_options
@output_option
@pass_obj
def restart(
    obj: Context,
    slot: str | None,
    process: str | None,
    confirm: str | None,
    timeout: float,
    rollback_timeout: float,
) -> None:
    """Restart PROCESS (default: all) in SLOT; other processes are left untouched."""

    from shipway import api

    def operation(app: App, reporter: Reporter) -> Outcome:
        name, proc = pick_slot(app, slot, process)
        return api.restart(
            app,
            name,
            proc,
            confirm=_confirmation(app, name, confirm),
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        )

    _roll(obj, operation)


@cli.command()
@slot_argument
@confirm_option
@timeout_options
@output_option
@pass_obj
def promote(
    obj: Context, slot: str | None, confirm: str | None, timeout: float, rollback_timeout: float
) -> None:
    """Roll SLOT's deployed release, by digest, to the slot it promotes to."""

    from shipway import api

    def operation(app: App, reporter: Reporter) -> Outcome:
        name = one_slot(app, slot)
        return api.promote(
            app,
            name,
            # the destination's guard: promotion changes the slot it promotes to
            confirm=_confirmation(app, app.slots.get(name).promotes_to or name, confirm),
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        )

    _roll(obj, operation)


@cli.command()
@slot_argument
@click.option(
    "--app",
    "app_name",
    metavar="NAME",
    help="Local slots: stop app NAME as its own records say, without its spec (its "
    "directory may be gone; `shipway ls` lists them). SLOT is then required.",
)
@confirm_option
@output_option
@pass_obj
def stop(obj: Context, slot: str | None, app_name: str | None, confirm: str | None) -> None:
    """Stop SLOT's processes (hosts dropped, requests drained). Records stay: the deployed
    release comes back with deploy or restart."""

    def body() -> int:
        from shipway import api

        if app_name is not None:
            if slot is None:
                from shipway.errors import InputError

                raise InputError(f"--app needs SLOT (hint: shipway stop local --app {app_name})")
            app = api.recorded_app(app_name, slot)
        else:
            from shipway.errors import InputError, SpecInvalid

            try:
                app = obj.app()
            except SpecInvalid:
                raise
            except InputError as exc:  # no spec (its directory gone, say)
                raise InputError(
                    f"{exc}; an app whose spec is gone stops by name: shipway stop SLOT "
                    "--app NAME (shipway ls lists them)"
                ) from exc
        name = one_slot(app, slot)
        api.stop(app, name, confirm=_confirmation(app, name, confirm), reporter=_reporter(obj))
        if obj.json:
            from shipway.cli.report import emit_json

            emit_json({"stopped": f"{app.name}/{name}"})
        else:
            click.echo(f"stopped {app.name}/{name}; its release records stay (shipway history)")
        return 0

    _run(obj, body)


# Commands kept in their own modules; imported last, as they use what is above.
from shipway.cli import changes as _changes  # noqa: E402,F401  (plan, diff, history)
from shipway.cli import generations, init, logs, reads  # noqa: E402
from shipway.cli import set_image as _set_image  # noqa: E402,F401  (set-image)
from shipway.cli.build import build  # noqa: E402
from shipway.cli.completion import completion  # noqa: E402
from shipway.cli.destroy import destroy  # noqa: E402
from shipway.cli.helm import helm  # noqa: E402
from shipway.cli.run import run  # noqa: E402

cli.add_command(build)
cli.add_command(destroy)
cli.add_command(helm)
cli.add_command(run)
cli.add_command(completion)
for _module in (reads, logs, generations, init):
    for _command in _module.COMMANDS:
        cli.add_command(_command)


def main() -> None:
    from shipway.cli.pipe import install

    install()
    try:
        cli(prog_name="shipway")
    except SystemExit:
        # only an operation settles an outcome, and it has imported the engine by then:
        # --help and the reads must not pay for importing it here
        signals = sys.modules.get("shipway.engine.signals")
        if signals is not None and signals.settled_outcome() is not None:
            # the outcome is recorded and its code is the exit code: a signal during the
            # interpreter's own exit must not turn it into 130/143
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise
