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
        from shipway.cli.report import emit_json

        app = obj.app()
        name = one_slot(app, slot)
        built = api.build(
            app, name, confirm=confirmation(app, name, confirm), reporter=reporter_of(obj)
        )
        doc = {
            "slot": name,
            "kind": built.kind,
            "what": built.what,
            "inputs": built.inputs,
            "result": built.result,
            "reused": built.reused,
            "duration": round(built.duration, 3),
            "image_meta": built.meta.to_json() if built.meta else None,
        }
        if obj.json:
            emit_json(doc)
            return 0
        verb = "reused (same inputs)" if built.reused else f"built in {built.duration:.1f}s"
        click.echo(f"{built.kind} {built.what} {verb}: {built.result}")
        if built.meta is not None:
            m = built.meta
            port = f", exposes {m.exposed_port}" if m.exposed_port else ""
            click.echo(f"  {m.source_type} image, working dir {m.working_dir or '/'}{port}")
        return 0

    run_body(obj, body)
