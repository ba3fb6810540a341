"""The ``shipway`` command: the group, its global options, and the one list of its commands.

Each command lives in a module of its own under ``shipway.cli`` and is a plain
``click.command``; what commands share is :mod:`shipway.cli.common`. A command is added to
the tool by naming it in :data:`COMMANDS`, and nowhere else.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

import click

from shipway.cli.audit import audit
from shipway.cli.backup import backup, restore
from shipway.cli.build import build
from shipway.cli.canary import canary
from shipway.cli.changes import diff, history, plan
from shipway.cli.common import EXIT_CODES, Context
from shipway.cli.completion import completion
from shipway.cli.dashboard import dashboard
from shipway.cli.deploy import deploy
from shipway.cli.destroy import destroy
from shipway.cli.freeze import freeze, unfreeze
from shipway.cli.generations import gc, gens, sleep, switch, wake
from shipway.cli.helm import helm
from shipway.cli.init import init
from shipway.cli.logs import logs
from shipway.cli.promote import promote
from shipway.cli.reads import list_slots, status
from shipway.cli.repair import repair
from shipway.cli.restart import restart
from shipway.cli.rollback import rollback
from shipway.cli.run import run
from shipway.cli.set_image import set_image
from shipway.cli.stop import stop
from shipway.cli.validate import validate


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
      shipway backup prod db            an accessory's data to a file (+ its .sha256)
      shipway restore staging db FILE --confirm staging   and back, checksum first
      shipway stop local                stop what runs in a slot (records stay)
      shipway set-image prod Deployment/web REF   roll a workload shipway did not render
      shipway destroy test1 --confirm test1   delete it all but the volumes
      shipway ls                        every app and slot this machine runs
      shipway dashboard                 the same on a web page, read-only (127.0.0.1:7450)
      shipway completion bash           shell completion (see README)
      shipway helm values RELEASE -n NS values of a Helm release (no helm binary)
    """
    ctx.ensure_object(Context).spec_file = spec_file
    from shipway.cli.hints import remember

    typed = ctx.get_parameter_source("spec_file") == click.core.ParameterSource.COMMANDLINE
    remember(spec_file if typed else None, cli.commands)


#: every command of the tool, in the order ``--help`` lists them
COMMANDS: list[click.Command] = [
    init,
    validate,
    plan,
    diff,
    deploy,
    build,
    status,
    list_slots,
    dashboard,
    history,
    audit,
    logs,
    rollback,
    restart,
    promote,
    repair,
    run,
    backup,
    restore,
    stop,
    set_image,
    destroy,
    freeze,
    unfreeze,
    gens,
    switch,
    sleep,
    wake,
    gc,
    canary,
    helm,
    completion,
]
for _command in COMMANDS:
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
