"""``shipway rollback SLOT [REV]``: roll back to the release before, or to revision REV."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from shipway.cli.common import (
    Context,
    confirm_option,
    confirmation,
    output_option,
    pass_obj,
    pick_slot,
    revision_of,
    roll,
    slot_argument,
    timeout_options,
)
from shipway.cli.completion import complete_revision

if TYPE_CHECKING:
    from shipway.backends.protocol import Reporter
    from shipway.engine.outcome import Outcome
    from shipway.spec.model import App


@click.command()
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
            revision_of(rev),
            confirm=confirmation(app, name, confirm),
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        )

    roll(obj, operation)
