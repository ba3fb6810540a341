"""``shipway validate``: check the spec and list every problem in it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from shipway.cli.common import (
    Context,
    output_option,
    pass_obj,
    run_body,
)

if TYPE_CHECKING:
    pass


@click.command()
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

    run_body(obj, body)
