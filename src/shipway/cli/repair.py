"""``shipway repair SLOT``: put back what the deployed release runs, where the target drifted."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from shipway.cli.common import (
    Context,
    confirm_option,
    confirmation,
    one_slot,
    output_option,
    pass_obj,
    roll,
    saved_plan,
    slot_argument,
    timeout_options,
)

if TYPE_CHECKING:
    from shipway.backends.protocol import Reporter
    from shipway.engine.outcome import Outcome
    from shipway.spec.model import App


@click.command()
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
            confirm=confirmation(app, name, confirm),
            saved_plan=saved_plan(plan_file),
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        )

    roll(obj, operation)
