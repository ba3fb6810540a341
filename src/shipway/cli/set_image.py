"""``shipway set-image [SLOT] KIND/NAME[:CONTAINER] IMAGE``: roll one container of a workload
shipway did not render (a Deployment, StatefulSet, DaemonSet or CronJob made by kubectl,
another tool or a person), through the API, under the slot's guard and lock.
"""

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
from shipway.errors import InputError

if TYPE_CHECKING:
    from shipway.backends.protocol import Reporter
    from shipway.engine import Outcome
    from shipway.spec.model import App


@click.command("set-image")
@slot_argument
@click.argument("workload", metavar="KIND/NAME[:CONTAINER]", required=False)
@click.argument("image", required=False)
@confirm_option
@timeout_options
@output_option
@pass_obj
def set_image(
    obj: Context,
    slot: str | None,
    workload: str | None,
    image: str | None,
    confirm: str | None,
    timeout: float,
    rollback_timeout: float,
) -> None:
    """Roll a workload of SLOT's namespace that shipway did not render to IMAGE.

    \b
    The container's current image is read first (the anchor); only that container's
    image is patched; the rollout is waited on and fails fast like a deploy's; on failure
    the anchor image is put back (rolled-back, exit 10). Recorded in the slot's history.
    CONTAINER may be left out when the workload has one container.

    \b
    Examples:
      shipway set-image legacy Deployment/web registry.example/web:2.4.1
      shipway set-image prod StatefulSet/db:postgres postgres:16.4 --confirm prod
      shipway set-image Deployment/web registry.example/web:2.4.1   (one slot)
    """
    from shipway import api

    def operation(app: App, reporter: Reporter) -> Outcome:
        name, kind_name, ref = pick_slot(app, slot, workload, image)
        if kind_name is None or ref is None:
            raise InputError(
                "set-image needs KIND/NAME[:CONTAINER] and IMAGE "
                "(hint: shipway set-image [SLOT] Deployment/web registry.example/web:2)"
            )
        return api.set_image(
            app,
            name,
            kind_name,
            ref,
            confirm=confirmation(app, name, confirm),
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        )

    roll(obj, operation)
