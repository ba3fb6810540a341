"""What every command of the ``shipway`` command line shares: the context a command gets
(the spec file, ``-o json``), the options many commands take, how a command body runs
(shipway's errors become their exit codes), and how an outcome is printed.

Heavy modules (engine clients, YAML) are imported by the commands that need them, so
``shipway --help`` starts fast.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from shipway.cli.completion import complete_slot

if TYPE_CHECKING:
    from shipway.backends.protocol import Reporter
    from shipway.engine.outcome import Outcome
    from shipway.events.model import Ended
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
  8   the slot is frozen (shipway freeze, or a window in the spec): the message says why
      and until when; --break-glass REASON overrides, recorded
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
        #: --break-glass REASON: a frozen slot is cleared anyway (guard.breaking_glass)
        self.break_glass: str | None = None

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


def state_dirs_option(f: F) -> F:
    """``--state-dir DIR`` (repeatable): the local state directories whose apps to list."""
    return click.option(
        "--state-dir",
        "state_dirs",
        multiple=True,
        type=click.Path(file_okay=False, path_type=Path),
        help="A local state directory to list (repeatable; default: $SHIPWAY_STATE_DIR, "
        "else $XDG_STATE_HOME/shipway, else ~/.local/state/shipway).",
    )(f)


def confirm_option(f: F) -> F:
    """--confirm SLOT, and --break-glass REASON (every command that needs a clearance)."""

    def set_glass(ctx: click.Context, _: click.Parameter, value: str | None) -> str | None:
        ctx.ensure_object(Context).break_glass = value
        return value

    f = click.option(
        "--break-glass",
        metavar="REASON",
        expose_value=False,
        callback=set_glass,
        help="Change a frozen slot anyway; the reason is recorded in the release and told "
        "in its events (and notifications).",
    )(f)
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


def reporter_of(obj: Context, stream: Any = None) -> Any:
    """Progress for this command (stderr with -o json, or ``stream``); closed when the
    command ends."""
    from shipway.cli.report import TerminalReporter
    from shipway.events.live import LiveFile

    reporter = TerminalReporter(stream or (sys.stderr if obj.json else sys.stdout))
    reporter.also.append(LiveFile())  # every operation, for the dashboard (events/live.py)
    if os.environ.get("SHIPWAY_EVENTS"):  # every event, as JSON lines (docs/events.md)
        from shipway.events.sink import JsonLines

        reporter.also.append(JsonLines(os.environ["SHIPWAY_EVENTS"]))
    obj.reporters.append(reporter)
    return reporter


def close_reporters(obj: Context) -> None:
    while obj.reporters:
        obj.reporters.pop().close()


def confirmation(app: App, slot: str, given: str | None) -> str | None:
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


def fail(
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


def run_body(obj: Context, action: Callable[[], int | None]) -> None:
    """Run a command body, turning shipway's errors into their exit codes."""
    from shipway.errors import Interrupted, ShipwayError, SpecInvalid
    from shipway.guard import breaking_glass

    try:
        try:
            with breaking_glass(obj.break_glass):
                code = action()
        finally:
            close_reporters(obj)
    except SpecInvalid as exc:
        fail(obj, exc.exit_code, str(exc), {"problems": [p.to_json() for p in exc.problems]})
    except ShipwayError as exc:
        fail(obj, exc.exit_code, str(exc))
    except Interrupted as exc:
        fail(obj, exc.exit_code, f"interrupted by {exc}")
    except (KeyboardInterrupt, click.exceptions.Abort):
        # Ctrl-C before the engine took the signals over (a prompt, connecting)
        fail(obj, 130, "interrupted by SIGINT")
    except BrokenPipeError:
        # a read whose stdout reader went away (`| head`): it ends quietly (cli/pipe.py)
        from shipway.cli.pipe import READER_GONE

        sys.exit(READER_GONE)
    except Exception as exc:
        if os.environ.get("SHIPWAY_DEBUG"):
            raise
        fail(
            obj,
            1,
            f"unexpected error: {type(exc).__name__}: {exc} (set SHIPWAY_DEBUG=1 for a traceback)",
        )
    sys.exit(code or 0)


