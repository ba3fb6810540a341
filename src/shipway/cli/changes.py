"""The commands that say what changes: ``plan`` (and ``deploy --dry-run``), ``diff``, and
``history`` (with ``--verbose``, what each revision changed).

Secret values never reach their output: a change to a secret names the key only, a
secret-bearing config file is named and never shown, and plans leave the records' secret
marks out of their JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from shipway.cli import Context, _list, _run, build_option, cli, output_option, pass_obj

#: ``plan --detailed-exitcode``: the plan changes something (0: no changes). Terraform's
#: -detailed-exitcode uses 2, which is shipway's invalid-input code.
EXIT_CHANGES = 6


@cli.command()
@click.argument("slot")
@click.option("--image", metavar="REF", help="Plan for this image instead of the spec's.")
@click.option(
    "--out",
    "out",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Save the plan; apply it later with deploy --plan FILE (repair --plan FILE).",
)
@click.option(
    "--repair",
    is_flag=True,
    help="Plan a repair instead: re-assert the deployed release, changing only what drifted.",
)
@click.option(
    "--take-host",
    is_flag=True,
    help="Plan taking a host another app or slot serves today (refused otherwise).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Plan the redeploy `deploy --force` would do even when nothing changed.",
)
@click.option(
    "--detailed-exitcode",
    is_flag=True,
    help=f"Exit 0 when there are no changes, {EXIT_CHANGES} when there are (errors as usual).",
)
@build_option
@output_option
@pass_obj
def plan(
    obj: Context,
    slot: str,
    image: str | None,
    out: str | None,
    repair: bool,
    take_host: bool,
    force: bool,
    detailed_exitcode: bool,
    build: bool,
) -> None:
    """Show what a deploy to SLOT would change and do. Touches nothing, starts nothing.

    \b
    The changes are against the deployed release's record and the target: image or
    source digest, env (plain values old → new; secrets named, never shown), config
    files (unified diffs; secret-bearing files named only), processes, routes, the
    release command, and any drift. Nothing differs: "no changes", and a deploy would
    do nothing. In CI: plan --detailed-exitcode exits 0 (no changes) or 6 (changes)."""

    def body() -> int:
        code = show_plan(obj, slot, image, out, repair, take_host, force, build)
        return code if detailed_exitcode else 0

    _run(obj, body)


def show_plan(
    obj: Context,
    slot: str,
    image: str | None,
    out: str | None,
    repair: bool,
    take_host: bool,
    force: bool = False,
    build: bool = False,
) -> int:
    """``plan`` (and ``deploy --dry-run``, which is exactly this): read-only. Returns 0
    when the plan changes nothing, EXIT_CHANGES when it does."""
    from shipway import api

    app = obj.app()
    the_plan = api.plan(
        app, slot, image=image, repair=repair, take_host=take_host, force=force, build=build
    )
    detail = [] if the_plan.unchanged else api.object_diff(app, slot, the_plan)
    if out:
        Path(out).write_text(json.dumps(the_plan.to_json(), indent=2, sort_keys=True) + "\n")
    if obj.json:
        from shipway.cli.report import emit_json

        emit_json({**the_plan.to_json(), "diff": detail, "saved_to": out})
    else:
        for line in the_plan.describe() + detail:
            click.echo(line)
        if out:
            verb = "repair" if repair else "deploy"
            click.echo(f"saved to {out}; apply with: shipway {verb} {slot} --plan {out}")
    return 0 if the_plan.unchanged else EXIT_CHANGES


@cli.command()
@click.argument("slot")
@click.argument("rev_a", required=False, type=int, metavar="[REV_A]")
@click.argument("rev_b", required=False, type=int, metavar="[REV_B]")
@output_option
@pass_obj
def diff(obj: Context, slot: str, rev_a: int | None, rev_b: int | None) -> None:
    """What differs between releases of SLOT; secrets are named, never shown.

    \b
    shipway diff SLOT            the deployed release against what a deploy would run now
    shipway diff SLOT REV        revision REV against its predecessor
    shipway diff SLOT REV_A REV_B
    With revisions it reads the release records only, so it works after the images and
    the snapshots are gone."""

    def body() -> int:
        from shipway import api

        result = api.diff(obj.app(), slot, rev_a, rev_b)
        if obj.json:
            from shipway.cli.report import emit_json

            emit_json({"slot": slot, **result.to_json()})
        else:
            for line in result.describe():
                click.echo(line)
        return 0

    _run(obj, body)


@cli.command()
@click.argument("slot")
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Add a line per revision saying what it changed against its predecessor.",
)
@output_option
@pass_obj
def history(obj: Context, slot: str, verbose: bool) -> None:
    """The release history of SLOT, oldest first."""

    def body() -> int:
        from shipway import api

        releases = api.history(obj.app(), slot)
        rows = [r.summary() for r in releases]
        columns = ["revision", "status", "updated_at", "image", "description"]
        if verbose:
            from shipway.plan.diff import history_diffs

            diffs = history_diffs(releases)
            for row in rows:
                found = diffs[row["revision"]]
                row["changed"] = found.summary()
                if obj.json:
                    row["changes"] = [c.to_json() for c in found.changes]
            columns.append("changed")
        return _list(obj, slot, "releases", rows, columns)

    _run(obj, body)
