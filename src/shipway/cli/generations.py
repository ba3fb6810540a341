"""``shipway gens | switch | sleep | wake | gc``: the generations of a blue-green slot.

Engine clients are imported inside the commands, so ``shipway --help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from shipway.cli.common import (
    Context,
    confirm_option,
    confirmation,
    one_slot,
    output_option,
    pass_obj,
    pick_slot,
    reporter_of,
    roll,
    run_body,
    slot_argument,
    take_host_option,
    timeout_options,
    told,
)
from shipway.cli.completion import complete_generation

if TYPE_CHECKING:
    from shipway.backends.protocol import Reporter
    from shipway.engine.outcome import Outcome
    from shipway.spec.model import App


def generation_argument(f: Any) -> Any:
    # not required for click: with one slot, GENERATION may arrive in SLOT's place
    return click.argument(
        "generation", required=False, metavar="GENERATION", shell_complete=complete_generation
    )(f)


def _slot_and_generation(app: App, slot: str | None, generation: str | None) -> tuple[str, str]:
    name, gen = pick_slot(app, slot, generation)
    if gen is None:
        from shipway.errors import InputError

        raise InputError("GENERATION is missing (hint: shipway gens SLOT lists them)")
    return str(name), str(gen)


@click.command()
@slot_argument
@output_option
@pass_obj
def gens(obj: Context, slot: str | None) -> None:
    """List SLOT's generations (blue-green): release, state (live / awake / asleep), age."""

    def body() -> int:
        from shipway import api
        from shipway.cli.report import age, listing

        app = obj.app()
        name = one_slot(app, slot)
        rows = [g.to_json() for g in api.generations(app, name)]
        if not obj.json:
            for row in rows:
                row["age"] = age(str(row["created_at"]))
        return listing(obj.json, name, "generations", rows, ["name", "state", "release", "age"])

    run_body(obj, body)


@click.command()
@slot_argument
@generation_argument
@confirm_option
@take_host_option
@timeout_options
@output_option
@pass_obj
def switch(
    obj: Context,
    slot: str | None,
    generation: str | None,
    confirm: str | None,
    take_host: bool,
    timeout: float,
    rollback_timeout: float,
) -> None:
    """Switch SLOT to GENERATION: wake, wait, point hosts, drop the old route, sleep it."""

    from shipway import api

    def operation(app: App, reporter: Reporter) -> Outcome:
        name, gen = _slot_and_generation(app, slot, generation)
        return api.switch(
            app,
            name,
            gen,
            confirm=confirmation(app, name, confirm),
            take_host=take_host,
            timeout=timeout,
            rollback_timeout=rollback_timeout,
            reporter=reporter,
        )

    roll(obj, operation)


def _generation_command(verb: str, doc: str) -> click.Command:
    @click.command(name=verb, help=doc)
    @slot_argument
    @generation_argument
    @confirm_option
    @output_option
    @pass_obj
    def command(
        obj: Context, slot: str | None, generation: str | None, confirm: str | None
    ) -> None:
        def body() -> int:
            from shipway import api

            app = obj.app()
            name, gen = _slot_and_generation(app, slot, generation)
            action = api.sleep if verb == "sleep" else api.wake
            reporter = reporter_of(obj)
            action(app, name, gen, confirm=confirmation(app, name, confirm), reporter=reporter)
            return told(obj, reporter)

        run_body(obj, body)

    return command


@click.command()
@slot_argument
@click.option(
    "--keep", type=int, default=2, show_default=True, help="How many asleep generations to keep."
)
@confirm_option
@output_option
@pass_obj
def gc(obj: Context, slot: str | None, keep: int, confirm: str | None) -> None:
    """Delete SLOT's asleep generations beyond the KEEP newest; never the live one."""

    def body() -> int:
        from shipway import api

        app = obj.app()
        name = one_slot(app, slot)
        reporter = reporter_of(obj)
        api.gc(app, name, keep, confirm=confirmation(app, name, confirm), reporter=reporter)
        return told(obj, reporter)

    run_body(obj, body)


sleep = _generation_command("sleep", "Put GENERATION of SLOT to sleep (scaled to zero, kept).")
wake = _generation_command(
    "wake", "Wake GENERATION of SLOT and wait until ready; no traffic moves."
)
