"""``shipway promote SLOT``: roll the release deployed in SLOT to the slot it promotes to."""

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
    slot_argument,
    timeout_options,
)

if TYPE_CHECKING:
    from shipway.backends.protocol import Reporter
    from shipway.engine.outcome import Outcome
    from shipway.spec.model import App


@click.command()
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
            confirm=confirmation(app, app.slots.get(name).promotes_to or name, confirm),
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        )

    roll(obj, operation)
