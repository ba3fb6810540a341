"""``shipway stop SLOT``: stop what runs in a slot; its release records stay."""

from __future__ import annotations

import click

from shipway.cli.common import (
    Context,
    confirm_option,
    confirmation,
    one_slot,
    output_option,
    pass_obj,
    reporter_of,
    run_body,
    slot_argument,
    told,
)


@click.command()
@slot_argument
@click.option(
    "--app",
    "app_name",
    metavar="NAME",
    help="Local slots: stop app NAME as its own records say, without its spec (its "
    "directory may be gone; `shipway ls` lists them). SLOT is then required.",
)
@confirm_option
@output_option
@pass_obj
def stop(obj: Context, slot: str | None, app_name: str | None, confirm: str | None) -> None:
    """Stop SLOT's processes (hosts dropped, requests drained). Records stay: the deployed
    release comes back with deploy or restart."""

    def body() -> int:
        from shipway import api

        if app_name is not None:
            if slot is None:
                from shipway.errors import InputError

                raise InputError(f"--app needs SLOT (hint: shipway stop local --app {app_name})")
            app = api.recorded_app(app_name, slot)
        else:
            from shipway.errors import InputError, SpecInvalid

            try:
                app = obj.app()
            except SpecInvalid:
                raise
            except InputError as exc:  # no spec (its directory gone, say)
                raise InputError(
                    f"{exc}; an app whose spec is gone stops by name: shipway stop SLOT "
                    "--app NAME (shipway ls lists them)"
                ) from exc
        name = one_slot(app, slot)
        reporter = reporter_of(obj)
        api.stop(app, name, confirm=confirmation(app, name, confirm), reporter=reporter)
        return told(obj, reporter)

    run_body(obj, body)
