"""``shipway set-image SLOT KIND/NAME[:CONTAINER] IMAGE``: roll one container of a workload
shipway did not render (a Deployment, StatefulSet, DaemonSet or CronJob made by kubectl,
another tool or a person), through the API, under the slot's guard and lock.
"""

from __future__ import annotations

import click

from shipway.cli import (
    Context,
    _confirmation,
    _roll,
    cli,
    confirm_option,
    output_option,
    timeout_options,
)

pass_obj = click.make_pass_decorator(Context, ensure=True)


@cli.command("set-image")
@click.argument("slot")
@click.argument("workload", metavar="KIND/NAME[:CONTAINER]")
@click.argument("image")
@confirm_option
@timeout_options
@output_option
@pass_obj
def set_image(
    obj: Context,
    slot: str,
    workload: str,
    image: str,
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
    """
    from shipway import api

    _roll(
        obj,
        lambda app, reporter: api.set_image(
            app,
            slot,
            workload,
            image,
            confirm=_confirmation(app, slot, confirm),
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        ),
    )
