"""``shipway restart SLOT [PROCESS]``: restart one process type, leaving the others untouched."""

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
    roll,
    slot_argument,
    timeout_options,
)
from shipway.cli.completion import complete_process

if TYPE_CHECKING:
    from shipway.backends.protocol import Reporter
    from shipway.engine.outcome import Outcome
    from shipway.spec.model import App


@click.command()
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
            confirm=confirmation(app, name, confirm),
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        )

    roll(obj, operation)
