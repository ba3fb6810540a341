"""``shipway build SLOT``: build what a deploy of SLOT would run, without deploying it."""

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
@confirm_option
@output_option
@pass_obj
def build(obj: Context, slot: str | None, confirm: str | None) -> None:
    """Build SLOT's image from the app's Dockerfile and push it (Docker, Kubernetes), or its
    dependency environment (local). Nothing is deployed; the same source is never built
    twice. `shipway deploy SLOT --build` builds and deploys in one go.

    \b
    The image is tagged REPOSITORY:src-<digest of the build inputs> in the repository
    app.image names, pushed with your Docker credentials, and deployed by digest.
    """

    def body() -> int:
        from shipway import api

        app = obj.app()
        name = one_slot(app, slot)
        reporter = reporter_of(obj)
        api.build(app, name, confirm=confirmation(app, name, confirm), reporter=reporter)
        return told(obj, reporter)

    run_body(obj, body)