def roll(
    obj: Context,
    operation: Callable[[App, Reporter], Outcome],
    more_json: Callable[[App, Outcome], dict[str, Any]] | None = None,
) -> None:
    """Run an operation that ends in one of the four outcomes (``operation`` asks for the
    slot's confirmation itself, after reading what it must read first), print it, exit
    with its code. ``more_json``: what ``-o json`` adds to the outcome."""

    from shipway.cli.pipe import carry_on
    from shipway.engine.signals import signals_raise

    carry_on(f"the {click.get_current_context().info_name or 'operation'}")

    def body() -> int:
        reporter = reporter_of(obj)
        app = obj.app()
        outcome = operation(app, reporter)
        extra = more_json(app, outcome) if more_json is not None and obj.json else {}
        return told(obj, reporter, extra)

    # once the engine has settled the outcome, a signal while it is printed is said and
    # the exit code stays the outcome's
    with signals_raise():
        run_body(obj, body)


def told(obj: Context, reporter: Any, extra: dict[str, Any] | None = None) -> int:
    """Print how the operation ``reporter`` followed ended — from its ``ended`` event, the
    one source of every command's result — once its live view is closed; its exit code."""
    close_reporters(obj)  # the live view goes before the outcome is printed
    if reporter.ended is None:  # every operation ends in the stream: a bug otherwise
        raise RuntimeError("the operation's outcome was not told as an event")
    return print_outcome(obj, reporter.ended, extra)


def print_outcome(obj: Context, ended: Ended, extra: dict[str, Any] | None = None) -> int:
    """The outcome as the event stream told it (its ``ended`` event): the JSON document,
    or the headline and details."""
    from shipway.cli.report import emit_json

    if obj.json:
        emit_json({**ended.data, **(extra or {})})
    else:
        from shipway.cli.hints import pasteable
        from shipway.cli.term import colour_on, paint

        on = colour_on(sys.stdout)
        click.echo(paint(pasteable(ended.line), ended.outcome, on))
        for line in map(pasteable, ended.details):
            click.echo(f"  {paint(line, 'warn', on) if line.startswith('warning:') else line}")
    return ended.exit_code


pass_obj = click.make_pass_decorator(Context, ensure=True)


def saved_plan(plan_file: str | None) -> Any:
    if not plan_file:
        return None
    from shipway.plan.model import Plan

    try:
        return Plan.from_json(json.loads(Path(plan_file).read_text()))
    except (ValueError, KeyError, TypeError) as exc:
        from shipway.errors import InputError

        raise InputError(f"{plan_file}: not a shipway plan: {exc}") from exc


def take_host_option(f: F) -> F:
    return click.option(
        "--take-host",
        is_flag=True,
        help="Take a host another app or slot serves today (refused, naming it, otherwise).",
    )(f)


def upgrade_accessory_option(f: F) -> F:
    return click.option(
        "--upgrade-accessory",
        "upgrade_accessories",
        metavar="NAME",
        multiple=True,
        help="Change accessory NAME's major version as the spec now declares it (postgres: "
        "a dump and restore into a new cluster, the old data kept until the new server "
        "answers). Without it a major-version change is refused.",
    )(f)


def take_over_option(f: F) -> F:
    return click.option(
        "--take-over",
        is_flag=True,
        help="Source slots: take objects a Helm release or another tool owns (said, per object).",
    )(f)


def revision_of(value: Any) -> int | None:
    """REVISION as a number (it may have arrived in SLOT's place: ``rollback 3``)."""
    if value is None or isinstance(value, int):
        return value
    try:
        return int(value)
    except ValueError:
        from shipway.errors import InputError

        raise InputError(f"REVISION must be a revision number, not {value!r}") from None
