"""Blue-green commands: ``gens``, ``switch``, ``sleep``, ``wake``, ``gc`` (a slot's
generations, and the switches between them). Kept apart from the core commands; they use
the same helpers (``_run``, ``_roll``, the options) and register on the same group.
"""

from __future__ import annotations

import click

from shipway.cli import (
    Context,
    _confirmation,
    _list,
    _reporter,
    _roll,
    _run,
    cli,
    confirm_option,
    output_option,
    take_host_option,
    timeout_options,
)

pass_obj = click.make_pass_decorator(Context, ensure=True)


@cli.command()
@click.argument("slot")
@output_option
@pass_obj
def gens(obj: Context, slot: str) -> None:
    """List SLOT's generations (blue-green): release, state (live / awake / asleep), age."""

    def body() -> int:
        from shipway import api

        rows = [g.to_json() for g in api.generations(obj.app(), slot)]
        if not obj.json:
            for row in rows:
                row["age"] = _age(str(row["created_at"]))
        return _list(obj, slot, "generations", rows, ["name", "state", "release", "age"])

    _run(obj, body)


def _age(stamp: str) -> str:
    from datetime import UTC, datetime

    try:
        then = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    seconds = int((datetime.now(UTC) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


@cli.command()
@click.argument("slot")
@click.argument("generation")
@confirm_option
@take_host_option
@timeout_options
@output_option
@pass_obj
def switch(
    obj: Context,
    slot: str,
    generation: str,
    confirm: str | None,
    take_host: bool,
    timeout: float,
    rollback_timeout: float,
) -> None:
    """Switch SLOT to GENERATION: wake, wait, point hosts, drop the old route, sleep it."""

    from shipway import api

    _roll(
        obj,
        lambda app, reporter: api.switch(
            app,
            slot,
            generation,
            confirm=_confirmation(app, slot, confirm),
            take_host=take_host,
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        ),
    )


def _generation_command(name: str, doc: str) -> None:
    @cli.command(name=name, help=doc)
    @click.argument("slot")
    @click.argument("generation")
    @confirm_option
    @output_option
    @pass_obj
    def command(obj: Context, slot: str, generation: str, confirm: str | None) -> None:
        def body() -> int:
            from shipway import api
            from shipway.cli.report import emit_json

            app = obj.app()
            action = api.sleep if name == "sleep" else api.wake
            action(
                app,
                slot,
                generation,
                confirm=_confirmation(app, slot, confirm),
                reporter=_reporter(obj),
            )
            state = "asleep" if name == "sleep" else "awake (no traffic moved)"
            if obj.json:
                emit_json({"slot": slot, "generation": generation, "state": state})
            else:
                click.echo(f"{generation} is {state}")
            return 0

        _run(obj, body)


_generation_command("sleep", "Put GENERATION of SLOT to sleep (scaled to zero, kept).")
_generation_command("wake", "Wake GENERATION of SLOT and wait until ready; no traffic moves.")


@cli.command()
@click.argument("slot")
@click.option(
    "--keep", type=int, default=2, show_default=True, help="How many asleep generations to keep."
)
@confirm_option
@output_option
@pass_obj
def gc(obj: Context, slot: str, keep: int, confirm: str | None) -> None:
    """Delete SLOT's asleep generations beyond the KEEP newest; never the live one."""

    def body() -> int:
        from shipway import api
        from shipway.cli.report import emit_json

        app = obj.app()
        deleted = api.gc(
            app, slot, keep, confirm=_confirmation(app, slot, confirm), reporter=_reporter(obj)
        )
        if obj.json:
            emit_json({"slot": slot, "deleted": deleted})
        else:
            click.echo(f"deleted {len(deleted)} generation(s): {', '.join(deleted) or '-'}")
        return 0

    _run(obj, body)
