"""``shipway destroy SLOT [--volumes] --confirm SLOT``: remove everything shipway made for the
app in one slot, and its data only when asked.

It lists what it will delete before anything happens (the listing is the whole of what a
run without ``--confirm`` does, then it refuses with exit code 3), and it needs the slot's
name typed back on every slot: it deletes the release records, so nothing can be rolled
back after it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from shipway.cli.common import (
    Context,
    confirm_option,
    one_slot,
    output_option,
    pass_obj,
    reporter_of,
    run_body,
    slot_argument,
    told,
)

if TYPE_CHECKING:
    from shipway.backends.protocol import Leftover


@click.command()
@slot_argument
@click.option(
    "--volumes",
    is_flag=True,
    help="Also delete the slot's volumes: the app's data. This cannot be undone.",
)
@confirm_option
@output_option
@pass_obj
def destroy(obj: Context, slot: str | None, volumes: bool, confirm: str | None) -> None:
    """Delete everything shipway made for the app in SLOT: what runs, its routes, config
    files, snapshots, release records and lock. Volumes (the app's data) stay unless
    --volumes is given; a later deploy finds them again.

    \b
    It lists what it deletes first, and needs --confirm SLOT on every slot:
      shipway destroy staging                      list, then refuse (exit 3)
      shipway destroy staging --confirm staging    delete all but the volumes
      shipway destroy staging --volumes --confirm staging
    """

    def body() -> int:
        from shipway import api
        from shipway.cli.report import emit_json

        app = obj.app()
        name = one_slot(app, slot)
        found = api.leftovers(app, name)
        kept = [item for item in found if item.data and not volumes]
        doomed = [item for item in found if item not in kept]
        if not obj.json:
            _listing(f"{app.name}/{name}", doomed, kept)
        answer = confirm
        if answer is None and doomed and sys.stdin.isatty() and not obj.json:
            answer = (
                str(
                    click.prompt(
                        f"this deletes what is listed above; type {name!r} to confirm",
                        default="",
                        show_default=False,
                        err=True,
                    )
                )
                or None
            )
        if not doomed:  # nothing to do: nothing started, nothing told
            if obj.json:
                emit_json({"slot": name, "deleted": [], "kept": [i.to_json() for i in kept]})
            return 0
        reporter = reporter_of(obj)
        api.destroy(app, name, volumes=volumes, confirm=answer, reporter=reporter)
        return told(obj, reporter)

    run_body(obj, body)


def _listing(target: str, doomed: list[Leftover], kept: list[Leftover]) -> None:
    if not doomed and not kept:
        click.echo(f"nothing of {target} to delete: shipway made nothing there")
        return
    if doomed:
        click.echo(f"destroy {target} deletes:")
        for item in doomed:
            click.echo(f"  - {item}{'  (DATA)' if item.data else ''}")
    else:
        click.echo(f"nothing of {target} to delete but its volumes")
    if kept:
        click.echo("and keeps (the app's data; --volumes deletes them too):")
        for item in kept:
            click.echo(f"  = {item}")
